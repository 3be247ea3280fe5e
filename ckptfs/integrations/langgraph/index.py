"""How CkptfsSaver finds a thread's runs and snapshots: per-run indexes (one listing each),
the live generation of a run, and the lookups by history labels (docs/guides/langgraph.md,
"Finding checkpoints"). A base class of CkptfsSaver, kept apart to keep modules small."""

from __future__ import annotations

import bisect
import builtins
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import TypeVar

from ckptfs.errors import ErasedError, NotFound, StorageError
from ckptfs.format.names import DECIMAL
from ckptfs.integrations.langgraph import listing
from ckptfs.integrations.langgraph.fold import holds_writes
from ckptfs.integrations.langgraph.layout import (
    L_MAX_CID,
    L_MAX_W_SEQ,
    L_MAX_WID,
    L_LAST_W,
    L_ORDERED,
    WARM_RUNS,
    _cid,
    _kind,
    _RunIndex,
    checkpoints_ordered,
    run_id_for,
    thread_prefix,
)
from ckptfs.runtime.store import Store
from ckptfs.storage.local import LocalStorage
from ckptfs.store.lifecycle import retired_throughs
from ckptfs.store.repository import Snapshot

_T = TypeVar("_T")


class RunLookup:
    """The saver's state about runs, and every lookup that reads manifests."""

    store: Store
    _lock: threading.Lock
    _thread_locks: dict[str, threading.RLock]
    _runs: OrderedDict[str, _RunIndex]
    _live: dict[str, str]
    _listed: dict[str, tuple[builtins.list[int], listing.Marks]]
    _ready: bool

    # -- bookkeeping -------------------------------------------------------------------------
    def _thread_lock(self, thread_id: str) -> threading.RLock:
        with self._lock:
            lock = self._thread_locks.get(thread_id)
            if lock is None:
                lock = self._thread_locks[thread_id] = threading.RLock()
            return lock

    def _live_run(self, base: str) -> str:
        """The run a thread's namespace (or effect ledger) writes to now: ``base``, or
        ``base.<n>`` after n - 1 deletions, since an erased or wholly forgotten run is closed to
        writers forever (spec/retention.md section 3). One listing per generation, cached."""
        with self._lock:
            known = self._live.get(base)
        if known is not None:
            return known
        gen, rid = 1, base
        while self._closed(rid):
            gen += 1
            rid = f"{base}.{gen}"
        with self._lock:
            self._live[base] = rid
        return rid

    def _closed(self, run_id: str) -> bool:
        """True when the run has a retired marker and no visible snapshot (erased, or forgotten
        whole): no new snapshot may be committed to it. A run without markers is open: no
        listing of its records then."""
        if not retired_throughs(self.store.storage, run_id):
            return False
        seqs, marks = listing.whole(self.store.repo, run_id)
        if seqs:  # the listing a new index of this run would take again at once: keep it
            with self._lock:
                self._listed[run_id] = (seqs, marks)
        return not seqs

    def _index(self, run_id: str, thread_id: str | None, ns: str | None, *,
               refresh: bool = True) -> _RunIndex:
        with self._lock:
            idx = self._runs.get(run_id)
            listed = self._listed.pop(run_id, None)
            if idx is None:
                idx = self._runs[run_id] = _RunIndex(run_id, thread_id, ns)
                refresh = True
                if listed is not None:  # taken by _live_run a moment ago
                    idx.reset(*listed)
                    refresh = False
            self._runs.move_to_end(run_id)
            for cold in builtins.list(self._runs.values())[:-WARM_RUNS]:
                cold.writers.clear()
                cold.lists.clear()
                cold.loaded.clear()
                cold.complete = False
        if refresh:
            self._refresh(idx)
        return idx

    def _ns_index(self, thread_id: str, ns: str, *, refresh: bool = True) -> _RunIndex:
        """The index of the live run of (thread, namespace). A refreshed run that turned out
        empty with retired markers may have been erased by another saver since this one chose
        it: the live generation is looked up again (else the next put would hit the fence)."""
        base = run_id_for(thread_id, ns)
        idx = self._index(self._live_run(base), thread_id, ns, refresh=refresh)
        if refresh and not idx.seqs and idx.marks is not None and idx.marks.throughs:
            with self._lock:
                if self._live.get(base) == idx.run_id:
                    del self._live[base]
            rid = self._live_run(base)
            if rid != idx.run_id:
                idx = self._index(rid, thread_id, ns)
        return idx

    def _sync(self, idx: _RunIndex) -> None:
        """Take a new listing of the whole run (another saver may have written or forgotten)."""
        with idx.lock:
            idx.reset(*listing.whole(self.store.repo, idx.run_id))

    def _refresh(self, idx: _RunIndex) -> bool:
        """Bring the index up to date without listing the history (``listing``): what lies
        above the known head, the whole run only when its retired markers changed; a first
        look from the head hint. True when something may have changed."""
        with idx.lock:
            repo = self.store.repo
            if idx.marks is None:
                idx.reset(*listing.first_look(repo, idx.run_id))
                return True
            new = listing.above(repo, idx.run_id, idx.top, idx.marks)
            if new is None:
                self._sync(idx)
                return True
            if new:
                idx.seqs.extend(new)
                idx.complete = False
            return bool(new)

    def _catch_up(self, idx: _RunIndex) -> bool:
        """``_refresh`` for a lookup that missed (True when something may have changed): under
        ``async`` durability a task's writes usually name a checkpoint still queued behind the
        previous one in this process, so nothing is new and no listing of the run is taken."""
        return self._refresh(idx)

    def _fresh(self, idx: _RunIndex, find: Callable[[], _T]) -> _T:
        """``find()``, again after a new listing when the index names a record that is gone:
        another process forgot it and ``ckptfs gc`` collected it since this saver listed the
        run (the write paths do not list the run before every call). An erased run's
        ErasedError is raised as it is."""
        try:
            return find()
        except ErasedError:
            raise
        except NotFound:
            self._sync(idx)
            return find()

    def _run_ids(self, prefix: str) -> builtins.list[str]:
        return [r for r in self.store.repo.run_ids() if r.startswith(prefix)]

    def _thread_indexes(self, thread_id: str) -> builtins.list[_RunIndex]:
        """Every non-empty run (one per namespace) of a thread, refreshed."""
        out = []
        for rid in self._run_ids(thread_prefix(thread_id)):
            idx = self._index(rid, thread_id, None)
            if idx.seqs:
                out.append(idx)
        return out

    # -- finding snapshots (docs/guides/langgraph.md, "Finding checkpoints") -----------
    def _at(self, idx: _RunIndex, seq: int) -> Snapshot:
        """The snapshot at ``seq``, read once."""
        snap = idx.loaded.get(seq)
        if snap is None:
            snap = idx.remember(idx.check(self.store.repo.snapshot_at(idx.run_id, seq)))
        return snap

    def _load_all(self, idx: _RunIndex) -> builtins.list[Snapshot]:
        """Every visible snapshot, ascending (the slow path for runs whose order broke)."""
        if not idx.complete:
            snaps = [self._at(idx, s) for s in idx.seqs]  # the bound may drop some meanwhile
            idx.loaded = dict(zip(idx.seqs, snaps))
            idx.complete = True  # kept whole from now on (layout.LOADED_MAX)
        return [idx.loaded[s] for s in idx.seqs]

    def _head_labels(self, idx: _RunIndex) -> Mapping[str, str] | None:
        return self._at(idx, idx.top).manifest.labels if idx.seqs else None

    def _ordered(self, idx: _RunIndex) -> bool:
        """True when the head vouches that checkpoint ids rose, and writes' checkpoint ids
        never fell, with the sequence number: then lookups are binary searches."""
        head = self._head_labels(idx)
        return head is None or head.get(L_ORDERED) == "true"

    def _cp_ordered(self, idx: _RunIndex) -> bool:
        """True when the head vouches that checkpoint ids rose (writes may not have)."""
        return checkpoints_ordered(self._head_labels(idx))

    def _bisect(self, idx: _RunIndex, key: str, pred: Callable[[str], bool],
                near: int | None = None) -> int:
        """The first position in ``idx.seqs`` whose snapshot's label ``key`` (default "")
        satisfies ``pred`` (false then true along the run), or ``len(idx.seqs)``. With
        ``near`` (a position the answer is likely close to), gallop from there first."""
        lo, hi = 0, len(idx.seqs)
        step = 1
        while near is not None and lo < hi:
            p = min(max(near, lo), hi - 1)
            if pred(self._at(idx, idx.seqs[p]).manifest.labels.get(key, "")):
                hi, near = p, p - step
            else:
                lo, near = p + 1, p + step
            step *= 2
            if hi - lo <= step:
                break
        while lo < hi:
            mid = (lo + hi) // 2
            if pred(self._at(idx, idx.seqs[mid]).manifest.labels.get(key, "")):
                hi = mid
            else:
                lo = mid + 1
        return lo

    def _latest(self, idx: _RunIndex) -> Snapshot | None:
        """The checkpoint with the greatest id: in an ordered run the one nearest the head."""
        if self._cp_ordered(idx):
            for s in reversed(idx.seqs):
                snap = self._at(idx, s)
                if _kind(snap) == "checkpoint":
                    return snap
            return None
        found = self._all_checkpoints(idx)
        return found[max(found)] if found else None

    def _all_checkpoints(self, idx: _RunIndex) -> dict[str, Snapshot]:
        """Checkpoint id -> its newest snapshot, reading the whole run."""
        return {_cid(s): s for s in self._load_all(idx) if _kind(s) == "checkpoint"}

    def _checkpoint(self, idx: _RunIndex, cid: str, near: int | None = None
                    ) -> Snapshot | None:
        """The snapshot of checkpoint ``cid``: O(log n) reads in an ordered run; with
        ``near`` (a position in the run it likely lies at or just below: a child's, for its
        parent), a few reads from there (``_bisect``'s gallop)."""
        if not self._cp_ordered(idx):
            return self._all_checkpoints(idx).get(cid)
        head = self._head_labels(idx)
        if head is not None and head.get(L_MAX_CID, "") < cid:
            # above every id committed: none such (under async durability LangGraph's writes
            # come before their checkpoint's queued put; a search read records across the run)
            return None
        if head is not None and head.get(L_MAX_CID) == cid:
            snap = self._latest(idx)  # the greatest id, if it was not forgotten
        else:
            i = self._bisect(idx, L_MAX_CID, lambda top: top >= cid, near)
            snap = self._at(idx, idx.seqs[i]) if i < len(idx.seqs) else None
        return snap if snap and _kind(snap) == "checkpoint" and _cid(snap) == cid else None

    def _locked_checkpoint(self, idx: _RunIndex, cid: str) -> Snapshot | None:
        with idx.lock:
            return self._checkpoint(idx, cid)

    def _writes_snap(self, idx: _RunIndex, cid: str, near: int | None = None
                     ) -> Snapshot | None:
        """The newest writes snapshot of checkpoint ``cid`` (it holds all its writes so far);
        ``near``: the checkpoint's seq, where its writes usually follow."""
        if self._ordered(idx) and idx.seqs:
            head = self._head_labels(idx)
            assert head is not None
            if head.get(L_MAX_WID, "") < cid:
                return None  # no writes snapshot names an id this high
            if head.get(L_MAX_WID) == cid:
                i = len(idx.seqs)
            else:
                at = None if near is None else bisect.bisect_left(idx.seqs, near)
                i = self._bisect(idx, L_MAX_WID, lambda top: top > cid, at)
            if i == 0:
                return None
            below = self._at(idx, idx.seqs[i - 1]).manifest.labels
            if below.get(L_MAX_WID) != cid:
                return None
            last = below.get(L_LAST_W, "")
            w = int(last) if DECIMAL.match(last) else 0
            if idx.seqs[bisect.bisect_left(idx.seqs, w) % len(idx.seqs)] == w:
                snap = self._at(idx, w)
                if holds_writes(snap, cid):
                    return snap
        elif self._cp_ordered(idx) and idx.seqs:
            # writes out of order (async durability): the running maximum still says where
            # no writes exist, and the head names the newest writes of the greatest id
            head = self._head_labels(idx)
            assert head is not None
            if head.get(L_MAX_WID, "") < cid:
                return None
            last = head.get(L_MAX_W_SEQ, "") if head.get(L_MAX_WID) == cid else ""
            w = int(last) if DECIMAL.match(last) else 0
            if w and idx.seqs[bisect.bisect_left(idx.seqs, w) % len(idx.seqs)] == w:
                snap = self._at(idx, w)
                if holds_writes(snap, cid):
                    return snap
        found = [s for s in self._load_all(idx) if holds_writes(s, cid)]
        return found[-1] if found else None

    def _ensure_store(self) -> None:
        if not self._ready:
            self.store.init()
            self._ready = True

    def _prepare_store(self) -> None:
        """Create the store if absent, and probe a local store's features, at the saver's
        first lookup (LangGraph's ``get_tuple`` before a run; SqliteSaver creates its tables
        then), so that the first checkpoint's commit does not also pay for them (issue 30:
        5 fsyncs before the first record was in place on a fresh store, 2 on an existing one,
        instead of 1, and a wider window for a crash to find no checkpoint). The probe runs
        in the background (``probe_features_soon``): a process that only reads, such as a
        fresh ``get_state``, does not wait for its files and fsyncs. A store this process
        cannot write is left for ``put`` to report."""
        if not self._ready:
            try:
                self._ensure_store()
                if isinstance(self.store.storage, LocalStorage):
                    self.store.storage.probe_features_soon()
            except StorageError:
                pass
