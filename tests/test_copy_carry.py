"""Copy into a v2 store with runs side by side (issue 15, copy local -> S3): each record
carries the bodies that fit it (``record_bulk_max``, spec/v2.md 5.1 step 1), instead of the
bodies of 1 MiB or more going to packs. The runs' record chains keep several PUTs in flight,
so the packs' requests (and the pass joining bodies into packs) are saved: on moto a copy of
48 snapshots of 2 MB made 8 pack PUTs besides the 48 record PUTs. A crash at any mutation
leaves every run a valid prefix, and the copy run again finishes it (local disk and S3)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import ckptfs
from ckptfs.format import containers as ct
from ckptfs.format.containers import RecordRef
from ckptfs.ops.copy import copy_runs
from ckptfs.ops.verify import verify
from ckptfs.storage import open_storage
from ckptfs.store.repository import Repository
from tests.conftest import new_s3_url
from tests.retention_helpers import CrashingStorage, crashes_at


RUNS = ("a", "b")
SNAPS = 3


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, list[Any]]]:
    """Two runs of three snapshots of 1.2 MB new each (over PACK_MIN), one blob shared by
    every snapshot of a run (sent once, then located)."""
    root = str(tmp_path_factory.mktemp("src") / "s")
    s = ckptfs.open_store(root)
    want: dict[str, list[Any]] = {}
    for r in RUNS:
        run = s.start_run(r)
        shared = os.urandom(300_000)
        for i in range(SNAPS):
            run.checkpoint({"i": i, "own": ckptfs.Blob(os.urandom(1_200_000)),
                            "shared": ckptfs.Blob(shared)})
        want[r] = [(x.id, s.read(x)["own"].read()) for x in s.snapshots(r)]
    return root, want


def _where(kind: str, tmp_path: Path, opts: dict[str, Any], k: int) -> str:
    return new_s3_url() if kind == "s3" else str(tmp_path / f"d{k}")


@pytest.fixture(params=["local", "s3"])
def dst_kind(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    if request.param == "local":
        return "local", {}
    return "s3", request.getfixturevalue("s3_options")


def _prefix(url: str, opts: dict[str, Any], want: dict[str, list[Any]], where: str) -> int:
    """Check every run of ``url`` is a valid prefix of the source's; the snapshots held."""
    store = ckptfs.open_store(url, **opts)
    rep = verify(store.repo, read_data=True)
    assert rep.ok, (where, rep.problems)
    held = 0
    for r in store.repo.run_ids():
        seqs = store.repo.seqs(r)
        assert seqs == list(range(1, len(seqs) + 1)), (where, r, seqs)
        for seq in seqs:
            snap = store.get(f"{r}@{seq}")
            assert snap.id == want[r][seq - 1][0], where
            assert store.read(snap)["own"].read() == want[r][seq - 1][1], where
        held += len(seqs)
    return held


def test_side_by_side_records_carry_their_bodies_and_no_pack_is_written(
        tmp_path: Path, source: tuple[str, Any], dst_kind: tuple[str, dict[str, Any]]) -> None:
    """Fails before the change: each snapshot's 1.2 MB went to a pack (one pack PUT per run's
    batch besides the records); now the destination's mutations are the records alone (and
    the config), and each record's bodies are the source record's stored bytes (no
    re-encoding)."""
    src, want = source
    kind, opts = dst_kind
    url = _where(kind, tmp_path, opts, 0)
    ckptfs.open_store(url, **opts).init()
    st = open_storage(url, **opts)
    counted = CrashingStorage(st, crash_at=None)
    rep = copy_runs(ckptfs.open_store(src).repo, Repository(counted), workers=2)
    assert rep.ok and rep.snapshots_copied == len(RUNS) * SNAPS
    assert list(st.scan("packs")) == []
    assert counted.ops == len(RUNS) * SNAPS  # one create per record, nothing else
    sst = open_storage(src)
    for r in RUNS:
        for seq in range(1, SNAPS + 1):
            path = f"runs/{r}/{seq:020d}"
            got, theirs = st.read(path), sst.read(path)
            ref = RecordRef(r, seq)
            mine = ct.locations(ct.decode(got, what="dst record"), ref)
            theirs_at = ct.locations(ct.decode(theirs, what="src record"), ref)
            assert sum(x.stored for x in mine.values()) > 1_200_000, path  # its own blob
            for d, x in mine.items():  # the stored bytes, not framed or compressed anew
                y = theirs_at[d]
                assert got[x.start:x.start + x.stored] == theirs[y.start:y.start + y.stored]
    assert _prefix(url, opts, want, "done") == len(RUNS) * SNAPS


@pytest.mark.parametrize("workers", [2, 1])
def test_every_crash_point_of_a_side_by_side_copy(
        tmp_path: Path, source: tuple[str, Any], dst_kind: tuple[str, dict[str, Any]],
        workers: int) -> None:
    """Crash at every mutation of a side-by-side copy (records carrying their bodies; with
    one worker, a run at a time: packs, then records): each run is left a valid prefix; the
    copy run again completes it, and a third finds nothing to do."""
    src, want = source
    kind, opts = dst_kind
    points = 0
    for k in range(100):
        url = _where(kind, tmp_path, opts, k)
        ckptfs.open_store(url, **opts).init()
        if not crashes_at(k, open_storage(url, **opts), lambda st: copy_runs(
                ckptfs.open_store(src).repo, Repository(st), workers=workers)):
            break
        points += 1
        where = f"{kind}: crash at mutation {k + 1}"
        assert _prefix(url, opts, want, where) <= k, where
        rep = copy_runs(ckptfs.open_store(src).repo, ckptfs.open_store(url, **opts).repo,
                        workers=workers)
        assert rep.ok, (where, rep.conflicts)
        assert _prefix(url, opts, want, where) == len(RUNS) * SNAPS, where
        again = copy_runs(ckptfs.open_store(src).repo, ckptfs.open_store(url, **opts).repo,
                          workers=workers)
        assert again.snapshots_copied == 0 and again.chunks_copied == 0, where
    print(f"copy with {workers} worker(s) ({kind}): {points} crash points")
    if workers > 1:
        assert points == len(RUNS) * SNAPS  # one per record: nothing else is written
    else:
        assert points > len(RUNS) * SNAPS  # a pack per run, then the records
