"""GC against schedules the collector did not plan for (issue 13, defects 2, 3 and 6), on every
backend: a mark that cannot read a snapshot, a writer committing between the collector's age
check and its delete, a fork and a cross-run stored blob committed while gc sweeps.

This module holds the schedule machinery (Hooked, Beside, the aged stores); the schedules
themselves run on format v2 stores in tests/test_gc_races_v2.py.

Writers run in a thread started from inside the collector (just before one of its deletes), so
that the collector goes on while the writer is in its commit; the writer may wait for the sweep
to end (the handshake of spec/retention.md "Sweeps and writers"), which lets the collector run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar


import ckptfs
from ckptfs.errors import StorageError
from ckptfs.ops.gc import gc
from ckptfs.ops.retention import Policy, forget
from ckptfs.storage.base import Storage
from ckptfs.store.repository import Repository
from tests.faults import FaultyStorage
from tests.retention_helpers import age_tree
from tests.retention_writer import POOL


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


