"""GC against schedules the collector did not plan for (issue 13, defects 2, 3 and 6), on every
backend: a mark that cannot read a snapshot, a writer committing between the collector's age
check and its delete, a fork and a cross-run stored blob committed while gc sweeps.

Writers run in a thread started from inside the collector (just before one of its deletes), so
that the collector goes on while the writer is in its commit; the writer may wait for the sweep
to end (the handshake of spec/retention.md "Sweeps and writers"), which lets the collector run.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import cbor2
import pytest

import ckptfs
from ckptfs.errors import StorageError
from ckptfs.format.names import snapshot_path
from ckptfs.ops.gc import gc
from ckptfs.ops.retention import Policy, forget, forget_snapshots
from ckptfs.ops.verify import verify
from ckptfs.storage.base import Storage
from ckptfs.store.repository import Repository
from tests.faults import FaultyStorage
from tests.retention_helpers import age_tree
from tests.retention_writer import POOL

#: format v1 layout on purpose: its schedules delete loose chunks between a writer's steps (v2 gc judges containers; not yet ported)
pytestmark = pytest.mark.layout(1)

T = TypeVar("T")
HOUR_MS = 3_600_000


class Hooked(FaultyStorage):
    """A real backend that runs ``hook`` once, just before the first operation ``when`` picks
    (name, path), or that raises StorageError (an EIO, a 500 past retries) on reading ``fail``."""

    def __init__(self, inner: Storage, when: Callable[[str, str], bool] | None = None,
                 hook: Callable[[], None] | None = None, fail: str | None = None) -> None:
        super().__init__(inner)
        self.when, self.hook, self.fail, self.fired = when, hook, fail, False
        #: the previous operation: (name, path, data)
        self.prev: tuple[str, str, bytes | None] = ("", "", None)

    def _op(self, name: str, path: str, do: Callable[[], T], data: bytes | None = None) -> T:
        if name == "read" and path == self.fail:
            raise StorageError(f"{path}: Input/output error (errno 5) [injected]")
        if (not self.fired and self.when is not None and self.hook is not None
                and self.when(name, path)):
            self.fired = True
            self.hook()
        self.prev = (name, path, data)
        return super()._op(name, path, do, data)


class Beside:
    """A writer's commit run in a thread until it returns or starts waiting for a sweep."""

    def __init__(self, store: ckptfs.Store, fn: Callable[[], Any]) -> None:
        self.waiting = threading.Event()
        guard = getattr(store.repo.objects, "sweeps", None)
        if guard is not None:
            guard.on_wait = self.waiting.set
        self.result: dict[str, Any] = {}
        self.thread = threading.Thread(target=self._go, args=(fn,), daemon=True)
        self.thread.start()
        while self.thread.is_alive() and not self.waiting.is_set():
            self.thread.join(0.005)

    def _go(self, fn: Callable[[], Any]) -> None:
        try:
            self.result["value"] = fn()
        except BaseException as e:  # handed to the test
            self.result["error"] = e

    def done(self) -> Any:
        self.thread.join(60)
        assert not self.thread.is_alive(), "the writer never finished"
        if "error" in self.result:
            raise self.result["error"]
        return self.result["value"]


def _old_store(url: str, opts: dict[str, Any]) -> tuple[ckptfs.Store, int | None]:
    """A store whose objects are all old (local: aged two hours; memory and S3 cannot be aged,
    so gc there runs with ``now`` two hours ahead: the returned value)."""
    store = ckptfs.open_store(url, **opts)
    if "://" in url:
        return store, int(time.time() * 1000) + 2 * HOUR_MS
    age_tree(url, 7200)
    return store, None


def _pool_garbage(url: str, opts: dict[str, Any]) -> tuple[ckptfs.Store, int | None]:
    """A store holding POOL's blocks as old garbage (all but the head of a forgotten run), and
    the ``now`` gc must run at for them to be old (``_old_store``)."""
    store = ckptfs.open_store(url, **opts)
    old = store.start_run("old")
    for k, block in enumerate(POOL):
        old.checkpoint({"pool": block, "k": k})
    forget(store.repo, Policy(keep_labels=(("none", "x"),)))  # all but old's head: garbage
    _, now = _old_store(url, opts)
    return store, now


def _collector(url: str, opts: dict[str, Any], **kw: Any) -> Repository:
    return Repository(Hooked(ckptfs.open_store(url, **opts).storage, **kw))


def _first_chunk_delete(name: str, path: str) -> bool:
    return name == "delete" and path.startswith("chunks/")


# -- defect 2 ----------------------------------------------------------------------------------
def test_a_manifest_gc_could_not_read_is_not_deleted(store_url: str,
                                                     store_options: dict[str, Any]) -> None:
    store = ckptfs.open_store(store_url, **store_options)
    run = store.start_run("a")
    for i in range(3):
        run.checkpoint({"text": f"snapshot {i} " * 400})
    forget(store.repo, Policy(keep_last=1))  # a@1 and a@2 are old garbage; a@3 stays
    store.start_run("b").checkpoint({"text": "b's state " * 400})
    _, now = _old_store(store_url, store_options)
    unreadable = store.get("b")
    repo = _collector(store_url, store_options, fail=snapshot_path(unreadable.digest))
    report = gc(repo, grace_ms=60_000, now=now)
    assert report.problems and report.manifests_deleted == 0 and report.chunks_deleted == 0
    assert store.storage.exists(snapshot_path(unreadable.digest))
    assert store.read("b") == {"text": "b's state " * 400}
    assert verify(store.repo, read_data=True).ok
    assert gc(store.repo, grace_ms=60_000, now=now).manifests_deleted == 2  # once readable


# -- defect 3 ----------------------------------------------------------------------------------
def test_a_writer_between_gcs_age_check_and_delete_keeps_its_commit(
        store_url: str, store_options: dict[str, Any]) -> None:
    """Old garbage (a forgotten run's blocks) is judged old; the writer re-commits it right
    then (finds it present: refreshes it) and its record lands; then gc deletes it."""
    store, now = _pool_garbage(store_url, store_options)
    writer = ckptfs.open_store(store_url, **store_options)
    run = writer.start_run("w")
    state = {f"p{k}": block for k, block in enumerate(POOL)}
    beside: list[Beside] = []
    repo = _collector(store_url, store_options, when=_first_chunk_delete,
                      hook=lambda: beside.append(Beside(writer, lambda: run.checkpoint(state))))
    report = gc(repo, grace_ms=60_000, now=now)
    assert beside, "the collector deleted no chunk: the schedule did not happen"
    snap = beside[0].done()
    assert report.chunks_deleted >= 1
    assert store.read(snap.id) == state
    assert verify(store.repo, read_data=True).ok


# -- defect 6 ----------------------------------------------------------------------------------
def test_a_fork_committed_during_gc_keeps_its_parents_blob(
        store_url: str, store_options: dict[str, Any]) -> None:
    store = ckptfs.open_store(store_url, **store_options)
    blob = os.urandom(300_000)
    p = store.start_run("p")
    p.checkpoint({"blob": ckptfs.Blob(blob), "note": "parent"})
    writer = ckptfs.open_store(store_url, **store_options)  # another process, later
    fork = writer.fork("p@1", "f")
    forget_snapshots(store.repo, {"p": {1}})  # the whole parent run goes: its blob is garbage
    _, now = _old_store(store_url, store_options)
    state = dict(fork.state)
    state["note"] = "fork"
    beside: list[Beside] = []
    repo = _collector(store_url, store_options, when=_first_chunk_delete,
                      hook=lambda: beside.append(Beside(writer, lambda: fork.checkpoint(state))))
    gc(repo, grace_ms=60_000, now=now)
    assert beside, "the collector deleted no chunk: the schedule did not happen"
    snap = beside[0].done()
    assert store.read(snap.id)["blob"].read() == blob
    assert verify(store.repo, read_data=True).ok


def test_a_blob_stored_by_another_run_committed_during_gc_stays(
        store_url: str, store_options: dict[str, Any]) -> None:
    store = ckptfs.open_store(store_url, **store_options)
    blob = os.urandom(300_000)
    store.start_run("a").checkpoint({"blob": ckptfs.Blob(blob)})
    stored = store.read("a")["blob"]
    assert isinstance(stored, ckptfs.StoredBlob)
    forget_snapshots(store.repo, {"a": {1}})
    _, now = _old_store(store_url, store_options)
    writer = ckptfs.open_store(store_url, **store_options)
    run = writer.start_run("b")
    beside: list[Beside] = []
    repo = _collector(store_url, store_options, when=_first_chunk_delete,
                      hook=lambda: beside.append(Beside(writer, lambda: run.checkpoint(
                          {"blob": stored}))))
    gc(repo, grace_ms=60_000, now=now)
    assert beside, "the collector deleted no chunk: the schedule did not happen"
    snap = beside[0].done()
    assert store.read(snap.id)["blob"].read() == blob
    assert verify(store.repo, read_data=True).ok


@pytest.mark.parametrize("where", ["mark", "before-sweep", "sweep"])
def test_a_fork_at_each_phase_of_gc(tmp_path: Any, where: str) -> None:
    """The fork's commit at the collector's first operation of each phase: during the mark,
    just after the sweep is announced (the second mark sees it), during the deletes."""
    url = str(tmp_path / "s")
    store = ckptfs.open_store(url)
    blob = os.urandom(200_000)
    store.start_run("p").checkpoint({"blob": ckptfs.Blob(blob)})
    writer = ckptfs.open_store(url)  # another process, later
    fork = writer.fork("p@1", "f")
    forget_snapshots(store.repo, {"p": {1}})
    age_tree(url, 7200)
    hooked: list[Hooked] = []

    def announced() -> bool:  # the previous operation set the lease to "deletes"
        name, path, data = hooked[0].prev
        return (name == "replace" and path.startswith("leases/") and data is not None
                and cbor2.loads(data).get("deletes") is True)

    # "mark": the collector's first look at a run's folder (a listing or a read of runs/...)
    when = {"mark": lambda n, p: n in ("read", "scan") and p.startswith("runs/"),
            "before-sweep": lambda n, p: announced(),
            "sweep": _first_chunk_delete}[where]
    beside: list[Beside] = []
    repo = _collector(url, {}, when=when,
                      hook=lambda: beside.append(Beside(writer, lambda: fork.checkpoint(
                          {"blob": fork.state["blob"], "n": 1}))))
    assert isinstance(repo.storage, Hooked)
    hooked.append(repo.storage)
    report = gc(repo, grace_ms=60_000)
    if where == "before-sweep":  # the second mark saw the fork: its parent's blob is spared
        assert report.spared_by_new_commits > 0 and report.chunks_deleted == 0
    assert beside
    snap = beside[0].done()
    assert store.read(snap.id)["blob"].read() == blob
    assert verify(store.repo, read_data=True).ok


def test_a_commit_whose_parent_was_collected_is_withdrawn_not_reported(tmp_path: Any) -> None:
    """The run's head is forgotten (the whole run) and collected while a writer holds it; its
    next commit names the head's chunks without holding them: it must not be reported."""
    url = str(tmp_path / "s")
    store = ckptfs.open_store(url)
    big = "the head's state " * 20_000
    store.start_run("r").checkpoint({"big": big})
    writer = ckptfs.open_store(url)
    run = writer.resume("r")
    forget_snapshots(store.repo, {"r": {1}})
    age_tree(url, 7200)
    assert gc(store.repo, grace_ms=60_000).chunks_deleted > 0
    with pytest.raises(ckptfs.errors.ConflictError, match="withdrawn"):
        run.checkpoint({"big": big, "more": 1})
    assert store.repo.record_seqs("r") == []
    assert verify(store.repo, read_data=True).ok
    assert writer.repo.objects.sweeps.in_doubt == 1


def test_a_commit_beside_no_maintenance_costs_one_listing(tmp_path: Any) -> None:
    """The handshake's cost for a run appending to its own head: one LIST of the lease folder
    per commit (none is read while no lease exists), and no other request."""
    url = str(tmp_path / "s")
    counted = Hooked(ckptfs.open_store(url).storage)
    store = ckptfs.Store(counted)
    run = store.start_run("r")
    run.checkpoint({"msgs": ["a" * 3000]})
    for i in range(5):
        counted.log.clear()
        start = counted.ops
        run.checkpoint({"msgs": ["a" * 3000] + [f"step {i} " * 300]})
        # a chunk, the manifest, the record, the retired-marker listing (the writer rule of
        # "Retired ranges") and the lease listing (the handshake): the last is the only addition
        assert counted.ops - start == 5 and [n for n, _ in counted.log] == [
            "write", "write", "create", "list", "list"], (i, counted.log)


# -- copy beside a collector (the copy writes into a store whose gc is sweeping) ------------------
def test_a_copy_committed_during_gc_never_reports_a_broken_snapshot(
        tmp_path: Any, store_url: str, store_options: dict[str, Any]) -> None:
    """The destination holds a forgotten run's blocks as old garbage; a copy brings in a run
    that names the same blocks (it finds them present and young enough to rely on) while gc
    deletes them. Every snapshot the copy reports copied must read back; a copy that cannot
    stand fails with ConflictError and a rerun completes it (found in review: copy wrote
    records without the writers' sweep handshake)."""
    from ckptfs.ops.copy import copy_runs

    src = ckptfs.open_store(str(tmp_path / "src"))
    w = src.start_run("w")
    state = {f"p{k}": block for k, block in enumerate(POOL)}
    w.checkpoint(state)
    store, now = _pool_garbage(store_url, store_options)
    dst = ckptfs.open_store(store_url, **store_options)
    beside: list[Beside] = []
    repo = _collector(store_url, store_options, when=_first_chunk_delete,
                      hook=lambda: beside.append(Beside(dst, lambda: copy_runs(src.repo,
                                                                              dst.repo))))
    gc(repo, grace_ms=60_000, now=now)
    assert beside, "the collector deleted no chunk: the schedule did not happen"
    report = beside[0].done()
    if not report.ok:  # the sweep took a chunk the copy relied on: withdrawn, said, rerun
        assert report.snapshots_copied == 0
        assert any("run the same copy again" in c for c in report.conflicts), report.conflicts
        report = copy_runs(src.repo, ckptfs.open_store(store_url, **store_options).repo)
    assert report.ok and report.snapshots_copied == 1
    fresh = ckptfs.open_store(store_url, **store_options)
    assert fresh.read("w") == state
    assert verify(fresh.repo, read_data=True).ok
