"""The small layer the agent-framework adapters share (OpenAI Agents SDK, Pydantic AI, Google
ADK): opening a store, a session's append-only item log with bounded tail reads, and tools that
never run twice.

``as_store(store)``
    A ``ckptfs.Store`` from a URL, a path or an open store (and whether the caller opened it,
    so an adapter closes only stores it opened).

``ItemLog(store, run_id)``
    A list of plain-data items (a session's messages, events) kept as one ckptfs run. Each
    commit stores only the items it adds, so ``append`` costs the new items, and the list is
    a persistent stack of *pages*: snapshot ``s`` holds entry ``items`` (the items that commit
    added) and labels saying which part of history lies below them. Reading the newest
    ``limit`` items reads the head, then one snapshot per page it still needs: O(limit)
    objects, whatever the history's length. ``pop`` and ``clear`` are commits too (history
    keeps its lineage: earlier snapshots still hold every item). Layout (labels, all text):

    * ``ag.top``: ``"<seq>:<k>"``, the newest visible items are the first ``k`` of snapshot
      ``seq``'s page ("" when the list is empty);
    * ``ag.below`` (on a commit that added items): the ``ag.top`` the list had before, i.e.
      what lies below this page;
    * ``ag.count``: the number of visible items; ``ag.op``: ``add``, ``fold``, ``pop``,
      ``clear`` or ``meta``; ``ag.key``: the caller's id (a session id), since run ids are
      hashes;
    * ``ag.base``, ``ag.loose``, ``ag.folded`` (folding, below): the node where the items not
      yet folded end, how many they are, and the seq of the newest fold commit.

    Folding (``fold=K`` items, default ``FOLD``): a turn's commit is small (its record holds
    the new items alone, each compressed by itself), and a long session of such commits weighs
    more than its content. So the append that brings the items not yet folded to ``K`` or more
    is a *fold*: its page holds those items and the new ones, compressed together (one value,
    stored as zstd chunks), and lies directly on the previous fold. Every snapshot between two
    folds is then out of the list's chain, and the log forgets it (``forget_snapshots``: the
    run's retired marker; the next ``ckptfs gc`` drops the records). Folds are kept, so every
    visible item stays readable and the history keeps one snapshot per fold; the per-turn
    lineage below the newest fold is what goes. A fold re-stores at most ``K - 1`` recent
    items (once per ``K`` items), and reads stay O(limit): a fold page is one value of ``K``
    items. ``fold=0`` keeps every commit (no folding, nothing forgotten).

    Other entries (``meta``: a session's state, say) ride along unchanged from commit to
    commit and cost nothing when unchanged. Pages already read are kept in memory (they never
    change), so a process that reads the whole history each turn reads each page once.

    Every write commits at the run's next sequence number, create-only: two processes that
    read the same head and both write race, exactly one commits, and the other gets
    ``SessionConflict`` (nothing of its write is stored). A read (``refresh``, ``tail``)
    moves the log to the newest head first, so the loser reads again and goes on.

``ToolEffects(store, run_id)`` (``ckptfs.integrations.agent_effects``, re-exported here)
    Tools that never run twice: ``call(call_id, name, fn, *args)`` runs ``fn`` through the
    ckptfs effect ledger (``Run.effect``) keyed by the framework's tool call id. The intent is
    committed before the call and the result after; a call id seen before returns its
    recorded result (or raises ``EffectFailed``), and one whose process died between the two
    commits raises ``EffectInDoubt``: the tool is never called again by itself. ``acall``
    does the same for async tools.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from ckptfs.errors import CkptfsError, ConflictError, InvalidArgument, NotFound, SessionConflict
from ckptfs.format.digest import hasher
from ckptfs.format.models import Captured
from ckptfs.format.names import record_path
from ckptfs.integrations.agent_effects import ToolEffects  # re-exported: the adapters' one import
from ckptfs.runtime.run import Run
from ckptfs.runtime.store import Store, open_store
from ckptfs.store.entry_reads import decode_value, read_content

#: label keys of an item log's snapshots (module docstring)
L_TOP = "ag.top"
L_BELOW = "ag.below"
L_COUNT = "ag.count"
L_OP = "ag.op"
L_KEY = "ag.key"
L_BASE = "ag.base"
L_LOOSE = "ag.loose"
L_FOLDED = "ag.folded"
#: items per fold (module docstring): a fold page of chat messages is some 60 KB of JSON
FOLD = 64
#: the entry holding a commit's page of items
ITEMS = "items"
#: the longest caller id kept in the ``ag.key`` label (labels hold at most 1024 characters)
MAX_KEY_LABEL = 1024
#: pages (snapshots' item lists) one log keeps read, newest use last: enough that a runner
#: reading the whole history each turn (the Agents SDK default) reads each page once
PAGE_CACHE = 65_536
_Node = tuple[int, int]  # (seq, k): the first k items of snapshot seq's page
_log = logging.getLogger(__name__)


def as_store(store: str | os.PathLike[str] | Store) -> tuple[Store, bool]:
    """``store`` as an open ``Store`` and whether it was opened here (a URL or a path): an
    adapter closes only a store it opened itself."""
    if isinstance(store, Store):
        return store, False
    if isinstance(store, (str, os.PathLike)):
        return open_store(os.fspath(store)), True
    raise InvalidArgument(f"store takes a ckptfs URL, a path or a ckptfs.Store, not "
                          f"{type(store).__name__}: e.g. 'file:///var/agents' or "
                          "ckptfs.open_store('s3://bucket/agents')")


class _Forgetter:
    """Forgets, in one background thread per process, snapshots adapters know nothing reads
    any more. ``forget_snapshots`` takes the maintenance lease and then waits the store's
    check window (spec/v2.md 5.4, half a second by default) before it decides anything: a
    turn must not wait for that, so the forget runs beside the turns. Requests made while one
    runs are merged into the next. Best effort: the session is whole either way, and a forget
    that could not run (maintenance holds the store, the process ended first) leaves its
    snapshots to a later forget of the run or to ``ckptfs forget``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._todo: dict[tuple[int, str], tuple[Store, set[int]]] = {}
        self._thread: threading.Thread | None = None

    def submit(self, store: Store, run_id: str, seqs: Iterable[int]) -> None:
        drop = set(seqs)
        if not drop:
            return
        with self._lock:
            _, have = self._todo.setdefault((id(store), run_id), (store, set()))
            have |= drop
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, daemon=True,
                                                name="ckptfs-agent-forget")
                self._thread.start()

    def _work(self) -> None:
        from ckptfs.ops.retention import forget_snapshots

        while True:
            with self._lock:
                if not self._todo:
                    self._thread = None
                    return
                (_, run_id), (store, drop) = self._todo.popitem()
            try:
                forget_snapshots(store.repo, {run_id: drop})
            except CkptfsError as e:
                _log.warning("run %s: %d snapshots nothing reads were not forgotten (%s); "
                             "'ckptfs forget' can drop them", run_id, len(drop),
                             type(e).__name__)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the forgets asked for so far are done; False on timeout."""
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join(timeout)
            return not thread.is_alive()
        return True


    def reset(self) -> None:
        """In a forked child: the parent's thread and queue are not this process's."""
        self._lock = threading.Lock()
        self._todo, self._thread = {}, None


_FORGETTER = _Forgetter()
atexit.register(_FORGETTER.wait, 10.0)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_FORGETTER.reset)


def forget_quietly(store: Store, run_id: str, seqs: Iterable[int]) -> None:
    """Forget snapshots ``seqs`` of ``run_id`` that an adapter knows nothing reads any more,
    in the background (``_Forgetter``; ``ops.retention.forget_snapshots``: the run's retired
    marker, and the next gc drops their records). ``forgets_done()`` waits for them."""
    _FORGETTER.submit(store, run_id, seqs)


def forgets_done(timeout: float | None = None) -> bool:
    """Wait for the forgets ``forget_quietly`` was asked for (False: still running after
    ``timeout`` seconds). Before closing a store an adapter opened, and in tests."""
    return _FORGETTER.wait(timeout)


def run_id_for(prefix: str, *parts: str) -> str:
    """A run id for a framework's ids (any characters, any length): ``<prefix>-<32 hex>``
    (BLAKE3 of the parts). The prefix names the adapter (``oai``, ``pyd``, ``adk``, ...)."""
    h = hasher()
    for p in parts:
        b = p.encode("utf-8", "surrogatepass")
        h.update(len(b).to_bytes(8, "big") + b)
    return f"{prefix}-{str(h.hexdigest())[:32]}"


def _node(text: str | None) -> _Node | None:
    if not text:
        return None
    seq, _, k = text.partition(":")
    return int(seq), int(k)


def _text(node: _Node | None) -> str:
    return "" if node is None else f"{node[0]}:{node[1]}"


class ItemLog:
    """An append-only list of plain-data items in one ckptfs run (module docstring).

    ``key`` is the caller's id (kept in label ``ag.key``); ``schema`` names what the items
    are. Thread-safe; every method does blocking I/O (async adapters call it in a thread)."""

    def __init__(self, store: Store, run_id: str, *, key: str = "",
                 schema: tuple[str, int] = ("agent-items", 1),
                 labels: Mapping[str, str] | None = None, fold: int = FOLD) -> None:
        if fold < 0:
            raise InvalidArgument(f"fold is {fold}: give the items per fold (0: never fold)")
        if len(key) > MAX_KEY_LABEL:
            raise InvalidArgument(f"id is {len(key)} characters; ckptfs keeps it as a label, "
                                  f"which holds at most {MAX_KEY_LABEL}: use a shorter id")
        self.store = store
        self.run_id = run_id
        self.key = key
        self.schema = schema
        self.fold = fold
        self._labels = {**(labels or {}), L_KEY: key}
        self._lock = threading.RLock()
        self._run: Run | None = None
        self._top: _Node | None = None
        self._count = 0
        self._meta: dict[str, Any] = {}
        #: folding (module docstring): where the items not yet folded end, how many they are,
        #: the seq of the newest fold (0: none)
        self._base: _Node | None = None
        self._loose = 0
        self._folded = 0
        #: seq -> (page, below): immutable once committed
        self._pages: OrderedDict[int, tuple[list[Any], _Node | None]] = OrderedDict()
        self._loaded = False

    # -- reading ---------------------------------------------------------------------------
    def refresh(self) -> None:
        """Move to the run's newest head (one head lookup; the head is read only when it
        moved). Called by every read, so a read sees what other processes committed."""
        with self._lock:
            repo = self.store.repo
            run = self._run
            if run is not None and run.snapshot is not None:
                # commits are create-only at seq + 1: while no record seq + 1 exists, the
                # snapshot this log holds is still the head (one existence check)
                if not repo.storage.exists(record_path(self.run_id, run.seq + 1)):
                    self._loaded = True
                    return
                rec = repo.head(self.run_id)
                if rec is not None and run.snapshot.digest == rec.snapshot:
                    self._loaded = True
                    return
            try:
                if repo.load_config() is None:
                    raise NotFound("no store yet")
                self._adopt(self.store.resume(self.run_id))
            except NotFound:  # no such run (yet, or any more): an empty list
                self._run, self._top, self._count, self._meta = None, None, 0, {}
                self._base, self._loose, self._folded = None, 0, 0
                self._loaded = True

    def _adopt(self, run: Run) -> None:
        labels = run.snapshot.manifest.labels if run.snapshot else {}
        self._run = run
        self._top = _node(labels.get(L_TOP))
        self._count = int(labels.get(L_COUNT, "0"))
        # a log written before folding: nothing folded, every item loose (the first fold
        # gathers them all, once)
        self._base = _node(labels.get(L_BASE))
        self._loose = int(labels.get(L_LOOSE, str(self._count)))
        self._folded = int(labels.get(L_FOLDED, "0"))
        self._meta = {k: v for k, v in run.state.items() if k != ITEMS}
        if run.snapshot is not None and ITEMS in run.state:
            self._remember(run.seq, list(run.state[ITEMS]), _node(labels.get(L_BELOW)))
        self._loaded = True

    def _ensure(self) -> None:
        if not self._loaded:
            self.refresh()

    def __len__(self) -> int:
        with self._lock:
            self._ensure()
            return self._count

    @property
    def meta(self) -> dict[str, Any]:
        """The other entries of the head (a copy): what ``append(meta=)`` last set."""
        with self._lock:
            self._ensure()
            return dict(self._meta)

    @property
    def seq(self) -> int:
        """The head's sequence number as this log last saw it (0: no commit yet)."""
        with self._lock:
            return self._run.seq if self._run is not None else 0

    def tail(self, limit: int | None = None, *, refresh: bool = True) -> list[Any]:
        """The newest ``limit`` items (all when None), oldest first. Reads the head (when it
        moved) and one snapshot per page not yet read: O(limit) objects."""
        if limit is not None and limit <= 0:
            return []
        with self._lock:
            if refresh or not self._loaded:
                self.refresh()
            for attempt in (0, 1):
                out = []
                try:
                    for x in self._newest():
                        out.append(x)
                        if limit is not None and len(out) >= limit:
                            break
                except NotFound:
                    if attempt:
                        raise
                    # another process folded and forgot pages below the head this log
                    # held: its newer head holds them
                    self._loaded = False
                    self._run = None
                    self.refresh()
                    continue
                break
            out.reverse()
            return out

    def newest(self, *, refresh: bool = True) -> Iterator[Any]:
        """The items newest first, read lazily page by page (stop early to read less). The
        log's lock is not held between items: iterate in one thread."""
        with self._lock:
            if refresh or not self._loaded:
                self.refresh()
            top = self._top
        return self._walk(top)

    def _newest(self) -> Iterator[Any]:
        return self._walk(self._top)

    def _walk(self, node: _Node | None) -> Iterator[Any]:
        while node is not None:
            seq, k = node
            page, below = self._page(seq)
            yield from reversed(page[:k])
            node = below

    def _page(self, seq: int) -> tuple[list[Any], _Node | None]:
        """Snapshot ``seq``'s page and what lies below it (read once, then kept)."""
        with self._lock:
            hit = self._pages.get(seq)
            if hit is not None:
                self._pages.move_to_end(seq)
                return hit
        repo = self.store.repo
        snap = repo.snapshot_at(self.run_id, seq)
        repo.check_not_expired(snap)
        entry = snap.manifest.entries.get(ITEMS)
        page: Any = None
        if isinstance(entry, Captured) and entry.kind == "value":
            # only the page is read: the other entries (a session's state, a harness
            # snapshot's messages) may be far larger and are not needed here
            where = f"snapshot {snap.id} (run {self.run_id!r} seq {seq}) entry {ITEMS!r}"
            repo.ensure_located(snap)
            content = read_content(repo.objects, entry, where=where)
            page = self.store.codecs.decode(decode_value(entry, content, where=where),
                                            what=where, content=content)
        if type(page) is not list:
            raise NotFound(f"run {self.run_id!r} seq {seq} has no list entry {ITEMS!r}: it was "
                           "not written by a ckptfs agent adapter")
        return self._remember(seq, page, _node(snap.manifest.labels.get(L_BELOW)))

    def _remember(self, seq: int, page: list[Any], below: _Node | None
                  ) -> tuple[list[Any], _Node | None]:
        with self._lock:
            self._pages[seq] = (page, below)
            self._pages.move_to_end(seq)
            while len(self._pages) > PAGE_CACHE:
                self._pages.popitem(last=False)
            return page, below

    # -- writing ---------------------------------------------------------------------------
    def append(self, items: Sequence[Any], *, meta: Mapping[str, Any] | None = None,
               labels: Mapping[str, str] | None = None) -> int:
        """Commit ``items`` (plain data, none of them None) after the last item, in one commit
        that stores only them (and the ``meta`` entries given, which replace those of the same
        name). Returns the new count. SessionConflict when another process committed since
        this log last read: nothing was stored; read again (``tail``/``refresh``) and retry."""
        items = list(items)
        if any(x is None for x in items):
            raise InvalidArgument("an item log holds no None items (None means 'empty' to pop)")
        with self._lock:
            self._ensure()
            seq = self._next_seq()
            if items and self.fold and self._loose + len(items) >= self.fold:
                page = self._newest_loose() + items
                return self._commit(page, (seq, len(page)), self._count + len(items), "fold",
                                    below=self._base, meta=meta, labels=labels,
                                    fold=((seq, len(page)), 0))
            below = self._top
            top = (seq, len(items)) if items else below
            return self._commit(items, top, self._count + len(items), "add" if items else "meta",
                                below=below if items else None, meta=meta, labels=labels,
                                fold=(self._base, self._loose + len(items)))

    def _newest_loose(self) -> list[Any]:
        """The items not yet folded, oldest first (read from pages this log mostly holds)."""
        out: list[Any] = []
        for x in self._newest():
            if len(out) >= self._loose:
                break
            out.append(x)
        out.reverse()
        return out

    def pop(self, *, meta: Mapping[str, Any] | None = None) -> Any | None:
        """Remove the newest item and return it (None when the list is empty): one commit."""
        with self._lock:
            self._ensure()
            if self._top is None:
                return None
            seq, k = self._top
            page, below = self._page(seq)
            item = page[k - 1]
            top = (seq, k - 1) if k > 1 else below
            # popping a folded item moves the fold's end down with the top
            self._commit([], top, self._count - 1, "pop", meta=meta,
                         fold=(self._base, self._loose - 1) if self._loose else (top, 0))
            return item

    def clear(self, *, meta: Mapping[str, Any] | None = None) -> None:
        """Empty the list (one commit; earlier snapshots keep the items until retention
        forgets them: ``ckptfs forget``/``erase``)."""
        with self._lock:
            self._ensure()
            if self._top is None and self._run is not None and not meta:
                return
            self._commit([], None, 0, "clear", meta=meta, fold=(None, 0))

    def _next_seq(self) -> int:
        return (self._run.seq if self._run is not None else 0) + 1

    def _commit(self, page: list[Any], top: _Node | None, count: int, op: str, *,
                below: _Node | None = None, meta: Mapping[str, Any] | None = None,
                labels: Mapping[str, str] | None = None,
                fold: tuple[_Node | None, int] | None = None) -> int:
        """Commit ``page`` at the next seq; ``fold``: the new (base, loose) (None: as they
        are). An ``op`` of ``fold`` makes this commit the newest fold and forgets the
        snapshots the fold took out of the chain."""
        if meta and ITEMS in meta:
            raise InvalidArgument(f"meta may not name the entry {ITEMS!r} (it holds the page)")
        run = self._run
        if run is None:
            try:
                run = self.store.start_run(self.run_id, schema=self.schema)
            except ConflictError as e:
                self._loaded = False
                raise self._conflict(e) from None
        new_meta = {**self._meta, **(meta or {})}
        state = {ITEMS: page, **new_meta}
        base, loose = (self._base, self._loose) if fold is None else fold
        folded = run.seq + 1 if op == "fold" else self._folded
        all_labels = {**self._labels, **(labels or {}), L_TOP: _text(top),
                      L_COUNT: str(count), L_OP: op}
        all_labels.update({L_BASE: _text(base), L_LOOSE: str(loose), L_FOLDED: str(folded)})
        if below is not None or op == "add":
            all_labels[L_BELOW] = _text(below)
        try:
            snap = run.checkpoint(state, labels=all_labels,
                                  changed=[ITEMS, *(meta or {})])
        except ConflictError as e:
            self._run, self._loaded = None, False  # fenced: the next read resumes the head
            raise self._conflict(e) from None
        previous = self._folded
        self._run, self._top, self._count, self._meta = run, top, count, new_meta
        self._base, self._loose, self._folded = base, loose, folded
        if page:
            self._remember(snap.seq, page, below)
        if op == "fold":
            self._forget_between(previous, snap.seq)
        return count

    def _forget_between(self, lo: int, hi: int) -> None:
        """Forget the snapshots between folds ``lo`` and ``hi``: none is on the chain any
        more."""
        drop = range(lo + 1, hi)
        forget_quietly(self.store, self.run_id, drop)
        for seq in drop:  # never read again: a walk of the list goes fold to fold
            self._pages.pop(seq, None)

    def _conflict(self, e: ConflictError) -> SessionConflict:
        return SessionConflict(
            f"{self.key or self.run_id!r} (run {self.run_id!r}): another process committed "
            "to it since this process last read it, so this write was not stored. Read it "
            "again (the next read does) and retry if the write still applies.")


__all__ = ["ItemLog", "ToolEffects", "as_store", "forget_quietly", "forgets_done",
           "run_id_for"]
