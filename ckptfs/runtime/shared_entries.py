"""Entries marked shared (spec/encryption.md 4.4): on an encrypted store, the entries a
checkpoint names in ``shared=`` are cut with the store-wide ``shared`` scope's chunker seed
and written into packs sealed under that scope, and the run's record locates them there. So a
system prompt or tool schemas that 1,000 runs carry are stored once, while everything else of
each run stays in its own (or its subject's) scope.

What makes it sound:

- the shared scope's packs are written by one Store per process (``scope_store``), so its
  memory of what it wrote (``KnownChunks``, its own locations) is shared by every run: a run
  takes over (``KnownChunks.adopt``) where that Store wrote each chunk, with the time it wrote
  it, and relies on it only within the reuse window (spec/v2.md 5.2), like its own writes;
- a sweep (gc, erase) between the shared write and the run's commit is seen by the run's
  commit: its look at the lease is judged against the shared writer's look, taken before its
  write (spec/v2.md 5.1 step 3), and a sweep clears what both trusted;
- erasing a run or a subject deletes objects by their scope id, never a shared pack; erasing
  never needs the shared key.
"""

from __future__ import annotations

import weakref
from collections.abc import Container, Mapping
from typing import TYPE_CHECKING, Any

from ckptfs.format.models import Captured, Entry
from ckptfs.store.entries import EntryWriter
from ckptfs.store.objects import ObjectStore
from ckptfs.store.sweeps import may_have_swept

if TYPE_CHECKING:
    from ckptfs.runtime.store import Store


def shared_store(run_store: Store) -> Store | None:
    """The Store that writes in the shared scope of ``run_store``'s encrypted store (created
    on first use), or None when ``run_store`` is not a key scope's Store (a plaintext store,
    where every entry deduplicates across runs anyway)."""
    from ckptfs.runtime.scopes import base_view, scope_store

    base = run_store.scope_base
    view = base_view(base) if base is not None else None
    if base is None or view is None:
        return None
    return scope_store(base, view.keyring.shared_scope())


class SharedEntries:
    """One run's writer of the entries it marks shared."""

    def __init__(self, store: Store, run_objects: ObjectStore) -> None:
        self.store = store
        self.objects = store.repo.objects
        self.writer = EntryWriter(self.objects, store._seeded(store.repo.config.chunker))
        self.run_objects = run_objects
        hooked: weakref.WeakSet[ObjectStore] = store.__dict__.setdefault(
            "_shared_hooked", weakref.WeakSet())
        if run_objects not in hooked:
            hooked.add(run_objects)
            run_objects.sweeps.on_swept = _both(run_objects, self.objects)

    def encode(self, state: Mapping[str, Any], entry_labels: Mapping[str, Mapping[str, str]]
               | None, reuse: Container[bytes]) -> dict[str, Entry]:
        """The entries of ``state`` (the shared ones of a checkpoint), their new chunks
        written now into packs of the shared scope, and located for the run's commit."""
        w, shared, run = self.writer, self.objects, self.run_objects
        w.reuse = reuse
        shared.sweeps.before_write()  # the shared writer's look, before its first write
        labels = {k: v for k, v in (entry_labels or {}).items() if k in state}
        entries = w.encode_state(state, labels)
        if w.pending:
            shared.put_chunks(w.pending)
            w.pending = []
        digests = [c.digest for e in entries.values() if isinstance(e, Captured)
                   for c in e.chunks]
        got = run.known.adopt(shared.known, digests)
        run.locations.add({d: loc for d in got
                           if (loc := shared.locations.own.get(d.raw)) is not None})
        # the run's commit judges its look at the lease against the older of the two looks,
        # so that a sweep since the shared writer wrote is seen (and its chunks checked)
        mine, theirs = run.sweeps.seen, shared.sweeps.seen
        if theirs is not None and (mine is None or may_have_swept(theirs, mine)):
            run.sweeps.seen = theirs
        elif mine is not None:
            shared.sweeps.seen = mine
        return entries


def _both(run: ObjectStore, shared: ObjectStore) -> Any:
    before = run.sweeps.on_swept

    def swept() -> None:
        if before is not None:
            before()
        shared.known.clear()
        shared.sweeps.seen = None  # its next write looks again

    return swept
