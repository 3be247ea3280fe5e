"""``CkptfsSaver``: the LangGraph checkpointer (package docstring: the layout in the store).

This module holds its construction, commits, ``put``, ``put_writes`` and the thread
operations; its reads (``get_tuple``, ``list``) are ``reads.CheckpointReads``, its run
indexes and lookups ``index.RunLookup``, its async twins ``aio.AsyncTwins``."""

from __future__ import annotations

import builtins
import os
import json
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from ckptfs.errors import ConflictError
from ckptfs.format.digest import Digest
from ckptfs.format.ledger import Effect
from ckptfs.format.models import Entry, Manifest
from ckptfs.format.names import LABEL_KEY
from ckptfs.format.typed import FEATURE as TYPED_FEATURE
from ckptfs.integrations.langgraph import fold, listing, threads
from ckptfs.integrations.langgraph.aio import AsyncTwins, Opened
from ckptfs.integrations.langgraph.index import RunLookup
from ckptfs.integrations.langgraph.reads import CheckpointReads
from ckptfs.integrations.langgraph.layout import (
    CHAIN,
    L_CID,
    L_KIND,
    L_MAX_CID,
    L_NS,
    L_PARENT,
    L_THREAD,
    MAX_ID,
    SCHEMA,
    chain_labels,
    _config,
    _Chunks,
    _ids,
    _RunIndex,
)
from ckptfs.integrations.langgraph.channels import channel_entries
from ckptfs.integrations.langgraph.values import Packer
from ckptfs.runtime.codecs import Codecs
from ckptfs.runtime.codecs_classes import kind_of
from ckptfs.runtime.run import Run
from ckptfs.runtime.store import Store, open_store
from ckptfs.store.entries import EntryWriter
from ckptfs.store.repository import Snapshot, now_ms


class CkptfsSaver(AsyncTwins, CheckpointReads, RunLookup, BaseCheckpointSaver[int]):
    """LangGraph ``BaseCheckpointSaver`` over a ckptfs store (a URL, a path or a ``Store``).

    Thread-safe: calls for one thread id are serialised by a lock; different threads proceed in
    parallel. Async methods run the sync ones in worker threads (``alist`` item by item).
    """

    def __init__(self, store: Store | str | os.PathLike[str], *,
                 serde: SerializerProtocol | None = None,
                 allowed_types: Iterable[type | tuple[str, ...]] = (),
                 codecs: Codecs | None = None, appends: bool | str = True,
                 fold_writes: bool = True, fold_delay: float | None = None,
                 fold_wait: float = fold.FOLD_WAIT, **storage_options: Any) -> None:
        """``store``: a ckptfs Store, or a URL or path (``str`` or ``pathlib.Path``) to open
        (with ``storage_options`` and ``codecs``, the ckptfs.Codecs of the types values may
        hold). ``allowed_types``:
        classes to restore as themselves: each dataclass, attrs class, pydantic model or Enum
        is registered on the store's codecs under ``module.QualName`` (stored as a ckptfs
        typed value), and every entry also goes to the serializer's msgpack allow-list.
        ``appends``: a list channel that visibly grew (the same items, their fields equal to
        the copies taken when they were packed) packs and encodes only its new items
        (``appends.py``); False packs every item of a changed channel every step.
        ``appends="identity"``: a list that holds the very same items plus new ones is taken
        as grown without looking at the items' fields: O(new items) a step instead of one
        C-level comparison of all items' fields, but a change made in place to a committed
        item is not seen (as with LangGraph's DeltaChannel, which stores each step's writes
        only).
        ``fold_writes``: a task's ordinary writes that
        reach the saver before their checkpoint (LangGraph's async durability) wait for its
        ``put`` and go into its record; all others are durable when ``put_writes`` returns
        (``fold.py``); so do the writes of the newest committed checkpoint, for the ``put``
        of its child that LangGraph makes next, while ``put_writes`` waits up to
        ``fold_wait`` seconds for it (0: never; they are durable when it returns either way).
        False commits every ``put_writes`` as a snapshot of its own at once.
        ``fold_delay``: ignored, deprecated (a ``DeprecationWarning``): nothing is held on a
        clock since issue 30 (a committed checkpoint's writes commit in ``put_writes``)."""
        if fold_delay is not None:
            warnings.warn("CkptfsSaver(fold_delay=...) is ignored: nothing is held on a clock "
                          "(a committed checkpoint's writes are durable when put_writes "
                          "returns); drop the argument", DeprecationWarning, stacklevel=2)
        if serde is None:
            serde = JsonPlusSerializer(pickle_fallback=False, allowed_msgpack_modules=None)
        if getattr(serde, "pickle_fallback", False):
            raise ValueError("CkptfsSaver never stores pickles: pass a serializer with "
                             "pickle_fallback=False and register your types instead")
        allowed = builtins.list(allowed_types)
        if allowed:
            if not isinstance(serde, JsonPlusSerializer):
                raise TypeError("allowed_types needs a JsonPlusSerializer; register types on "
                                "your own serializer instead")
            serde = serde.with_msgpack_allowlist(allowed)
        super().__init__(serde=serde)
        if isinstance(store, os.PathLike):
            store = os.fspath(store)
        if not isinstance(store, (str, Store)):
            raise TypeError(f"CkptfsSaver takes a ckptfs Store, a URL or a path, not "
                            f"{type(store).__name__}")
        if codecs is not None and not isinstance(store, str) and codecs is not store.codecs:
            raise ValueError("CkptfsSaver(store, codecs=...): a Store comes with its codecs; "
                             "pass codecs= to ckptfs.open_store instead")
        self._owns_store = isinstance(store, str)
        self.store = (open_store(store, codecs=codecs, **storage_options)
                      if isinstance(store, str) else store)
        for cls in allowed:
            if isinstance(cls, type) and kind_of(cls) is not None and cls not in (
                    self.store.codecs.registered_types()):
                self.store.codecs.register(cls)
        self._packer = Packer(self.serde, self.store.codecs)
        if appends not in (True, False, "identity"):
            raise ValueError(f"appends={appends!r}: use True, False or 'identity'")
        self._appends = appends
        self._lock = threading.Lock()
        self._thread_locks: dict[str, threading.RLock] = {}
        self._runs: OrderedDict[str, _RunIndex] = OrderedDict()
        self._effect_runs: dict[str, Run] = {}
        self._live: dict[str, str] = {}
        #: run id -> the listing ``_closed`` just took, for the index created next
        self._listed: dict[str, tuple[builtins.list[int], listing.Marks]] = {}
        self._ready = False
        #: writes waiting for the next checkpoint (None: fold_writes=False)
        self._fold = fold.Holder(self._flush_run) if fold_writes else None
        self._fold_wait = fold_wait

    @classmethod
    def from_url(cls, url: str | os.PathLike[str], **kwargs: Any) -> Opened:
        """``with CkptfsSaver.from_url("s3://bucket/agents") as saver:`` or ``async with``
        (as ``AsyncSqliteSaver.from_conn_string`` is used), like the other savers'
        ``from_conn_string``: the store is closed on leaving the block (after held writes
        are committed; in a worker thread for ``async with``)."""
        return Opened(lambda: cls(url, **kwargs))

    from_conn_string = from_url

    # -- values (values.py) ------------------------------------------------------------------
    def _pack(self, value: Any) -> Any:
        return self._packer.pack(value)[0]

    def _unpack(self, data: Any, decoded: bool = False) -> Any:
        return self._packer.unpack(data, decoded=decoded)

    def _encode(self, idx: _RunIndex, name: str, data: Any, labels: dict[str, str],
                chunks: _Chunks, grown: bool = False) -> Entry:
        """Encode one entry with the run's writer for that name (so appends reuse chunks);
        the chunks the commit must write are added to ``chunks``. ``grown``: ``data`` may be
        the list this writer encoded last, grown in place (``appends.pack_list``): only its
        new items are encoded (the writer checks it is that same list, else encodes it all)."""
        writer = idx.writers.get(name)
        if writer is None:
            st = self._writes_to(idx.run_id)
            repo = st.repo
            writer = idx.writers[name] = EntryWriter(repo.objects,
                                                     st._seeded(repo.config.chunker))
        entry = writer.encode_state({name: data}, {name: labels},
                                    changed=(name,) if grown else None)[name]
        chunks.extend(writer.pending)
        return entry

    def _writes_to(self, run_id: str) -> Store:
        """The Store that writes ``run_id``: the saver's own, or on an encrypted store the one
        of the run's key scope (a thread's run gets a scope of its own at its first commit;
        spec/encryption.md 4.2)."""
        from ckptfs.runtime import scopes

        view = scopes.base_view(self.store)
        if view is None:
            return self.store
        scope = view.run_scope(run_id)
        if scope is None:
            scope = view.keyring.new_scope("run")
            view.register_run(run_id, scope)
        return scopes.scope_store(self.store, scope)

    # -- committing --------------------------------------------------------------------------
    def _commit(self, idx: _RunIndex, boundary: str, entries: Mapping[str, Entry],
                labels: dict[str, str], parent: Digest | None,
                chunks: _Chunks | None = None, typed: bool = False) -> Snapshot:
        """Commit at the next sequence number with fresh history labels (``chain_labels``);
        LangGraph's own ids make a retry after a lost race safe. ``typed``: an entry holds
        typed values, so the manifest requires the feature (spec/format.md 18.1)."""
        own = {k: v for k, v in labels.items() if k not in CHAIN}
        for _ in range(1000):
            seq = idx.top + 1
            head = self._head_labels(idx)
            chain = chain_labels(head, own[L_KIND], own.get(L_CID, ""), seq)
            if fold.L_WRITES_OF in own:  # it holds its parent's writes too (fold.py)
                chain = fold.with_writes(chain, head, own[fold.L_WRITES_OF], seq)
            manifest = Manifest(run=idx.run_id, seq=seq, boundary=boundary,
                                created=now_ms(), writer=self.store.writer_name, schema=SCHEMA,
                                entries=entries, parent=parent, labels={**own, **chain},
                                required=(TYPED_FEATURE,) if typed else ())
            try:
                snap = self._writes_to(idx.run_id).repo.commit(manifest, chunks)
            except ConflictError:
                self._sync(idx)
                if idx.top < seq:  # not a lost race: the run was erased or forgotten meanwhile
                    with self._lock:
                        self._live = {b: r for b, r in self._live.items() if r != idx.run_id}
                    raise
                continue
            except BaseException:
                idx.writers.clear()  # they remember chunks this commit may not have written
                idx.lists.clear()
                raise
            idx.added(snap)
            return snap
        raise ConflictError(f"run {idx.run_id!r}: 1000 commits in a row lost to other writers")

    # -- writing -----------------------------------------------------------------------------
    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        """Commit a checkpoint as the next snapshot of its thread's run."""
        tid, ns = _ids(config)
        parent_cid = config["configurable"].get("checkpoint_id")
        meta = get_checkpoint_metadata(config, metadata)
        with self._thread_lock(tid):
            self._ensure_store()
            idx = self._ns_index(tid, ns, refresh=False)
            with idx.lock:
                if fold.DELTA_META in meta:  # LangGraph waits for writes before this put
                    idx.waited_on = True
                # this checkpoint's own writes that came before it go into its record (fold.py)
                held = (self._fold.get(idx.run_id, checkpoint["id"]) if self._fold is not None
                        else None)
                parent = self._fresh(idx, lambda: self._parent(idx, parent_cid))
                # writes held for the parent: in this record when the parent is committed and
                # nothing of this checkpoint's own is held (fold.py); else committed first
                early = (self._fold.get(idx.run_id, parent_cid)
                         if self._fold is not None and parent_cid else None)
                if early is not None and (held is not None or parent is None):
                    fold.commit_held(self, idx, early)
                    early = None
                chunks: _Chunks = []
                entries, typed = channel_entries(self, idx, checkpoint, new_versions, parent,
                                                       chunks)
                doc = {k: v for k, v in checkpoint.items() if k != "channel_values"}
                packed_doc, typed_doc = self._packer.pack(doc)
                packed_meta, typed_meta = self._packer.pack(meta)
                entries["checkpoint"] = self._encode(idx, "checkpoint", packed_doc, {}, chunks)
                entries["metadata"] = self._encode(idx, "metadata", packed_meta, {}, chunks)
                # a channel entry reused from the parent may hold typed values: its feature too
                typed = typed or typed_doc or typed_meta or (
                    parent is not None and TYPED_FEATURE in parent.manifest.required)
                labels = {L_KIND: "checkpoint", L_THREAD: tid, L_NS: ns, L_CID: checkpoint["id"]}
                if parent_cid:
                    labels[L_PARENT] = parent_cid
                for k, v in meta.items():
                    if type(v) in (str, int, float, bool) and LABEL_KEY.match(f"lg.meta.{k}"):
                        labels[f"lg.meta.{k}"] = (v if type(v) is str else json.dumps(v))[:MAX_ID]
                into = held if held is not None else early
                if into is not None:  # its own held writes, or its parent's, go in this record
                    entries["writes"] = self._encode(idx, "writes", into.rows, {}, chunks)
                    labels[fold.L_WRITES_OF] = into.cid
                    typed = typed or into.typed
                snap = self._commit(idx, "step", entries, labels,
                                    parent.digest if parent else None, chunks, typed=typed)
                if into is not None:
                    idx.rows = {snap.digest: into.rows}
                    assert self._fold is not None
                    self._fold.drop(into)
        return _config(config["configurable"]["thread_id"], ns, checkpoint["id"])

    def _parent(self, idx: _RunIndex, parent_cid: str | None) -> Snapshot | None:
        """The snapshot of the parent checkpoint ``put`` names (None: no such checkpoint)."""
        parent = self._checkpoint(idx, parent_cid) if parent_cid else None
        if parent_cid and parent is None and self._catch_up(idx):
            parent = self._checkpoint(idx, parent_cid)
        return parent

    def _writes_of(self, idx: _RunIndex, cid: str
                   ) -> tuple[Snapshot | None, builtins.list[Any], Snapshot | None]:
        """What ``put_writes`` builds on: the snapshot its writes snapshot follows (the
        checkpoint's newest writes, else the checkpoint), the rows so far, the newest writes."""
        return self._writes_base(idx, cid), self._rows(idx, cid), self._writes_snap(idx, cid)

    def _writes_base(self, idx: _RunIndex, cid: str) -> Snapshot | None:
        """The snapshot a new writes snapshot of checkpoint ``cid`` follows: its newest writes,
        else the checkpoint (after catching up with the run when neither is known)."""
        prev = self._writes_snap(idx, cid) or self._checkpoint(idx, cid)
        if prev is None and self._catch_up(idx):
            prev = self._writes_snap(idx, cid) or self._checkpoint(idx, cid)
        return prev

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                   task_id: str, task_path: str = "") -> None:
        """Record a task's writes against a checkpoint: idempotent per (task_id, idx); the
        special channels (error, interrupt, resume, scheduled) overwrite."""
        tid, ns = _ids(config)
        cid = str(config["configurable"]["checkpoint_id"])
        wait_in = self._put_writes(tid, ns, cid, writes, task_id, task_path)
        if wait_in is not None and self._fold is not None:
            # held for the child's put, which LangGraph calls next (fold.py): durable when
            # this returns, in that put's record, or in a record of their own
            if not self._fold.wait_taken(wait_in, cid, self._fold_wait):
                fold.flush_run(self, wait_in, cid)

    def _put_writes(self, tid: str, ns: str, cid: str, writes: Sequence[tuple[str, Any]],
                    task_id: str, task_path: str) -> str | None:
        """``put_writes`` under the locks. Returns the run id when the writes are held for the
        checkpoint's child, whose ``put`` LangGraph makes next: the caller waits for it."""
        with self._thread_lock(tid):
            self._ensure_store()
            idx = self._ns_index(tid, ns, refresh=False)
            with idx.lock:
                held = self._fold.get(idx.run_id, cid) if self._fold is not None else None
                prev, old_rows, last = self._fresh(idx, lambda: self._writes_of(idx, cid))
                rows = builtins.list(old_rows)
                where = {(r[0], r[2]): i for i, r in enumerate(rows)}
                # rows carried over keep their typed values
                typed = held.typed if held is not None else (
                    last is not None and TYPED_FEATURE in last.manifest.required)
                for i, (channel, value) in enumerate(writes):
                    widx = WRITES_IDX_MAP.get(channel, i)
                    packed, t = self._packer.pack(value)
                    typed = typed or t
                    row = [task_id, channel, widx, task_path, packed]
                    at = where.get((task_id, widx))
                    if at is None:
                        where[(task_id, widx)] = len(rows)
                        rows.append(row)
                    elif widx < 0:
                        rows[at] = row
                if rows == self._rows(idx, cid):
                    return None
                if self._fold is not None and not any(c in WRITES_IDX_MAP for c, _ in writes):
                    head = self._head_labels(idx)
                    # writes of a checkpoint not committed yet, and newer than every
                    # committed one (its put is still to come), wait for that put, which
                    # commits them in its own record; writes of the newest committed
                    # checkpoint wait (in put_writes, which returns once they are durable)
                    # for its child's put, which commits them in its record (fold.py)
                    ahead = prev is None and (head is None or head.get(L_MAX_CID, "") < cid)
                    child = (prev is not None and head is not None and self._fold_wait > 0
                             and head.get(L_MAX_CID) == cid and not idx.waited_on
                             and not any(c in fold.WAITED_ON for c, _ in writes))
                    if ahead or child:
                        for old in self._fold.hold(idx.run_id, tid, ns, cid, rows, typed):
                            # too many held in this run: the oldest go now
                            fold.commit_held(self, idx, old)
                        return idx.run_id if child else None
                fold.commit_writes(self, idx, tid, ns, cid, rows, typed, prev)
                if held is not None:
                    self._fold.drop(held)  # type: ignore[union-attr]
        return None

    def _flush_run(self, run_id: str, cid: str) -> None:
        """The holder's callback (held weakly): ``fold.flush_run``."""
        fold.flush_run(self, run_id, cid)

    def flush(self) -> None:
        """Commit every held write now (``fold_writes``): ``close()`` does it too."""
        if self._fold is not None:
            self._fold.flush_all()

    # -- deleting and copying (threads.py) ---------------------------------------------------
    def delete_thread(self, thread_id: str) -> None:
        """Erase a thread now, in every namespace, with its effect ledger: ckptfs ``erase``
        (fence, tombstone, records, then every chunk and manifest no other run uses). The
        thread id stays usable: its next checkpoint starts a new run (docs/guides/langgraph.md)."""
        self.flush()
        threads.delete_thread(self, thread_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Forget the checkpoints (and their writes) whose metadata ``run_id`` is listed, with
        ckptfs ``forget`` semantics; see ``threads.delete_for_runs``."""
        self.flush()
        threads.delete_for_runs(self, run_ids)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: per namespace keep the newest checkpoint and its writes, forgetting
        the rest; ``delete``: erase the threads as ``delete_thread`` does."""
        self.flush()
        threads.prune(self, thread_ids, strategy=strategy)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every snapshot of a thread to another: new manifests naming the same entries."""
        self.flush()
        threads.copy_thread(self, source_thread_id, target_thread_id)

    def effect(self, config: RunnableConfig, name: str, fn: Callable[..., Any], *args: Any,
               key: str, reconcile: Callable[[Effect], Any] | None = None, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` at most once per ``key`` for the config's thread, through
        ckptfs's effect ledger (``Run.effect``) in run ``effects_run_id(thread)``."""
        return threads.effect(self, config, name, fn, *args, key=key, reconcile=reconcile,
                              **kwargs)

    def close(self) -> None:
        """Commit held writes (``fold_writes``), then close the store if this saver opened
        it."""
        try:
            if self._fold is not None:
                self._fold.close()
        finally:
            if self._owns_store:
                self.store.close()
