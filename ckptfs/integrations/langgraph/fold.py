"""Folding a checkpoint's early writes into its own record (issue 14; issue 30 narrowed it).

LangGraph saves a task's writes with ``put_writes`` against checkpoint X, and checkpoints with
``put``. Under its ``async`` durability (the default) a task's writes often reach the saver
before X's own ``put`` (X's save waits for the previous one, in the background, while the
tasks run on X). Such writes are of no use to a resume until X is committed (a resume starts
from a committed checkpoint), so the saver *holds* them, visible to its own reads at once,
and X's ``put`` commits them in X's own record: entry ``writes`` and label ``lg.writes_of``
naming X (``holds_writes``; the history labels count the record as a writes snapshot too,
``with_writes``). One record instead of two, durable exactly when X is.

Under ``sync`` durability (issue 36) a task's writes come after X's ``put`` returned, and
LangGraph's ``put`` of X's child follows at once (nothing in between waits for the writes).
The writes of the run's newest committed checkpoint are held too, and ``put_writes`` waits
(up to ``fold_wait``, 50 ms) for that child's ``put``, which commits them in its record
(``lg.writes_of`` naming X, as records of earlier versions did); if no such put comes,
``put_writes`` commits them itself. Either way they are durable when it returns: one record
per superstep instead of two (2 fsyncs on local disk instead of 4). Not held so: writes
LangGraph itself waits for before it goes on (a graph with a ``DeltaChannel``, seen by its
checkpoints' ``counters_since_delta_snapshot`` metadata, waits for them before the child's
put; a failed task's ``__error_source_node__`` write before its error handler).

Every other write is durable when ``put_writes`` returns, as SqliteSaver's are (issue 30: the
writes of a committed checkpoint used to wait up to 50 ms for its child's ``put``, and a
process killed meanwhile ran the task again: 14 of 20 tool side effects re-ran, against 5 of
20 with SqliteSaver): the writes of a committed checkpoint, of one older than the run's newest
(whose ``put`` is past), and any write to a special channel (error, interrupt, resume,
scheduled: LangGraph's ``WRITES_IDX_MAP``), which also commits what was held for that
checkpoint. Held writes are also committed, as writes snapshots:

* for the oldest held checkpoints of a run beyond ``MAX_HELD`` (4096), at once;
* before ``delete_thread``, ``delete_for_runs``, ``prune`` and ``copy_thread`` act; at
  ``flush()``, ``close()``, on leaving ``from_url``'s block and at interpreter exit
  (``atexit``); and by the ``put`` of a child, should X's own ``put`` have failed.

Records written by earlier versions, whose checkpoint snapshot holds its *parent's* writes
(``lg.writes_of`` naming the parent), read the same way. Nothing is held with a deadline
(the timer thread that committed such writes went with issue 30's rule; ``CkptfsSaver``'s
``fold_delay`` is ignored).
"""

from __future__ import annotations

import atexit
import builtins
import itertools
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from ckptfs.integrations.langgraph.layout import (
    L_CID,
    L_KIND,
    L_LAST_W,
    L_MAX_W_SEQ,
    L_MAX_WID,
    L_NS,
    L_ORDERED,
    L_THREAD,
    _Chunks,
    _RunIndex,
)
from ckptfs.store.repository import Snapshot

if TYPE_CHECKING:
    from ckptfs.integrations.langgraph.saver import CkptfsSaver

#: a checkpoint snapshot that also holds the writes of this checkpoint (its parent)
L_WRITES_OF = "lg.writes_of"
#: seconds ``put_writes`` waits for the child's ``put`` to take the writes of the newest
#: committed checkpoint into its record (under LangGraph's sync durability it follows at once)
FOLD_WAIT = 0.05
#: channels whose writes LangGraph waits for before it goes on (an error handler's source
#: node): never held for the child's put
WAITED_ON = frozenset({"__error_source_node__"})
#: checkpoint metadata of a graph with a DeltaChannel: LangGraph's put of a checkpoint waits
#: for the writes of its parent, so they are never held for it
DELTA_META = "counters_since_delta_snapshot"
#: checkpoints of one run whose writes may be held at once (LangGraph's ``async`` durability
#: hands the saver a task's writes ahead of the checkpoints themselves: with the async API its
#: steps outrun its queued puts by hundreds of checkpoints; issue 36: at 64, the older ones
#: each took a record of their own, 3.6 fsyncs a superstep instead of 2). A memory bound only:
#: held writes are of no use to a resume before their checkpoint is committed
MAX_HELD = 4096


def holds_writes(snap: Snapshot, cid: str) -> bool:
    """Whether ``snap`` holds the writes of checkpoint ``cid``: a writes snapshot of it, or
    the checkpoint snapshot of a child that folded them (``L_WRITES_OF``)."""
    labels = snap.manifest.labels
    if labels.get(L_KIND) == "writes":
        return labels.get(L_CID) == cid
    return labels.get(L_WRITES_OF) == cid


def with_writes(chain: dict[str, str], head: Mapping[str, str] | None, writes_of: str,
                seq: int) -> dict[str, str]:
    """The history labels (``layout.chain_labels`` of a checkpoint, ``chain``) of a checkpoint
    snapshot at ``seq`` that also holds the writes of checkpoint ``writes_of``: updated as a
    writes snapshot of ``writes_of`` updates them (running maximum of writes' ids, the last
    writes snapshot, the newest writes of the greatest id, whether writes kept their order)."""
    head = head or {}
    out = dict(chain)
    top_w = head.get(L_MAX_WID)
    if top_w is not None and writes_of < top_w:
        out.pop(L_ORDERED, None)
    if top_w is None or writes_of >= top_w:
        out[L_MAX_W_SEQ] = str(seq)
    out[L_MAX_WID] = writes_of if top_w is None else max(top_w, writes_of)
    out[L_LAST_W] = str(seq)
    return out


@attrs.define
class Held:
    """Writes of checkpoint ``cid`` of run ``run_id`` that no snapshot holds yet: all its rows
    so far (``[task_id, channel, idx, task_path, value]``) and whether any is typed."""

    run_id: str
    thread_id: str
    ns: str
    cid: str
    rows: builtins.list[Any]
    typed: bool


class Holder:
    """The held writes of one saver, per run and checkpoint (at most ``MAX_HELD`` checkpoints
    per run). Nothing commits them on a clock: the checkpoint's ``put`` (or its child's)
    takes them, and ``flush_all`` commits the rest. ``flush(run_id, cid)``: the saver's
    callback that commits one checkpoint's held writes (taking its locks); never called
    while this holder's lock is held. The holder keeps only a weak reference to the saver
    (no cycle through it, and ``atexit`` holds only a weak reference to the holder); but
    while it holds writes, ``_PINNED`` holds the saver, so that a saver dropped unclosed
    still commits them at interpreter exit."""

    def __init__(self, flush: Callable[[str, str], None]) -> None:
        self._flush_ref = weakref.WeakMethod(flush)
        self._lock = threading.Lock()
        #: notified whenever held writes go (``drop``): ``wait_taken`` waits on it
        self._taken = threading.Condition(self._lock)
        #: run id -> checkpoint id -> its held writes, oldest first
        self._held: dict[str, dict[str, Held]] = {}
        self._closed = False
        ref = weakref.ref(self)
        self._atexit = lambda: _flush_all(ref)
        atexit.register(self._atexit)

    def get(self, run_id: str, cid: str | None) -> Held | None:
        with self._lock:
            return self._held.get(run_id, {}).get(cid or "")

    def hold(self, run_id: str, thread_id: str, ns: str, cid: str, rows: builtins.list[Any],
             typed: bool) -> builtins.list[Held]:
        """Hold ``rows`` as the writes of ``cid``, a checkpoint whose ``put`` is still to come
        (replacing what was held for it: the rows include it). Returns what the caller must
        commit now: the oldest held checkpoints of the run beyond ``MAX_HELD``."""
        with self._lock:
            if self._closed:  # used again after close(): committed at exit again
                self._closed = False
                atexit.register(self._atexit)
            run = self._held.setdefault(run_id, {})
            run[cid] = Held(run_id, thread_id, ns, cid, rows, typed)
            _PINNED[id(self)] = self._flush_ref()
            over = len(run) - MAX_HELD
            return builtins.list(itertools.islice(run.values(), over)) if over > 0 else []

    def drop(self, held: Held) -> None:
        """Forget ``held`` (a snapshot holds its rows now), unless newer rows replaced it."""
        with self._lock:
            run = self._held.get(held.run_id)
            if run is not None and run.get(held.cid) is held:
                del run[held.cid]
                if not run:
                    del self._held[held.run_id]
                if not self._held:
                    _PINNED.pop(id(self), None)
                self._taken.notify_all()

    def wait_taken(self, run_id: str, cid: str, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds until nothing is held for checkpoint ``cid`` (a
        snapshot holds its writes now); False when something still is."""
        with self._taken:
            return self._taken.wait_for(lambda: cid not in self._held.get(run_id, {}),
                                        timeout)

    def held(self) -> builtins.list[tuple[str, str]]:
        """(run id, checkpoint id) of everything held, oldest first per run."""
        with self._lock:
            return [(r, c) for r, run in self._held.items() for c in run]

    def flush_all(self) -> None:
        """Commit everything held now (close, atexit, whole-thread operations)."""
        for run_id, cid in self.held():
            flush = self._flush_ref()
            if flush is not None:
                flush(run_id, cid)

    def close(self) -> None:
        """Commit what is held; no commit at exit until the holder is used again."""
        try:
            self.flush_all()
        finally:
            with self._lock:
                self._closed = True
            atexit.unregister(self._atexit)


#: id(holder) -> its saver's flush method, while the holder holds writes (a root, so that a
#: saver dropped unclosed is not collected before ``atexit`` commits them)
_PINNED: dict[int, object] = {}


def _flush_all(ref: weakref.ref[Holder]) -> None:
    holder = ref()
    if holder is not None:
        holder.flush_all()


# -- the saver's commits of held writes (as a writes snapshot of their own) --------------------
def commit_writes(saver: CkptfsSaver, idx: _RunIndex, tid: str, ns: str, cid: str,
                  rows: builtins.list[Any], typed: bool, prev: Snapshot | None) -> None:
    """Commit ``rows`` (all writes so far of checkpoint ``cid``) as a writes snapshot
    after ``prev`` (the checkpoint's newest writes snapshot, else the checkpoint)."""
    chunks: _Chunks = []
    entries = {"writes": saver._encode(idx, "writes", rows, {}, chunks)}
    labels = {L_KIND: "writes", L_THREAD: tid, L_NS: ns, L_CID: cid}
    snap = saver._commit(idx, "writes", entries, labels, prev.digest if prev else None,
                         chunks, typed=typed)
    idx.rows = {snap.digest: rows}


def commit_held(saver: CkptfsSaver, idx: _RunIndex, held: Held) -> None:
    """Commit held writes (fold.py) as a writes snapshot (the thread lock and
    ``idx.lock`` held)."""
    assert saver._fold is not None
    prev = saver._fresh(idx, lambda: saver._writes_base(idx, held.cid))
    commit_writes(saver, idx, held.thread_id, held.ns, held.cid, held.rows, held.typed, prev)
    saver._fold.drop(held)


def flush_run(saver: CkptfsSaver, run_id: str, cid: str) -> None:
    """Commit the held writes of checkpoint ``cid`` of run ``run_id`` now (``flush``, close,
    atexit, thread ops)."""
    assert saver._fold is not None
    held = saver._fold.get(run_id, cid)
    if held is None:
        return
    with saver._thread_lock(held.thread_id):
        with saver._lock:
            idx = saver._runs.get(run_id)
        if idx is None:
            idx = saver._index(run_id, held.thread_id, held.ns, refresh=False)
        with idx.lock:
            held = saver._fold.get(run_id, cid)  # what is held now, under the locks
            if held is not None:
                commit_held(saver, idx, held)
