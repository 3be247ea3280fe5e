"""tests/test_gc_races.py's schedules on format v2 stores (issue 15), on local disk, memory and
S3 (moto): a writer, a fork, a blob stored by another run and a copy, each committing while
gc deletes (repacks) containers, and a fork at each phase of gc. v2 gc deletes stray records
and packs, not loose chunks: the writer starts at the collector's first container delete.
After each: the commit reads back and ``verify --read-data`` finds nothing wrong."""

from __future__ import annotations

import os
from typing import Any

import cbor2
import pytest

import ckptfs
from ckptfs.format.names import parse_seq_name
from ckptfs.ops.gc import gc
from ckptfs.ops.retention import forget_snapshots
from ckptfs.ops.verify import verify
from tests.retention_helpers import age_tree
from tests.retention_writer import POOL
from tests.test_gc_races import Beside, Hooked, _collector, _old_store, _pool_garbage



def _first_container_delete(name: str, path: str) -> bool:
    """A delete of a pack or of a run record (v2 gc's container deletes)."""
    if name != "delete":
        return False
    parts = path.split("/")
    return parts[0] == "packs" or (len(parts) == 3 and parts[0] == "runs"
                                   and parse_seq_name(parts[2]) is not None)


def test_a_writer_during_gcs_container_deletes_keeps_its_commit(
        store_url: str, store_options: dict[str, Any]) -> None:
    store, now = _pool_garbage(store_url, store_options)
    writer = ckptfs.open_store(store_url, **store_options)
    run = writer.start_run("w")
    state = {f"p{k}": block for k, block in enumerate(POOL)}
    beside: list[Beside] = []
    repo = _collector(store_url, store_options, when=_first_container_delete,
                      hook=lambda: beside.append(Beside(writer, lambda: run.checkpoint(state))))
    report = gc(repo, grace_ms=60_000, now=now)
    assert beside, "the collector deleted no container: the schedule did not happen"
    snap = beside[0].done()
    assert report.containers.containers_deleted >= 1, report
    assert store.read(snap.id) == state
    assert verify(store.repo, read_data=True).ok


def test_a_fork_during_gcs_container_deletes_keeps_its_parents_blob(
        store_url: str, store_options: dict[str, Any]) -> None:
    store = ckptfs.open_store(store_url, **store_options)
    blob = os.urandom(300_000)
    store.start_run("p").checkpoint({"blob": ckptfs.Blob(blob)})
    store.start_run("q").checkpoint({"x": 1})  # something else stays
    writer = ckptfs.open_store(store_url, **store_options)
    fork = writer.fork("p@1", "f")
    forget_snapshots(store.repo, {"p": {1}})
    _, now = _old_store(store_url, store_options)
    state = dict(fork.state)
    state["note"] = "fork"
    beside: list[Beside] = []
    repo = _collector(store_url, store_options, when=_first_container_delete,
                      hook=lambda: beside.append(Beside(writer, lambda: fork.checkpoint(state))))
    gc(repo, grace_ms=60_000, now=now)
    assert beside, "the collector deleted no container: the schedule did not happen"
    try:
        snap = beside[0].done()
    except ckptfs.errors.ConflictError:  # withdrawn, not reported: the rule when it cannot stand
        assert ckptfs.open_store(store_url, **store_options).repo.record_seqs("f") == []
    else:
        assert store.read(snap.id)["blob"].read() == blob
    assert verify(store.repo, read_data=True).ok


def test_a_copy_during_gcs_container_deletes_never_reports_a_broken_snapshot(
        tmp_path: Any, store_url: str, store_options: dict[str, Any]) -> None:
    from ckptfs.ops.copy import copy_runs

    src = ckptfs.open_store(str(tmp_path / "src"))
    state = {f"p{k}": block for k, block in enumerate(POOL)}
    src.start_run("w").checkpoint(state)
    store, now = _pool_garbage(store_url, store_options)
    dst = ckptfs.open_store(store_url, **store_options)
    beside: list[Beside] = []
    repo = _collector(store_url, store_options, when=_first_container_delete,
                      hook=lambda: beside.append(Beside(dst, lambda: copy_runs(src.repo,
                                                                              dst.repo))))
    gc(repo, grace_ms=60_000, now=now)
    assert beside, "the collector deleted no container: the schedule did not happen"
    report = beside[0].done()
    if not report.ok:
        report = copy_runs(src.repo, ckptfs.open_store(store_url, **store_options).repo)
    assert report.ok and report.snapshots_copied == 1
    fresh = ckptfs.open_store(store_url, **store_options)
    assert fresh.read("w") == state
    assert verify(fresh.repo, read_data=True).ok


@pytest.mark.parametrize("where", ["mark", "before-sweep", "sweep"])
def test_a_fork_at_each_phase_of_a_v2_gc(tmp_path: Any, where: str) -> None:
    url = str(tmp_path / "s")
    store = ckptfs.open_store(url)
    blob = os.urandom(200_000)
    store.start_run("p").checkpoint({"blob": ckptfs.Blob(blob)})
    writer = ckptfs.open_store(url)
    fork = writer.fork("p@1", "f")
    forget_snapshots(store.repo, {"p": {1}})
    age_tree(url, 7200)
    hooked: list[Hooked] = []

    def announced() -> bool:
        name, path, data = hooked[0].prev
        return (name == "replace" and path.startswith("leases/") and data is not None
                and cbor2.loads(data).get("deletes") is True)

    when = {"mark": lambda n, p: n in ("read", "scan") and p.startswith("runs/"),
            "before-sweep": lambda n, p: announced(),
            "sweep": _first_container_delete}[where]
    beside: list[Beside] = []
    repo = _collector(url, {}, when=when,
                      hook=lambda: beside.append(Beside(writer, lambda: fork.checkpoint(
                          {"blob": fork.state["blob"], "n": 1}))))
    assert isinstance(repo.storage, Hooked)
    hooked.append(repo.storage)
    gc(repo, grace_ms=60_000)
    assert beside, "the schedule did not happen"
    try:
        snap = beside[0].done()
    except ckptfs.errors.ConflictError:
        assert ckptfs.open_store(url).repo.record_seqs("f") == []
    else:
        assert store.read(snap.id)["blob"].read() == blob
    assert verify(store.repo, read_data=True).ok
