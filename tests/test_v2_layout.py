"""Format v2 (spec/v2.md) end to end on every backend: one file per commit, the head from the
hint, reads through locators and forwards, forget + gc repacking, erase leaving no byte, copy
between layouts, and the in-place upgrade of a v1 store (ids never change)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import ckptfs
from ckptfs.format import containers as ct
from ckptfs.format.names import parse_seq_name
from ckptfs.ops.copy import copy_runs
from ckptfs.ops.erase import erase
from ckptfs.ops.gc import gc
from ckptfs.ops.retention import forget_snapshots
from ckptfs.ops.verify import verify
from ckptfs.errors import UpgradeRequired
from tests.storeutil import walk
from tests.v1_stores import v1_store



def grow(store: ckptfs.Store, run_id: str, n: int, tag: str = "m") -> list[str]:
    run = store.start_run(run_id)
    ids = []
    for i in range(n):
        ids.append(run.checkpoint({"msgs": [f"{tag}{j} " * 30 for j in range(i * 20)],
                                   "plan": {"step": i}}).id)
    return ids


def records(store: ckptfs.Store, run_id: str) -> list[str]:
    return sorted(p for p in walk(store.storage)
                  if p.startswith(f"runs/{run_id}/") and p.count("/") == 2
                  and parse_seq_name(p.rsplit("/", 1)[1]))


def test_a_commit_is_one_new_object(store_url: str) -> None:
    store = ckptfs.open_store(store_url)
    grow(store, "r", 3)
    before = set(walk(store.storage))
    run = store.resume("r")
    run.checkpoint({**run.state, "plan": {"step": 99}})
    new = set(walk(store.storage)) - before
    # the record, and on S3 the head hint of the run's first commit in this process
    assert {p for p in new if not p.endswith("/head")} == {"runs/r/00000000000000000004"}
    assert not any(p.startswith(("chunks/", "snapshots/")) for p in walk(store.storage))
    data = store.storage.read("runs/r/00000000000000000004")
    assert ct.is_container(data)


def test_reads_after_forget_and_gc_follow_forwards(store_url: str) -> None:
    store = ckptfs.open_store(store_url)
    ids = grow(store, "r", 12)
    forget_snapshots(store.repo, {"r": set(range(1, 10))})
    assert len(records(store, "r")) == 12  # forget writes the marker only
    report = gc(store.repo, grace_ms=0)
    assert not report.problems, report.problems
    assert report.containers.containers_deleted == 9
    assert report.containers.forwards_written >= 1  # live bodies of forgotten records moved
    assert len(records(store, "r")) == 3
    fresh = ckptfs.open_store(store_url)
    assert verify(fresh.repo, read_data=True).ok
    assert [s.id for s in fresh.snapshots("r")] == ids[9:]
    assert fresh.read("r")["plan"] == {"step": 11}
    assert len(fresh.read("r@10")["msgs"]) == 180


def test_erase_leaves_no_byte_and_no_digest(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    store = ckptfs.open_store(url)
    grow(store, "keep", 4)
    run = store.start_run("gone")
    secret = "TOP-SECRET-PAYLOAD " * 200
    for i in range(3):
        run.checkpoint({"secret": secret + str(i), "blob": ckptfs.Blob(secret.encode() * 50)})
    forget_snapshots(store.repo, {"gone": {1}})
    erase(store.repo, "gone", reason="test")
    raw = b"".join(p.read_bytes() for p in Path(url).rglob("*") if p.is_file())
    assert b"TOP-SECRET-PAYLOAD" not in raw
    assert verify(ckptfs.open_store(url).repo, read_data=True).ok
    assert len(ckptfs.open_store(url).read("keep")["msgs"]) == 60


def test_bulk_goes_to_packs_and_reads_back(store_url: str) -> None:
    store = ckptfs.open_store(store_url)
    store.init({"record_bulk_max": 64 * 1024})
    run = store.start_run("b")
    payload = os.urandom(600 * 1024)
    run.checkpoint({"blob": ckptfs.Blob(payload)})
    packs = [p for p in walk(store.storage) if p.startswith("packs/")]
    assert packs
    assert ckptfs.open_store(store_url).read("b")["blob"].read() == payload


def test_head_hint_stale_ahead_or_torn_never_misleads(tmp_path: Path, s3_options: Any) -> None:
    from tests.conftest import new_s3_url

    url = new_s3_url()
    store = ckptfs.open_store(url)
    grow(store, "h", 20, tag="h")
    hint = store.storage.read("runs/h/head")
    assert ct.HeadHint.parse(hint, "h") is not None
    for bad in (b"", b"garbage", hint[:-1], hint[:-3] + b"xyz"):
        store.storage.replace("runs/h/head", bad or b"\0")
        assert ckptfs.open_store(url).head("h").seq == 20
    stale = ct.HeadHint("h", 3, ckptfs.open_store(url).get("h@3").digest, 0).to_bytes()
    store.storage.replace("runs/h/head", stale)
    assert ckptfs.open_store(url).head("h").seq == 20
    ahead = ct.HeadHint("h", 40, ckptfs.open_store(url).get("h@3").digest, 0).to_bytes()
    store.storage.replace("runs/h/head", ahead)
    assert ckptfs.open_store(url).head("h").seq == 20


def test_copy_from_version_1_keeps_every_id(tmp_path: Path) -> None:
    """A copy turns a version 1 store into a version 2 one (ids kept); ckptfs writes no
    version 1 store, so a version 1 destination is refused with the way out."""
    v1 = ckptfs.open_store(v1_store(tmp_path / "v1"))
    ids = [s.id for s in v1.snapshots("chat")]
    assert len(ids) == 6
    v2 = ckptfs.open_store(str(tmp_path / "v2"))
    copy_runs(v1.repo, v2.repo)
    assert v2.repo.config.version == 2
    again = ckptfs.open_store(str(tmp_path / "v2"))
    assert [s.id for s in again.snapshots("chat")] == ids
    assert verify(again.repo, read_data=True).ok
    back = ckptfs.open_store(v1_store(tmp_path / "back", "v1-basic"))
    with pytest.raises(UpgradeRequired, match="ckptfs upgrade"):
        copy_runs(again.repo, back.repo)
    with pytest.raises(UpgradeRequired, match="ckptfs upgrade"):
        copy_runs(again.repo, back.repo, dry_run=True)
    assert "chat" not in back.repo.run_ids()


def test_a_version_1_store_is_read_not_changed(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Every change to a version 1 store is refused (UpgradeRequired, naming 'ckptfs
    upgrade'), before anything is written; reading it works; a request for a new version 1
    store (CKPTFS_FORMAT_VERSION=1) is refused."""
    from ckptfs.ops.expire import set_expiry
    from ckptfs.ops.retention import Policy, forget

    url = v1_store(tmp_path / "s")
    before = sorted(walk(ckptfs.open_store(url).storage))
    store = ckptfs.open_store(url)
    assert store.read("chat")["step"] == 5
    run = store.resume("chat")
    for change in (lambda: run.checkpoint({**run.state, "turn": 6}),
                   lambda: store.start_run("new").checkpoint({"a": 1}),
                   lambda: run.checkpoint({"b": ckptfs.Blob(b"x" * 100_000)}),
                   lambda: gc(store.repo, grace_ms=0), lambda: gc(store.repo, dry_run=True),
                   lambda: forget(store.repo, Policy(keep_last=1)),
                   lambda: forget_snapshots(store.repo, {"chat": {1}}),
                   lambda: erase(store.repo, "chat", reason="test"),
                   lambda: set_expiry(store.repo, "chat", 1)):
        with pytest.raises(UpgradeRequired, match=f"ckptfs upgrade {url}"):
            change()
    assert sorted(walk(ckptfs.open_store(url).storage)) == before
    out = subprocess.run([sys.executable, "-m", "ckptfs", "gc", url], capture_output=True,
                         text=True)
    assert out.returncode != 0 and "ckptfs upgrade" in out.stderr, out
    monkeypatch.setenv("CKPTFS_FORMAT_VERSION", "1")
    with pytest.raises(UpgradeRequired, match="CKPTFS_FORMAT_VERSION=1"):
        ckptfs.open_store(str(tmp_path / "new")).init()
    assert not (tmp_path / "new" / "ckptfs.cbor").exists()


def test_upgrade_in_place_keeps_ids_and_mixes_layouts(tmp_path: Path) -> None:
    url = v1_store(tmp_path / "s")
    ids = [s.id for s in ckptfs.open_store(url).snapshots("chat")]
    env = dict(os.environ)
    out = subprocess.run([sys.executable, "-m", "ckptfs", "upgrade", url], env=env,
                         capture_output=True, text=True, check=True).stdout
    assert "upgraded from format version 1 to 2" in out
    store = ckptfs.open_store(url)
    assert store.repo.config.version == 2 and "v1-objects" in store.repo.config.optional
    assert [s.id for s in store.snapshots("chat")] == ids
    run = store.resume("chat")
    run.checkpoint({**run.state, "plan": {"step": 100}})
    assert ct.is_container(store.storage.read("runs/chat/00000000000000000007"))
    forget_snapshots(store.repo, {"chat": {1, 2}})
    assert not gc(store.repo, grace_ms=0).problems
    fresh = ckptfs.open_store(url)
    assert verify(fresh.repo, read_data=True).ok
    assert [s.id for s in fresh.snapshots("chat")][:4] == ids[2:]
    assert fresh.read("chat")["plan"] == {"step": 100}
    again = subprocess.run([sys.executable, "-m", "ckptfs", "upgrade", url], env=env,
                           capture_output=True, text=True, check=True).stdout
    assert "nothing to do" in again


def test_lookup_by_id_and_prefix_in_a_fresh_process(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    ids = grow(ckptfs.open_store(url), "a", 3) + grow(ckptfs.open_store(url), "b", 2, tag="x")
    fresh = ckptfs.open_store(url)
    for i in ids:
        assert fresh.get(i).id == i
        assert ckptfs.open_store(url).get(i.split(":")[1][:10]).id == i
    with pytest.raises(ckptfs.errors.NotFound):
        ckptfs.open_store(url).get("blake3:" + "0" * 64)


def test_ledger_results_are_located_from_the_head_alone(tmp_path: Path) -> None:
    """A large effect result lives in a body of the record that committed it; later records
    name it only through the ledger, and must still locate it (a fresh process reads only the
    head record). Before the fix: 'missing' from the head."""
    url = str(tmp_path / "s")
    run = ckptfs.open_store(url).start_run("x")
    run.checkpoint({"a": 1})
    big = os.urandom(150_000).hex()
    run.effect("fetch", lambda: big, key="k1")
    run.checkpoint({"a": 2})
    run.checkpoint({"a": 3})
    resumed = ckptfs.open_store(url).resume("x")

    def must_not_run() -> str:
        raise AssertionError("a completed effect ran again")

    assert resumed.effect("fetch", must_not_run, key="k1") == big
    assert verify(ckptfs.open_store(url).repo, read_data=True).ok
    forget_snapshots(ckptfs.open_store(url).repo, {"x": {1, 2, 3}})
    assert not gc(ckptfs.open_store(url).repo, grace_ms=0).problems
    again = ckptfs.open_store(url).resume("x")
    assert again.effect("fetch", must_not_run, key="k1") == big
    copied = str(tmp_path / "copy")
    copy_runs(ckptfs.open_store(url).repo, ckptfs.open_store(copied).repo)
    assert ckptfs.open_store(copied).resume("x").effect("fetch", must_not_run, key="k1") == big
