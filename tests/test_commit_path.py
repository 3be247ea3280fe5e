"""The object-store commit path under faults: the create-only probe and lost answers.

Every test goes through ``tests.faultproxy`` (a loopback proxy between s3fs and moto), so the
faults are real dropped connections and real 500s, seen by s3fs and botocore as in production:
- a probe whose request or answer is lost must not turn the store into a single-writer store
  (issue 13, defect 1: reported commits were overwritten by a second writer);
- a probe that cannot complete refuses to open the store for writing, nothing written;
- a backend proven not to honour create-only writes is refused unless single_writer=True;
- a lost answer to a record's create-only PUT is not a conflict: the record is read back.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

import ckptfs
from ckptfs.errors import CapabilityError, ConflictError, OutcomeUnknown, StorageError
from tests.conftest import TALLY, new_s3_url
from tests.faultproxy import FaultProxy, Rule
from tests.racer import state_for

RACER = str(Path(__file__).with_name("racer.py"))
#: botocore without its own retries, so that a test of persistent failure is fast (s3fs still
#: retries connection errors itself)
FEW_RETRIES = {"config_kwargs": {"retries": {"max_attempts": 1}}}
PROBE_PUT = dict(method="PUT", path=r"/tmp/probe-")
RECORD_CREATE = dict(method="PUT", path=r"/runs/[^/]+/\d{20}$", header="If-None-Match")


def _objects(url: str, s3_options: dict[str, Any], prefix: str) -> list[str]:
    """What is stored under ``prefix`` of the store at ``url`` (straight to moto)."""
    from ckptfs.storage import open_storage

    return sorted(open_storage(url, **s3_options).scan(prefix))


# -- defect 1: the probe -----------------------------------------------------------------------
def test_lost_answer_to_the_probe_keeps_create_only(fault_proxy: FaultProxy) -> None:
    """The first attempt of each probe PUT lands but its answer is lost; the retry then finds
    the probe object present (412). Before the fix: RuntimeWarning, single-writer mode."""
    fault_proxy.set_rules([Rule("drop_response", first_per_path=True, **PROBE_PUT)])
    store = ckptfs.open_store(new_s3_url(), **fault_proxy.options())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        snap = store.start_run("r").checkpoint({"x": 1})
    assert fault_proxy.faults["drop_response"] >= 1
    assert store.storage.capabilities.create_only, store.storage.capabilities
    assert store.read(snap) == {"x": 1}


def test_lost_probe_requests_keep_create_only(fault_proxy: FaultProxy) -> None:
    """The first attempt of each probe PUT never reaches the server."""
    fault_proxy.set_rules([Rule("drop_request", first_per_path=True, **PROBE_PUT)])
    store = ckptfs.open_store(new_s3_url(), **fault_proxy.options())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        store.start_run("r").checkpoint({"x": 1})
    assert fault_proxy.faults["drop_request"] >= 1
    assert store.storage.capabilities.create_only


def test_a_probe_that_cannot_complete_writes_nothing(fault_proxy: FaultProxy,
                                                     s3_options: dict[str, Any]) -> None:
    """Every probe PUT fails (500): the store is not opened for writing and nothing of the
    commit is written. Before the fix: a RuntimeWarning, then an unfenced commit."""
    fault_proxy.set_rules([Rule("error", status=500, **PROBE_PUT)])
    url = new_s3_url()
    store = ckptfs.open_store(url, **fault_proxy.options(**FEW_RETRIES))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(StorageError, match="create-only") as e:
            store.start_run("r").checkpoint({"x": 1})
    assert not isinstance(e.value, CapabilityError)
    assert "nothing was written" in str(e.value)
    assert fault_proxy.faults["error"] >= 2  # it was retried
    assert _objects(url, s3_options, "runs") == []
    assert _objects(url, s3_options, "snapshots") == []
    assert _objects(url, s3_options, "chunks") == []


def test_a_backend_without_create_only_is_refused_unless_single_writer(
        fault_proxy: FaultProxy, s3_options: dict[str, Any]) -> None:
    """A server that ignores If-None-Match (the proxy strips it): the probe proves the store is
    not exclusive; writing is refused, and allowed only with single_writer=True."""
    fault_proxy.set_rules([Rule("strip_header", method="PUT", header="If-None-Match")])
    url = new_s3_url()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(CapabilityError, match="single_writer=True"):
            ckptfs.open_store(url, **fault_proxy.options()).start_run("r").checkpoint({"x": 1})
        assert _objects(url, s3_options, "runs") == []
        store = ckptfs.open_store(url, **fault_proxy.options(single_writer=True))
        snap = store.start_run("r").checkpoint({"x": 1})
    assert not store.storage.capabilities.create_only
    assert "single writer" in store.storage.capabilities.create_only_how
    assert store.read(snap) == {"x": 1}


#: creates proved landed by a read-back in the racer processes of this session
READ_BACKS: list[int] = []


def _race(url: str, env: dict[str, str], writers: int, attempts: int, tmp_path: Path
          ) -> list[tuple[int, dict[str, Any]]]:
    """Run ``writers`` racer processes on ``url``; their outcomes (and, in READ_BACKS, how
    many of their creates a read-back proved landed)."""
    import os

    go = tmp_path / f"go-{os.urandom(4).hex()}"
    procs = [subprocess.Popen([sys.executable, RACER, url, str(w), str(attempts), str(go)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, **env})
             for w in range(writers)]
    go.touch()
    out = []
    for w, p in enumerate(procs):
        stdout, stderr = p.communicate(timeout=300)
        assert p.returncode == 0, stderr[-3000:]
        out += [(w, json.loads(line)) for line in stdout.splitlines()]
        READ_BACKS.append(json.loads(stderr.strip().splitlines()[-1])["landed_on_read_back"])
    assert len(out) == writers * attempts * 2
    return out


def check_race(store: ckptfs.Store, outcomes: list[tuple[int, dict[str, Any]]],
               run_id: str = "shared") -> dict[str, int]:
    """No reported commit lost or duplicated, nothing reported as a conflict that landed,
    nothing landed unreported: every snapshot of ``run_id`` is one writer's reported commit
    (or an outcome it was told is unknown). Returns the tallies."""
    mine = [(w, r) for w, r in outcomes if r["run"] == run_id]
    wins = [(w, r) for w, r in mine if r["ok"]]
    assert all(r["why"] in ("conflict", "resume-conflict", "unknown", "storage")
               for _, r in mine if not r["ok"]), mine
    seqs = [r["seq"] for _, r in wins]
    assert len(seqs) == len(set(seqs)), "two commits reported success at the same seq"
    landed = {s.seq: s for s in store.snapshots(run_id)}
    for w, r in wins:  # every reported commit is there, with its exact state
        assert r["seq"] in landed, f"reported commit {run_id}@{r['seq']} lost"
        assert landed[r["seq"]].id == r["id"], f"{run_id}@{r['seq']} is another writer's"
        assert store.read(landed[r["seq"]]) == state_for(w, r["i"])
    by_state = {json.dumps(store.read(s)["log"]): seq for seq, s in landed.items()}
    unknown = 0
    for w, r in mine:
        if r["ok"]:
            continue
        key = json.dumps(state_for(w, r["i"])["log"])
        if r["why"] == "unknown":
            unknown += 1
        else:  # refused (or failed): it must not have landed
            assert key not in by_state, f"{r['why']} reported but {run_id}@{by_state[key]} landed"
    reported = set(seqs)
    strays = sorted(set(landed) - reported)
    assert len(strays) <= unknown, f"commits {strays} landed that nobody was told about"
    return {"landed": len(wins), "refused": sum(1 for _, r in mine if not r["ok"]
                                                 and r["why"] != "unknown"),
            "unknown": unknown}


def test_two_writers_through_failing_probes_lose_no_commit(
        fault_proxy: FaultProxy, tmp_path: Path) -> None:
    """Both writers' probes lose answers; they race on one run. Before the fix, each ran
    single-writer (check, then a plain PUT) and overwrote the other's reported commits."""
    fault_proxy.set_rules([Rule("drop_response", first_per_path=True, **PROBE_PUT)])
    url = new_s3_url()
    ckptfs.open_store(url).init()
    outcomes = _race(url, fault_proxy.env(), writers=2, attempts=6, tmp_path=tmp_path)
    assert fault_proxy.faults["drop_response"] >= 2
    tally = check_race(ckptfs.open_store(url), outcomes)
    assert tally["landed"] >= 6


# -- a lost answer is not a conflict -----------------------------------------------------------
def test_lost_answer_to_a_record_create_is_not_a_conflict(fault_proxy: FaultProxy) -> None:
    """The first attempt of every record PUT lands and its answer is lost; the retry gets 412.
    Every commit must return normally (before the fix: ConflictError for each)."""
    fault_proxy.set_rules([Rule("drop_response", first_per_path=True, **RECORD_CREATE)])
    store = ckptfs.open_store(new_s3_url(), **fault_proxy.options())
    run = store.start_run("r")
    snaps = [run.checkpoint({"i": i}) for i in range(5)]
    assert fault_proxy.faults["drop_response"] == 5
    assert [s.seq for s in store.snapshots("r")] == [1, 2, 3, 4, 5]
    assert [s.id for s in store.snapshots("r")] == [s.id for s in snaps]
    assert store.storage.landed_on_read_back == 5  # type: ignore[attr-defined]
    TALLY["reads-back that proved a landed commit"] += 5


def test_lost_answers_while_racing(fault_proxy: FaultProxy, tmp_path: Path) -> None:
    """Three writers race on one run and a third of the record creates lose their answer:
    every commit reported landed is there with its bytes, no ConflictError for one that
    landed."""
    fault_proxy.set_rules([Rule("drop_response", rate=0.33, seed=13, **RECORD_CREATE)])
    url = new_s3_url()
    ckptfs.open_store(url).init()
    del READ_BACKS[:]
    outcomes = _race(url, fault_proxy.env(), writers=3, attempts=2, tmp_path=tmp_path)
    assert fault_proxy.faults["drop_response"] >= 1
    tally = check_race(ckptfs.open_store(url), outcomes)
    assert tally["landed"] >= 2
    # every dropped answer was to a create that landed: its retry's 412 was read back (a
    # retry's own answer may be dropped too, so there can be fewer read-backs than drops)
    assert 1 <= sum(READ_BACKS) <= fault_proxy.faults["drop_response"]
    TALLY["reads-back that proved a landed commit"] += sum(READ_BACKS)
    TALLY["racing commits landed"] += tally["landed"]
    TALLY["racing commits refused"] += tally["refused"]


def test_unreadable_after_a_lost_answer_is_outcome_unknown(fault_proxy: FaultProxy) -> None:
    """The record PUT's answers are all lost and the read-back fails too: neither success nor
    ConflictError, but an error that says the outcome is unknown."""
    store = ckptfs.open_store(new_s3_url(), **fault_proxy.options(**FEW_RETRIES))
    run = store.start_run("r")
    run.checkpoint({"i": 0})
    fault_proxy.set_rules([Rule("drop_response", **RECORD_CREATE),
                           Rule("error", status=500, method="GET", path=r"/runs/r/\d{20}$")])
    with pytest.raises(OutcomeUnknown, match="unknown"):
        run.checkpoint({"i": 1})
    fault_proxy.set_rules([])
    assert [s.seq for s in store.snapshots("r")] == [1, 2]  # it had landed


def test_a_failed_create_whose_object_is_absent_did_not_commit(fault_proxy: FaultProxy) -> None:
    """Every attempt of a record PUT fails (500, the server did nothing): the read-back finds
    no record, so the commit did not happen: a StorageError, not a conflict, not unknown."""
    store = ckptfs.open_store(new_s3_url(), **fault_proxy.options(**FEW_RETRIES))
    run = store.start_run("r")
    run.checkpoint({"i": 0})
    fault_proxy.set_rules([Rule("error", status=500, **RECORD_CREATE)])
    with pytest.raises(StorageError) as e:
        run.checkpoint({"i": 1})
    assert not isinstance(e.value, (OutcomeUnknown, ConflictError))
    fault_proxy.set_rules([])
    assert [s.seq for s in store.snapshots("r")] == [1]


# -- the record nonce (spec 8.1) ---------------------------------------------------------------
def test_record_nonce_round_trips_and_malformed_ones_are_ignored() -> None:
    from ckptfs.format import cbor
    from ckptfs.format.digest import Digest
    from ckptfs.format.models import RunRecord

    d = Digest.of(b"m")
    rec = RunRecord(run="r", seq=2, snapshot=d, size=10, created=5, nonce=bytes(range(16)))
    assert RunRecord.from_bytes(rec.to_bytes(), what="t") == rec
    plain = RunRecord(run="r", seq=2, snapshot=d, size=10, created=5)
    assert "nonce" not in cbor.decode(plain.to_bytes(), what="t")  # v1 bytes unchanged
    for bad in ("text", b"\x00" * 4, 7, None):
        m = {**plain.to_cbor(), "nonce": bad}
        assert RunRecord.from_bytes(cbor.encode(m), what="t") == plain


def test_racing_resumes_of_identical_state_create_different_records(
        fault_proxy: FaultProxy) -> None:
    """Two writers resume one head and commit the same state in the same millisecond: their
    manifests are byte-identical (same snapshot id), so only the record nonce tells their
    records apart. The first's answer is lost (read back: its own); the second must get
    ConflictError, not take the first's record for its own (it would then believe it owns
    the run, e.g. perform an effect the first one also performs)."""
    url = new_s3_url()
    opts = fault_proxy.options()
    a = ckptfs.open_store(url, clock=lambda: 1_700_000_000_000, **opts)
    a.start_run("r").checkpoint({"n": 1})
    b = ckptfs.open_store(url, clock=lambda: 1_700_000_000_000, **opts)
    ra, rb = a.resume("r"), b.resume("r")
    fault_proxy.set_rules([Rule("drop_response", first_per_path=True, **RECORD_CREATE)])
    won = ra.checkpoint({"n": 2})
    with pytest.raises(ConflictError):
        rb.checkpoint({"n": 2})
    assert fault_proxy.faults["drop_response"] == 1
    head = a.get("r")
    assert head.seq == 2 and head.id == won.id
    records = {a.repo.record("r", 2).nonce, a.repo.nonce(), b.repo.nonce()}
    assert None not in records and len(records) == 3


# -- issue 18: a missing bucket -----------------------------------------------------------------
def test_init_in_a_missing_bucket_is_one_clear_error(s3_options: dict[str, Any]) -> None:
    """``ckptfs init s3://nobucket/p``: one error naming the missing bucket, no traceback, no
    single-writer warning, no probe mentioned."""
    import os
    import uuid

    url = f"s3://nobucket-{uuid.uuid4().hex[:12]}/p"
    p = subprocess.run([sys.executable, "-m", "ckptfs.cli", "init", url], capture_output=True,
                       text=True, timeout=120, env=dict(os.environ))
    assert p.returncode != 0
    err = p.stderr
    assert "does not exist" in err and "bucket" in err
    assert "Traceback" not in err and "single-writer" not in err and "probe" not in err
    assert "Warning" not in err
    assert len(err.strip().splitlines()) <= 2


def test_init_without_credentials_is_one_clear_error(s3_options: dict[str, Any],
                                                     tmp_path: Path) -> None:
    """No credentials anywhere (and no instance metadata lookup): one error that says to
    check the credentials, before any probe, no traceback, no warning."""
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update({"AWS_ENDPOINT_URL_S3": s3_options["endpoint_url"],
                "AWS_EC2_METADATA_DISABLED": "true", "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_CONFIG_FILE": str(tmp_path / "none"),
                "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"), "HOME": str(tmp_path)})
    p = subprocess.run([sys.executable, "-m", "ckptfs.cli", "init", new_s3_url()],
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode != 0
    err = p.stderr
    assert "credentials" in err.lower(), err
    assert "Traceback" not in err and "single-writer" not in err and "Warning" not in err, err
    assert len(err.strip().splitlines()) <= 2, err


def test_a_timed_out_record_create_that_landed_is_not_a_conflict(fault_proxy: FaultProxy) -> None:
    """The record PUT lands but its answer comes after the client's read timeout: botocore
    retries, the retry gets 412, the read-back finds our bytes. Before the fix: ConflictError."""
    store = ckptfs.open_store(new_s3_url(),
                              **fault_proxy.options(config_kwargs={"read_timeout": 1}))
    run = store.start_run("r")
    fault_proxy.set_rules([Rule("delay_response", delay=2.5, first_per_path=True,
                                **RECORD_CREATE)])
    snaps = [run.checkpoint({"i": i}) for i in range(2)]
    assert fault_proxy.faults["delay_response"] == 2
    assert [s.id for s in store.snapshots("r")] == [s.id for s in snaps]
    assert store.storage.landed_on_read_back == 2  # type: ignore[attr-defined]
