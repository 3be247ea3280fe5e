"""A Snapshot read through another Store of the same storage (format v2): the reading store has
not seen the snapshot's record, so it must read it to learn where the chunks are (spec/v2.md:
locators live in records) before it reads the content, the ledger included. Found by the v2
hostile corpus: `ckptfs log` and `ckptfs effects` said the ledger's chunk was missing."""

from __future__ import annotations

from pathlib import Path

import pytest

import ckptfs
from ckptfs.ops.inspect import run_effects, run_log

ROWS = {"rows": [f"row {i} " * 20 for i in range(200)]}  # over record_bulk_max: in a pack


@pytest.fixture
def store(tmp_path: Path) -> ckptfs.Store:
    s = ckptfs.open_store(str(tmp_path / "s"))
    s.init(settings={"record_bulk_max": 4096, "pack_target": 65536})
    run = s.start_run("r1")
    run.checkpoint({"step": 0})
    run.effect("lookup", lambda: ROWS, key="k1")
    run.checkpoint({"step": 1, "big": "x" * 9000})
    return s


def test_ledger_of_a_snapshot_from_another_store(store: ckptfs.Store) -> None:
    snap = store.head("r1")
    other = ckptfs.Store(store.repo.storage)
    assert other.ledger(snap).effects["k1"].status == "completed"
    assert ckptfs.Store(store.repo.storage).read(snap)["big"] == "x" * 9000


def test_log_and_effects_of_a_fresh_store(store: ckptfs.Store) -> None:
    fresh = ckptfs.open_store(store.repo.storage.url)
    assert run_effects(fresh.repo, "r1")["records"] == 2
    assert [e["seq"] for e in run_log(fresh.repo, "r1")["snapshots"]][-1] == 4
