"""Folding a checkpoint's early writes into its own record (issue 14; issue 30 narrowed it).

LangGraph saves a task's writes with ``put_writes`` against checkpoint X, and checkpoints with
``put``. Under its ``async`` durability (the default) a task's writes often reach the saver
before X's own ``put`` (X's save waits for the previous one, in the background, while the
tasks run on X). Such writes are of no use to a resume until X is committed (a resume starts
from a committed checkpoint), so the saver *holds* them, visible to its own reads at once,
and X's ``put`` commits them in X's own record: entry ``writes`` and label ``lg.writes_of``
naming X (``holds_writes``; the history labels count the record as a writes snapshot too,
``with_writes``). One record instead of two, durable exactly when X is.

Every other write is durable when ``put_writes`` returns, as SqliteSaver's are (issue 30: the
writes of a committed checkpoint used to wait up to 50 ms for its child's ``put``, and a
process killed meanwhile ran the task again: 14 of 20 tool side effects re-ran, against 5 of
20 with SqliteSaver): the writes of a committed checkpoint, of one older than the run's newest
(whose ``put`` is past), and any write to a special channel (error, interrupt, resume,
scheduled: LangGraph's ``WRITES_IDX_MAP``), which also commits what was held for that
checkpoint. Held writes are also committed, as writes snapshots:

* for the oldest held checkpoints of a run beyond ``MAX_HELD`` (64), at once;
* before ``delete_thread``, ``delete_for_runs``, ``prune`` and ``copy_thread`` act; at
  ``flush()``, ``close()``, on leaving ``from_url``'s block and at interpreter exit
  (``atexit``); and by the ``put`` of a child, should X's own ``put`` have failed.

Records written by earlier versions, whose checkpoint snapshot holds its *parent's* writes
(``lg.writes_of`` naming the parent), read the same way. ``Holder`` keeps a timer thread for
writes held with a deadline (``hold(committed=True)``); the saver holds none that way now.
"""

from __future__ import annotations

import atexit
import builtins
import math
import threading
import time
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
#: seconds a held write waits for the next checkpoint before it is committed on its own: about
#: 10x the saver's own step on local disk (a superstep's ``put`` follows its last task's
#: ``put_writes`` within a few milliseconds), and small next to a model or tool call
DELAY = 0.05
#: checkpoints of one run whose writes may be held at once (LangGraph's ``async`` durability
#: hands the saver a task's writes a few checkpoints ahead of the checkpoints themselves)
MAX_HELD = 64


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
    deadline: float


class Holder:
    """The held writes of one saver, per run and checkpoint (at most ``MAX_HELD`` checkpoints
    per run), and the timer thread that commits those whose deadline passed.
    ``flush(run_id, cid)``: the saver's callback that commits one checkpoint's held writes
    (taking its locks); never called while this holder's lock is held. The holder keeps only
    a weak reference to the saver, and its thread to the holder, so that a saver nobody
    holds is collected (its thread then ends within a second); but while it holds writes,
    ``_PINNED`` holds the saver, so that a saver dropped unclosed still commits them."""

    def __init__(self, flush: Callable[[str, str], None], delay: float = DELAY) -> None:
        if not 0 <= delay <= 1:
            raise ValueError(f"fold delay {delay!r}: give seconds between 0 and 1")
        self.delay = delay
        self._flush_ref = weakref.WeakMethod(flush)
        self._cond = threading.Condition(threading.RLock())
        #: run id -> checkpoint id -> its held writes, oldest first
        self._held: dict[str, dict[str, Held]] = {}
        self._thread: threading.Thread | None = None
        self._closed = False
        #: when the waiting timer thread looks at what is held next (monotonic; -inf while it
        #: is not waiting, as it looks again before it waits): a new deadline wakes it only
        #: when it is earlier (a notify per held write would wake it every superstep)
        self._wake = [-math.inf]
        ref = weakref.ref(self)
        self._atexit = lambda: _flush_all(ref)
        atexit.register(self._atexit)

    def get(self, run_id: str, cid: str | None) -> Held | None:
        with self._cond:
            return self._held.get(run_id, {}).get(cid or "")

    def hold(self, run_id: str, thread_id: str, ns: str, cid: str, rows: builtins.list[Any],
             typed: bool, committed: bool = True) -> builtins.list[Held]:
        """Hold ``rows`` as the writes of ``cid`` (replacing what was held for it: the rows
        include it). The deadline is ``delay`` after the first held write of a ``committed``
        checkpoint, or after the checkpoint's own commit (``started``) for writes that reach
        the saver before their checkpoint: until then they are of no use to a resume, which
        starts from a committed checkpoint. Returns what the caller must commit now: the
        oldest held checkpoints of the run beyond ``MAX_HELD``."""
        with self._cond:
            if self._closed:  # used again after close(): a new timer thread
                self._closed, self._thread = False, None
                atexit.register(self._atexit)
            run = self._held.setdefault(run_id, {})
            old = run.get(cid)
            deadline = time.monotonic() + self.delay if committed else math.inf
            if old is not None:
                deadline = min(old.deadline, deadline)
            run[cid] = Held(run_id, thread_id, ns, cid, rows, typed, deadline)
            _PINNED[id(self)] = self._flush_ref()
            over = builtins.list(run.values())[:-MAX_HELD] if len(run) > MAX_HELD else []
            if self._thread is None:
                self._thread = threading.Thread(target=_timer, args=(weakref.ref(self),),
                                                name="ckptfs-lg-fold", daemon=True)
                self._thread.start()
            self._due_by(deadline)
            return over

    def _due_by(self, deadline: float) -> None:
        """A held write is due at ``deadline``: wake the timer if it would look later (the
        holder's lock held)."""
        if deadline < self._wake[0]:
            self._cond.notify()

    def started(self, run_id: str, cid: str) -> None:
        """Checkpoint ``cid`` was committed: its held writes are due ``delay`` from now."""
        with self._cond:
            h = self._held.get(run_id, {}).get(cid)
            if h is not None and h.deadline == math.inf:
                h.deadline = time.monotonic() + self.delay
                self._due_by(h.deadline)

    def drop(self, held: Held) -> None:
        """Forget ``held`` (a snapshot holds its rows now), unless newer rows replaced it."""
        with self._cond:
            run = self._held.get(held.run_id)
            if run is not None and run.get(held.cid) is held:
                del run[held.cid]
                if not run:
                    del self._held[held.run_id]
                if not self._held:
                    _PINNED.pop(id(self), None)

    def held(self) -> builtins.list[tuple[str, str]]:
        """(run id, checkpoint id) of everything held, oldest first per run."""
        with self._cond:
            return [(r, c) for r, run in self._held.items() for c in run]

    def flush_all(self) -> None:
        """Commit everything held now (close, atexit, whole-thread operations)."""
        for run_id, cid in self.held():
            self._flush(run_id, cid)

    def close(self) -> None:
        """Commit what is held and stop the timer thread."""
        try:
            self.flush_all()
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify()
            atexit.unregister(self._atexit)

    def _flush(self, run_id: str, cid: str) -> None:
        flush = self._flush_ref()
        if flush is not None:
            flush(run_id, cid)

    def _due(self) -> tuple[builtins.list[tuple[str, str]], float | None] | None:
        """What is due now, and else how long to wait (None: the holder is closed)."""
        with self._cond:
            if self._closed:
                return None
            now = time.monotonic()
            every = [h for run in self._held.values() for h in run.values()]
            due = [(h.run_id, h.cid) for h in every if h.deadline <= now]
            wait = min(min((h.deadline for h in every), default=now + 1.0) - now, 1.0)
            return due, max(0.0, wait)

    def _flush_due(self, due: builtins.list[tuple[str, str]]) -> None:
        for run_id, cid in due:
            try:
                self._flush(run_id, cid)
            except Exception:  # noqa: BLE001 - kept held: the child's put folds it, close retries
                with self._cond:
                    h = self._held.get(run_id, {}).get(cid)
                    if h is not None:  # try again after another delay, not in a busy loop
                        h.deadline = time.monotonic() + max(self.delay, 0.05)


#: id(holder) -> its saver's flush method, while the holder holds writes (a root, so that a
#: saver dropped unclosed is not collected before its timer commits them)
_PINNED: dict[int, object] = {}


def _timer(ref: weakref.ref[Holder]) -> None:
    """The timer thread: commits held writes whose deadline passed; ends when the holder is
    closed or collected."""
    while True:
        holder = ref()
        if holder is None:
            return
        cond, wake = holder._cond, holder._wake
        with cond:  # looked at and waited on under one hold of the lock: no missed notify
            got = holder._due()
            if got is None:
                return
            due, wait = got
            if not due:
                del holder  # not kept alive while waiting
                wake[0] = math.inf if wait is None else time.monotonic() + wait
                try:
                    cond.wait(wait)
                finally:
                    wake[0] = -math.inf
                continue
        holder._flush_due(due)


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
    """Commit the held writes of checkpoint ``cid`` of run ``run_id`` now (the fold timer,
    close, thread ops)."""
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
