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
    * ``ag.count``: the number of visible items; ``ag.op``: ``add``, ``pop``, ``clear`` or
      ``meta``; ``ag.key``: the caller's id (a session id), since run ids are hashes.

    Other entries (``meta``: a session's state, say) ride along unchanged from commit to
    commit and cost nothing when unchanged. Pages already read are kept in memory (they never
    change), so a process that reads the whole history each turn reads each page once.

    Every write commits at the run's next sequence number, create-only: two processes that
    read the same head and both write race, exactly one commits, and the other gets
    ``SessionConflict`` (nothing of its write is stored). A read (``refresh``, ``tail``)
    moves the log to the newest head first, so the loser reads again and goes on.

``ToolEffects(store, run_id)``
    Tools that never run twice: ``call(call_id, name, fn, *args)`` runs ``fn`` through the
    ckptfs effect ledger (``Run.effect``) keyed by the framework's tool call id. The intent is
    committed before the call and the result after; a call id seen before returns its
    recorded result (or raises ``EffectFailed``), and one whose process died between the two
    commits raises ``EffectInDoubt``: the tool is never called again by itself. ``acall``
    does the same for async tools.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any

from ckptfs.errors import ConflictError, InvalidArgument, NotFound, SessionConflict
from ckptfs.format.digest import hasher
from ckptfs.format.ledger import Effect
from ckptfs.runtime import effects as fx
from ckptfs.runtime.run import Run
from ckptfs.runtime.store import Store, open_store

#: label keys of an item log's snapshots (module docstring)
L_TOP = "ag.top"
L_BELOW = "ag.below"
L_COUNT = "ag.count"
L_OP = "ag.op"
L_KEY = "ag.key"
#: the entry holding a commit's page of items
ITEMS = "items"
#: the longest caller id kept in the ``ag.key`` label (labels hold at most 1024 characters)
MAX_KEY_LABEL = 1024
#: pages (snapshots' item lists) one log keeps read, newest use last
PAGE_CACHE = 4096
#: how often ``ToolEffects.call`` resumes and tries again when another process committed
#: to the ledger run first (the ledger then tells what was done: never a second call)
CONFLICT_RETRIES = 3

_Node = tuple[int, int]  # (seq, k): the first k items of snapshot seq's page


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
                 labels: Mapping[str, str] | None = None) -> None:
        if len(key) > MAX_KEY_LABEL:
            raise InvalidArgument(f"id is {len(key)} characters; ckptfs keeps it as a label, "
                                  f"which holds at most {MAX_KEY_LABEL}: use a shorter id")
        self.store = store
        self.run_id = run_id
        self.key = key
        self.schema = schema
        self._labels = {**(labels or {}), L_KEY: key}
        self._lock = threading.RLock()
        self._run: Run | None = None
        self._top: _Node | None = None
        self._count = 0
        self._meta: dict[str, Any] = {}
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
                self._loaded = True

    def _adopt(self, run: Run) -> None:
        labels = run.snapshot.manifest.labels if run.snapshot else {}
        self._run = run
        self._top = _node(labels.get(L_TOP))
        self._count = int(labels.get(L_COUNT, "0"))
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
            out = []
            for x in self._newest():
                out.append(x)
                if limit is not None and len(out) >= limit:
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
        snap = self.store.repo.snapshot_at(self.run_id, seq)
        state = self.store.read(snap, lenient_refs=True)
        page = state.get(ITEMS)
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
            below = self._top
            top = (self._next_seq(), len(items)) if items else below
            return self._commit(items, top, self._count + len(items), "add" if items else "meta",
                                below=below if items else None, meta=meta, labels=labels)

    def pop(self, *, meta: Mapping[str, Any] | None = None) -> Any | None:
        """Remove the newest item and return it (None when the list is empty): one commit."""
        with self._lock:
            self._ensure()
            if self._top is None:
                return None
            seq, k = self._top
            page, below = self._page(seq)
            item = page[k - 1]
            self._commit([], (seq, k - 1) if k > 1 else below, self._count - 1, "pop",
                         meta=meta)
            return item

    def clear(self, *, meta: Mapping[str, Any] | None = None) -> None:
        """Empty the list (one commit; earlier snapshots keep the items until retention
        forgets them: ``ckptfs forget``/``erase``)."""
        with self._lock:
            self._ensure()
            if self._top is None and self._run is not None and not meta:
                return
            self._commit([], None, 0, "clear", meta=meta)

    def _next_seq(self) -> int:
        return (self._run.seq if self._run is not None else 0) + 1

    def _commit(self, page: list[Any], top: _Node | None, count: int, op: str, *,
                below: _Node | None = None, meta: Mapping[str, Any] | None = None,
                labels: Mapping[str, str] | None = None) -> int:
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
        all_labels = {**self._labels, **(labels or {}), L_TOP: _text(top),
                      L_COUNT: str(count), L_OP: op}
        if below is not None or op == "add":
            all_labels[L_BELOW] = _text(below)
        try:
            snap = run.checkpoint(state, labels=all_labels,
                                  changed=[ITEMS, *(meta or {})])
        except ConflictError as e:
            self._run, self._loaded = None, False  # fenced: the next read resumes the head
            raise self._conflict(e) from None
        self._run, self._top, self._count, self._meta = run, top, count, new_meta
        if page:
            self._remember(snap.seq, page, below)
        return count

    def _conflict(self, e: ConflictError) -> SessionConflict:
        return SessionConflict(
            f"{self.key or self.run_id!r} (run {self.run_id!r}): another process committed "
            "to it since this process last read it, so this write was not stored. Read it "
            "again (the next read does) and retry if the write still applies.")


class ToolEffects:
    """Tools that never run twice, keyed by the framework's tool call id, in run ``run_id``'s
    effect ledger (module docstring). Thread-safe."""

    def __init__(self, store: Store, run_id: str, *,
                 schema: tuple[str, int] = ("agent-effects", 1)) -> None:
        self.store = store
        self.run_id = run_id
        self.schema = schema
        self._run: Run | None = None
        self._lock = threading.RLock()

    def _ledger_run(self, fresh: bool = False) -> Run:
        if self._run is None or fresh:
            if self.store.repo.load_config() is None:  # no store yet: the first commit makes it
                self._run = self.store.start_run(self.run_id, schema=self.schema)
                return self._run
            try:
                self._run = self.store.resume(self.run_id)
            except NotFound:
                self._run = self.store.start_run(self.run_id, schema=self.schema)
        return self._run

    def call(self, call_id: str, name: str, fn: Callable[..., Any], *args: Any,
             reconcile: Callable[[Effect], Any] | None = None,
             timeout: float = fx.DEFAULT_TIMEOUT, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` at most once per ``call_id``: the recorded result when the
        call id completed before, EffectFailed when it failed, EffectInDoubt when a process
        died between intent and outcome (``reconcile``, if given, is asked instead: it returns
        the result found in the outside world, or ``ckptfs.NOT_DONE`` to call ``fn`` now).
        Arguments and result must be plain data (JSON-like). ``timeout`` is the lease in
        seconds (``Run.effect``)."""
        with self._lock:
            for attempt in range(CONFLICT_RETRIES + 1):
                run = self._ledger_run(fresh=attempt > 0)
                try:
                    return run.effect(name, fn, *args, key=call_id, reconcile=reconcile,
                                      timeout=timeout, fn_kwargs=kwargs)
                except ConflictError:
                    self._run = None  # another process moved the ledger: read it again
                    if attempt == CONFLICT_RETRIES:
                        raise
            raise AssertionError("unreachable")  # pragma: no cover

    async def acall(self, call_id: str, name: str, fn: Callable[..., Any], *args: Any,
                    reconcile: Callable[[Effect], Any] | None = None,
                    timeout: float = fx.DEFAULT_TIMEOUT, **kwargs: Any) -> Any:
        """``call`` for an async caller: the ledger's commits run in a worker thread, and
        ``fn`` (a coroutine function or a plain one) runs on the caller's event loop."""
        loop = asyncio.get_running_loop()

        def bridge(*a: Any, **kw: Any) -> Any:
            out = fn(*a, **kw)
            if isinstance(out, Awaitable):
                return asyncio.run_coroutine_threadsafe(_awaited(out), loop).result()
            return out

        return await asyncio.to_thread(self.call, call_id, name, bridge, *args,
                                       reconcile=reconcile, timeout=timeout, **kwargs)

    def outcomes(self, call_ids: Sequence[str]) -> dict[str, tuple[str, Any]]:
        """Where each call id stands, from one fresh read of the ledger: ``("none", None)``
        never issued, ``("running", None)`` issued by a process that may still be calling it,
        ``("completed", result)``, ``("failed", error message)``, ``("in_doubt", None)``
        issued by a process that stopped before recording the outcome."""
        with self._lock:
            run = self._ledger_run(fresh=True)
            out: dict[str, tuple[str, Any]] = {}
            for cid in call_ids:
                eff = run.ledger.effects.get(cid)
                if eff is None:
                    out[cid] = ("none", None)
                elif eff.status == "completed":
                    out[cid] = ("completed", fx.result_of(run, eff))
                elif eff.status == "failed":
                    out[cid] = ("failed", (eff.error or {}).get("message", ""))
                elif fx.held_elsewhere(run, eff):
                    out[cid] = ("running", None)
                else:
                    out[cid] = ("in_doubt", None)
            return out

    def get(self, call_id: str) -> Effect | None:
        """Where ``call_id`` stands in the ledger now (None: never issued)."""
        with self._lock:
            try:
                return self._ledger_run(fresh=True).ledger.effects.get(call_id)
            except NotFound:
                return None

    def unresolved(self) -> list[Effect]:
        """Calls issued whose outcome was never recorded (in doubt, or still running)."""
        with self._lock:
            return [e for e in self._ledger_run(fresh=True).effects() if e.in_doubt]

    def settle(self, call_id: str, *, result: Any = fx.NOT_DONE,
               failed: str | BaseException | None = None) -> Effect:
        """Record by hand how an in-doubt call ended, after checking the outside world."""
        with self._lock:
            return self._ledger_run(fresh=True).settle_effect(call_id, result=result,
                                                              failed=failed)


async def _awaited(aw: Awaitable[Any]) -> Any:
    return await aw


__all__ = ["ItemLog", "ToolEffects", "as_store", "run_id_for"]
