"""copy into a v2 destination in batches (issue 15): the bulk of several snapshots goes to
packs written together (overlapped), then the records are created in seq order. A crash at
any mutation leaves a valid destination holding a prefix of the run (packs without records
are garbage for gc), and running the copy again finishes it, with the same ids and states."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

import ckptfs
from ckptfs.format import containers as ct
from ckptfs.ops.copy import copy_runs
from ckptfs.ops.verify import verify
from ckptfs.storage import open_storage
from ckptfs.store.repository import Repository
from tests.retention_helpers import crashes_at


MiB = 1 << 20


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[int, Any]]:
    root = str(tmp_path_factory.mktemp("src") / "s")
    s = ckptfs.open_store(root)
    run = s.start_run("r")
    shared = os.urandom(MiB + 1000)
    for i in range(4):  # 1.2 MiB new each (over the batch threshold), one blob shared
        run.checkpoint({"i": i, "own": ckptfs.Blob(os.urandom(MiB + 200_000)),
                        "shared": ckptfs.Blob(shared)})
    return root, {x.seq: (x.id, s.read(x)) for x in s.snapshots("r")}


def _check_prefix(url: str, want: dict[int, Any], where: str) -> list[int]:
    store = ckptfs.open_store(url)
    rep = verify(store.repo, read_data=True)
    assert rep.ok, (where, rep.problems)
    seqs = store.repo.seqs("r") if store.repo.run_ids() else []
    assert seqs == list(range(1, len(seqs) + 1)), (where, seqs)
    for seq in seqs:
        snap = store.get(f"r@{seq}")
        assert snap.id == want[seq][0], where
        got = store.read(snap)
        assert got["own"].read() == want[seq][1]["own"].read(), where
    return seqs


def test_a_batched_copy_writes_packs_and_small_records(tmp_path: Path,
                                                       source: tuple[str, Any]) -> None:
    src, want = source
    dst = str(tmp_path / "d")
    rep = copy_runs(ckptfs.open_store(src).repo, ckptfs.open_store(dst).repo)
    assert rep.ok and rep.snapshots_copied == 4
    st = open_storage(dst)
    packs = [p for p in st.scan("packs")]
    assert packs
    for seq in range(1, 5):  # the bulk is in packs: each record holds no body
        c = ct.decode(st.read(f"runs/r/{seq:020d}"), what="record")
        assert c.header.body_length == 0
    assert _check_prefix(dst, want, "done") == [1, 2, 3, 4]


def test_every_crash_point_of_a_batched_copy(tmp_path: Path, source: tuple[str, Any]) -> None:
    src, want = source
    points = 0
    for k in range(200):
        dst = str(tmp_path / f"d{k}")
        ckptfs.open_store(dst).init()
        if not crashes_at(k, open_storage(dst),
                          lambda st: copy_runs(ckptfs.open_store(src).repo, Repository(st))):
            break
        points += 1
        where = f"crash at mutation {k + 1}"
        _check_prefix(dst, want, where)
        for name in os.listdir(os.path.join(dst, "leases", "maintenance")) if os.path.isdir(
                os.path.join(dst, "leases", "maintenance")) else []:
            os.unlink(os.path.join(dst, "leases", "maintenance", name))
        rep = copy_runs(ckptfs.open_store(src).repo, ckptfs.open_store(dst).repo)
        assert rep.ok, (where, rep.conflicts)
        assert _check_prefix(dst, want, where) == [1, 2, 3, 4], where
        again = copy_runs(ckptfs.open_store(src).repo, ckptfs.open_store(dst).repo)
        assert again.snapshots_copied == 0 and again.chunks_copied == 0, where
        shutil.rmtree(dst)
    print(f"batched copy: {points} crash points")
    assert points >= 5  # packs, then one record each (and the config, the lease)
