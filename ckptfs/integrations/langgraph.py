"""A LangGraph checkpointer that keeps threads as ckptfs runs and checkpoints as snapshots.

Layout in the store (README, section "LangGraph"):

* each (thread id, checkpoint namespace) is the run ``lg-<32 hex>-<16 hex>`` (BLAKE3 of the
  thread id, then of the namespace), since both may hold any character; labels
  ``lg.thread_id`` and ``lg.checkpoint_ns`` on every snapshot keep the real ids;
* each checkpoint is a snapshot at boundary ``step`` whose parent is the parent checkpoint's
  snapshot: entry ``checkpoint`` (the checkpoint without its channel values), entry
  ``metadata``, and one entry per channel value under ``channels/`` (labels ``lg.channel``,
  ``lg.version``). A channel LangGraph did not bump reuses the parent's entry as it is, and a
  list value (a message history) is a top-level list, which ckptfs stores as an append-friendly
  CBOR sequence, so a step costs about what it added. Labels ``lg.checkpoint_id``,
  ``lg.parent_checkpoint_id`` and ``lg.meta.<key>`` (scalar metadata, as text) name it;
* the pending writes of a checkpoint are snapshots at boundary ``writes`` (label ``lg.kind``
  ``writes``): each holds all writes so far in entry ``writes``, rows ``[task_id, channel,
  idx, task_path, value]``; its parent is the previous writes snapshot or the checkpoint.
* ``CkptfsSaver.effect`` keeps a thread's side effects in ckptfs's effect ledger, in the
  separate run ``lgfx-<32 hex>`` (the same thread hash).

Values that are not plain data go through LangGraph's serializer (strict msgpack allow-list,
no pickle) and are kept as ``{"__lg__": type, "data": bytes}`` maps; a stored ``pickle`` type
is refused on read whatever serializer is configured.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import re
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, cast

import attrs

try:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        WRITES_IDX_MAP,
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        get_checkpoint_id,
        get_checkpoint_metadata,
        writes_sort_key,
    )
    from langgraph.checkpoint.serde.base import SerializerProtocol
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("ckptfs.integrations.langgraph needs LangGraph: "
                      "pip install 'ckptfs[langgraph]'") from e

from ckptfs.errors import ConflictError, CorruptSnapshot, NotFound
from ckptfs.format.cbor import check_plain
from ckptfs.format.digest import Digest, hasher
from ckptfs.format.ledger import Effect
from ckptfs.format.models import Captured, Entry, Manifest, Schema
from ckptfs.format.names import ENTRY_SEGMENT, LABEL_KEY, record_path
from ckptfs.runtime.run import Run
from ckptfs.runtime.store import Store, open_store
from ckptfs.store.entries import EntryWriter, decode_value, read_content
from ckptfs.store.repository import Snapshot, now_ms

SCHEMA = Schema("langgraph", 1)
RUN_PREFIX = "lg-"
EFFECTS_PREFIX = "lgfx-"
TAG = "__lg__"
L_KIND = "lg.kind"
L_THREAD = "lg.thread_id"
L_NS = "lg.checkpoint_ns"
L_CID = "lg.checkpoint_id"
L_PARENT = "lg.parent_checkpoint_id"
L_CHANNEL = "lg.channel"
L_VERSION = "lg.version"
L_COPIED = "lg.copied_from"
MAX_ID = 1024  # label values are at most 1024 characters
#: runs whose entry writers (the previous content of each channel, for append dedup) are kept
WARM_RUNS = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_Chunks = builtins.list[tuple[Digest, bytes | memoryview]]


def _h(domain: str, text: str) -> str:
    h = hasher()
    h.update(domain.encode() + b"\0" + text.encode("utf-8", "surrogatepass"))
    return str(h.hexdigest())


def thread_prefix(thread_id: str) -> str:
    """The run id prefix shared by every namespace of a thread."""
    return f"{RUN_PREFIX}{_h('thread', thread_id)[:32]}-"


def run_id_for(thread_id: str, checkpoint_ns: str) -> str:
    """The ckptfs run holding (thread id, namespace): safe for any characters in either."""
    return thread_prefix(thread_id) + _h("ns", checkpoint_ns)[:16]


def effects_run_id(thread_id: str) -> str:
    """The run holding a thread's effect ledger (``CkptfsSaver.effect``), beside its checkpoints."""
    return f"{EFFECTS_PREFIX}{_h('thread', str(thread_id))[:32]}"


def channel_entry(channel: str) -> str:
    """The entry name of a channel value: the name itself when it is a valid entry segment,
    else a readable form plus a hash (the real name is the entry's ``lg.channel`` label)."""
    if ENTRY_SEGMENT.match(channel) and channel not in (".", ".."):
        return f"channels/{channel}"
    safe = _UNSAFE.sub("-", channel)[:96].lstrip(".-") or "c"
    return f"channels/{safe}.{_h('channel', channel)[:16]}"


def _ids(config: RunnableConfig) -> tuple[str, str]:
    conf = config.get("configurable") or {}
    if conf.get("thread_id") is None:
        raise ValueError("config['configurable']['thread_id'] is required by CkptfsSaver")
    tid, ns = str(conf["thread_id"]), str(conf.get("checkpoint_ns") or "")
    for what, v in (("thread_id", tid), ("checkpoint_ns", ns)):
        if len(v) > MAX_ID:
            raise ValueError(f"{what} is {len(v)} characters; CkptfsSaver keeps ids as ckptfs "
                             f"labels, which hold at most {MAX_ID}: use a shorter id")
    return tid, ns


def _config(thread_id: Any, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns,
                             "checkpoint_id": checkpoint_id}}


@attrs.define
class _RunIndex:
    """What a saver knows of one run: its snapshots by sequence number and checkpoint id."""

    run_id: str
    thread_id: str | None
    ns: str | None
    top: int = 0  # highest sequence number seen, so a deleted one is not reused here
    by_seq: dict[int, Snapshot] = attrs.field(factory=dict)
    checkpoints: dict[str, Snapshot] = attrs.field(factory=dict)
    writes: dict[str, builtins.list[Snapshot]] = attrs.field(factory=dict)
    writers: dict[str, EntryWriter] = attrs.field(factory=dict)
    rows: dict[Digest, builtins.list[Any]] = attrs.field(factory=dict)
    meta: dict[Digest, Any] = attrs.field(factory=dict)
    #: guards the maps above; held briefly, after (never while taking) a thread lock
    lock: threading.RLock = attrs.field(factory=threading.RLock)

    def add(self, snap: Snapshot) -> None:
        known = self.by_seq.get(snap.seq)
        if known is not None and known.digest == snap.digest:
            return
        labels = snap.manifest.labels
        tid, ns = labels.get(L_THREAD), labels.get(L_NS)
        if self.thread_id is None or self.ns is None:
            self.thread_id, self.ns = tid, ns
        if (tid, ns) != (self.thread_id, self.ns) or tid is None:
            raise CorruptSnapshot(
                f"run {self.run_id!r} seq {snap.seq} is labelled thread {tid!r} namespace {ns!r}, "
                f"not {self.thread_id!r} {self.ns!r}: it was not written by CkptfsSaver; keep "
                f"runs named {RUN_PREFIX}* for LangGraph threads only")
        self.by_seq[snap.seq] = snap
        self.top = max(self.top, snap.seq)
        cid = labels.get(L_CID, "")
        if labels.get(L_KIND) == "writes":
            self.writes.setdefault(cid, []).append(snap)
            self.writes[cid].sort(key=lambda s: s.seq)
        elif labels.get(L_KIND) == "checkpoint":
            old = self.checkpoints.get(cid)
            if old is None or old.seq < snap.seq:
                self.checkpoints[cid] = snap

    def drop(self, seqs: Iterable[int]) -> None:
        gone = {s for s in seqs if s in self.by_seq}
        for s in gone:
            del self.by_seq[s]
        self.checkpoints = {c: s for c, s in self.checkpoints.items() if s.seq not in gone}
        self.writes = {c: kept for c, w in self.writes.items()
                       if (kept := [s for s in w if s.seq not in gone])}


class CkptfsSaver(BaseCheckpointSaver[int]):
    """LangGraph ``BaseCheckpointSaver`` over a ckptfs store (a URL, a path or a ``Store``).

    Thread-safe: calls for one thread id are serialised by a lock; different threads proceed in
    parallel. Async methods run the sync ones in a worker thread.
    """

    def __init__(self, store: Store | str, *, serde: SerializerProtocol | None = None,
                 allowed_types: Iterable[type | tuple[str, ...]] = (),
                 **storage_options: Any) -> None:
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
        self._owns_store = isinstance(store, str)
        self.store = open_store(store, **storage_options) if isinstance(store, str) else store
        self._lock = threading.Lock()
        self._thread_locks: dict[str, threading.RLock] = {}
        self._runs: OrderedDict[str, _RunIndex] = OrderedDict()
        self._effect_runs: dict[str, Run] = {}
        self._ready = False

    # -- bookkeeping -------------------------------------------------------------------------
    def _thread_lock(self, thread_id: str) -> threading.RLock:
        with self._lock:
            lock = self._thread_locks.get(thread_id)
            if lock is None:
                lock = self._thread_locks[thread_id] = threading.RLock()
            return lock

    def _index(self, run_id: str, thread_id: str | None, ns: str | None, *,
               refresh: bool = True) -> _RunIndex:
        with self._lock:
            idx = self._runs.get(run_id)
            if idx is None:
                idx = self._runs[run_id] = _RunIndex(run_id, thread_id, ns)
                refresh = True
            self._runs.move_to_end(run_id)
            for cold in builtins.list(self._runs.values())[:-WARM_RUNS]:
                cold.writers.clear()
        if refresh:
            self._refresh(idx)
        return idx

    def _refresh(self, idx: _RunIndex) -> None:
        """Bring the index up to date with the store (another saver may have written)."""
        repo = self.store.repo
        with idx.lock:
            seqs = set(repo.seqs(idx.run_id))
            idx.drop([s for s in idx.by_seq if s not in seqs])
            for s in sorted(seqs - idx.by_seq.keys()):
                idx.add(repo.snapshot_at(idx.run_id, s))

    def _run_ids(self, prefix: str) -> builtins.list[str]:
        return [r for r in self.store.repo.run_ids() if r.startswith(prefix)]

    def _thread_indexes(self, thread_id: str) -> builtins.list[_RunIndex]:
        """Every non-empty run (one per namespace) of a thread, refreshed."""
        out = []
        for rid in self._run_ids(thread_prefix(thread_id)):
            idx = self._index(rid, thread_id, None)
            if idx.by_seq:
                out.append(idx)
        return out

    def _ensure_store(self) -> None:
        if not self._ready:
            self.store.init()
            self._ready = True

    # -- values ------------------------------------------------------------------------------
    def _pack(self, value: Any) -> Any:
        """Plain data as it is; anything else through the serializer, never as a pickle."""
        if not (type(value) is dict and TAG in value):
            try:
                check_plain(value)
                return value
            except TypeError:
                pass
        typ, data = self.serde.dumps_typed(value)
        if typ == "pickle":
            raise TypeError(f"CkptfsSaver refuses to pickle a {type(value).__qualname__}; "
                            "make it msgpack-serialisable (dataclass, pydantic model, ...) "
                            "and list it in allowed_types")
        return {TAG: typ, "data": data}

    def _unpack(self, data: Any) -> Any:
        if type(data) is dict and TAG in data:
            typ, payload = data[TAG], data.get("data")
            if typ == "pickle" or not isinstance(typ, str) or not isinstance(payload, bytes):
                raise CorruptSnapshot(f"refusing to load a value stored as {typ!r}: ckptfs never "
                                      "loads pickles or malformed serializer output")
            return self.serde.loads_typed((typ, payload))
        return data

    def _pack_channel(self, value: Any) -> Any:
        return [self._pack(x) for x in value] if type(value) is list else self._pack(value)

    def _unpack_channel(self, data: Any) -> Any:
        return [self._unpack(x) for x in data] if type(data) is list else self._unpack(data)

    def _encode(self, idx: _RunIndex, name: str, data: Any, labels: dict[str, str],
                chunks: _Chunks) -> Entry:
        """Encode one entry with the run's writer for that name (so appends reuse chunks);
        the chunks the commit must write are added to ``chunks``."""
        writer = idx.writers.get(name)
        if writer is None:
            repo = self.store.repo
            writer = idx.writers[name] = EntryWriter(repo.objects, repo.config.chunker)
        entry = writer.encode_state({name: data}, {name: labels})[name]
        chunks.extend(writer.pending)
        return entry

    def _entry_value(self, snap: Snapshot, name: str) -> Any:
        entry = snap.manifest.entries[name]
        assert isinstance(entry, Captured)
        where = f"snapshot {snap.digest.short} (run {snap.run!r} seq {snap.seq}) entry {name!r}"
        return decode_value(entry, read_content(self.store.repo.objects, entry, where=where),
                            where=where)

    def _metadata(self, idx: _RunIndex, snap: Snapshot) -> Any:
        if snap.digest not in idx.meta:
            idx.meta[snap.digest] = self._unpack(self._entry_value(snap, "metadata"))
        return idx.meta[snap.digest]

    def _rows(self, idx: _RunIndex, checkpoint_id: str) -> builtins.list[Any]:
        snaps = idx.writes.get(checkpoint_id)
        if not snaps:
            return []
        last = snaps[-1]
        if last.digest not in idx.rows:
            idx.rows = {last.digest: self._entry_value(last, "writes")}
        return idx.rows[last.digest]

    # -- committing --------------------------------------------------------------------------
    def _commit(self, idx: _RunIndex, boundary: str, entries: Mapping[str, Entry],
                labels: dict[str, str], parent: Digest | None,
                chunks: _Chunks | None = None) -> Snapshot:
        """Commit at the next free sequence number; LangGraph's own ids make a retry safe."""
        for _ in range(1000):
            manifest = Manifest(run=idx.run_id, seq=idx.top + 1, boundary=boundary,
                                created=now_ms(), writer=self.store.writer_name, schema=SCHEMA,
                                entries=entries, parent=parent, labels=labels)
            try:
                snap = self.store.repo.commit(manifest, chunks)
            except ConflictError:
                self._refresh(idx)
                idx.top = max(idx.top, manifest.seq)
                continue
            except BaseException:
                idx.writers.clear()  # they remember chunks this commit may not have written
                raise
            with idx.lock:
                idx.add(snap)
            return snap
        raise ConflictError(f"run {idx.run_id!r}: 1000 commits in a row lost to other writers")

    def _forget(self, idx: _RunIndex, seqs: Iterable[int]) -> None:
        """Delete run records, newest first (what remains is a prefix of history).

        The snapshots' chunks stay until garbage collection removes what no record reaches.
        """
        with idx.lock:
            doomed = sorted(set(seqs), reverse=True)
            for s in doomed:
                self.store.storage.delete(record_path(idx.run_id, s))
            idx.drop(doomed)

    # -- reading -----------------------------------------------------------------------------
    def _tuple(self, idx: _RunIndex, snap: Snapshot, thread_id: Any) -> CheckpointTuple:
        state = self.store.read(snap)
        ns = idx.ns or ""
        values = {}
        for name, entry in snap.manifest.entries.items():
            channel = entry.labels.get(L_CHANNEL)
            if name.startswith("channels/") and channel is not None:
                values[channel] = self._unpack_channel(state[name])
        doc = self._unpack(state["checkpoint"])
        checkpoint = cast(Checkpoint, {**doc, "channel_values": values})
        cid = checkpoint["id"]
        parent = snap.manifest.labels.get(L_PARENT)
        rows = sorted(self._rows(idx, cid), key=lambda r: writes_sort_key(r[3], r[0], r[2]))
        return CheckpointTuple(
            config=_config(thread_id, ns, cid), checkpoint=checkpoint,
            metadata=self._unpack(state["metadata"]),
            parent_config=_config(thread_id, ns, parent) if parent else None,
            pending_writes=[(r[0], r[1], self._unpack(r[4])) for r in rows])

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names, or the thread's latest in its namespace; else None."""
        tid, ns = _ids(config)
        cid = get_checkpoint_id(config)
        with self._thread_lock(tid):
            idx = self._index(run_id_for(tid, ns), tid, ns)
            with idx.lock:
                if cid is None and idx.checkpoints:
                    cid = max(idx.checkpoints)
                snap = idx.checkpoints.get(cid) if cid else None
                if snap is None:
                    return None
                return self._tuple(idx, snap, config["configurable"]["thread_id"])

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None
             ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first: of a thread (and namespace, when the config names one),
        or of every thread for ``None``; ``filter`` matches metadata keys exactly."""
        conf = (config or {}).get("configurable") or {}
        if conf.get("thread_id") is not None:
            tid, ns = _ids(config or {})
            if "checkpoint_ns" in conf:
                indexes = [self._index(run_id_for(tid, ns), tid, ns)]
            else:
                indexes = self._thread_indexes(tid)
        else:
            indexes = [self._index(r, None, None) for r in self._run_ids(RUN_PREFIX)]
        only = get_checkpoint_id(config) if config else None
        before_id = get_checkpoint_id(before) if before else None
        found: builtins.list[tuple[str, _RunIndex, Snapshot]] = []
        for idx in indexes:
            with idx.lock:
                for cid, snap in idx.checkpoints.items():
                    if (only and cid != only) or (before_id and not cid < before_id):
                        continue
                    if filter:
                        meta = self._metadata(idx, snap)
                        if not all(meta.get(k) == v for k, v in filter.items()):
                            continue
                    found.append((cid, idx, snap))
        found.sort(key=lambda f: f[0], reverse=True)
        for cid, idx, snap in found[:limit] if limit is not None else found:
            with idx.lock:
                tup = self._tuple(idx, snap, conf.get("thread_id", idx.thread_id))
            yield tup

    # -- writing -----------------------------------------------------------------------------
    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        """Commit a checkpoint as the next snapshot of its thread's run."""
        tid, ns = _ids(config)
        parent_cid = config["configurable"].get("checkpoint_id")
        meta = get_checkpoint_metadata(config, metadata)
        with self._thread_lock(tid):
            self._ensure_store()
            idx = self._index(run_id_for(tid, ns), tid, ns, refresh=False)
            with idx.lock:
                parent = idx.checkpoints.get(parent_cid) if parent_cid else None
                if parent_cid and parent is None:
                    self._refresh(idx)
                    parent = idx.checkpoints.get(parent_cid)
                chunks: _Chunks = []
                entries = self._channel_entries(idx, checkpoint, new_versions, parent, chunks)
                doc = {k: v for k, v in checkpoint.items() if k != "channel_values"}
                entries["checkpoint"] = self._encode(idx, "checkpoint", self._pack(doc), {},
                                                     chunks)
                entries["metadata"] = self._encode(idx, "metadata", self._pack(meta), {}, chunks)
                labels = {L_KIND: "checkpoint", L_THREAD: tid, L_NS: ns, L_CID: checkpoint["id"]}
                if parent_cid:
                    labels[L_PARENT] = parent_cid
                for k, v in meta.items():
                    if type(v) in (str, int, float, bool) and LABEL_KEY.match(f"lg.meta.{k}"):
                        labels[f"lg.meta.{k}"] = (v if type(v) is str else json.dumps(v))[:MAX_ID]
                self._commit(idx, "step", entries, labels, parent.digest if parent else None,
                             chunks)
        return _config(config["configurable"]["thread_id"], ns, checkpoint["id"])

    def _channel_entries(self, idx: _RunIndex, checkpoint: Checkpoint,
                         new_versions: ChannelVersions, parent: Snapshot | None,
                         chunks: _Chunks) -> dict[str, Entry]:
        """One entry per channel value; a channel not bumped since the parent reuses its entry."""
        values, versions = checkpoint["channel_values"], checkpoint["channel_versions"]
        old_entries = parent.manifest.entries if parent else {}
        entries: dict[str, Entry] = {}
        for ch in dict.fromkeys([*values, *versions]):
            name = channel_entry(ch)
            if name in entries:
                raise ValueError(f"channels {ch!r} and another map to entry {name!r}; rename one")
            version = json.dumps(versions.get(ch))
            old = old_entries.get(name)
            if (ch in versions and ch not in new_versions and isinstance(old, Captured)
                    and old.labels.get(L_CHANNEL) == ch and old.labels.get(L_VERSION) == version):
                entries[name] = old
            elif ch in values:
                entries[name] = self._encode(idx, name, self._pack_channel(values[ch]),
                                             {L_CHANNEL: ch, L_VERSION: version}, chunks)
        return entries

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                   task_id: str, task_path: str = "") -> None:
        """Record a task's writes against a checkpoint: idempotent per (task_id, idx); the
        special channels (error, interrupt, resume, scheduled) overwrite."""
        tid, ns = _ids(config)
        cid = str(config["configurable"]["checkpoint_id"])
        with self._thread_lock(tid):
            self._ensure_store()
            idx = self._index(run_id_for(tid, ns), tid, ns, refresh=False)
            with idx.lock:
                if cid not in idx.checkpoints and cid not in idx.writes:
                    self._refresh(idx)
                rows = builtins.list(self._rows(idx, cid))
                where = {(r[0], r[2]): i for i, r in enumerate(rows)}
                for i, (channel, value) in enumerate(writes):
                    widx = WRITES_IDX_MAP.get(channel, i)
                    row = [task_id, channel, widx, task_path, self._pack(value)]
                    at = where.get((task_id, widx))
                    if at is None:
                        where[(task_id, widx)] = len(rows)
                        rows.append(row)
                    elif widx < 0:
                        rows[at] = row
                if rows == self._rows(idx, cid):
                    return
                older = idx.writes.get(cid)
                prev = older[-1] if older else idx.checkpoints.get(cid)
                chunks: _Chunks = []
                entries = {"writes": self._encode(idx, "writes", rows, {}, chunks)}
                labels = {L_KIND: "writes", L_THREAD: tid, L_NS: ns, L_CID: cid}
                snap = self._commit(idx, "writes", entries, labels, prev.digest if prev else None,
                                    chunks)
                idx.rows = {snap.digest: rows}

    # -- deleting and copying ------------------------------------------------------------------
    def delete_thread(self, thread_id: str) -> None:
        """Forget every checkpoint and write of a thread, in every namespace, and its effect
        ledger."""
        tid = str(thread_id)
        with self._thread_lock(tid):
            for idx in self._thread_indexes(tid):
                self._forget(idx, idx.by_seq)
        with self._thread_lock(f"\0effects\0{tid}"):
            fx = effects_run_id(tid)
            for seq in reversed(self.store.repo.seqs(fx)):
                self.store.storage.delete(record_path(fx, seq))
            self._effect_runs.pop(tid, None)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Forget the checkpoints (and their writes) whose metadata ``run_id`` is listed."""
        targets = set(run_ids)
        if not targets:
            return
        for rid in self._run_ids(RUN_PREFIX):
            idx = self._index(rid, None, None)
            with idx.lock:
                doomed: builtins.list[int] = []
                for cid, snap in idx.checkpoints.items():
                    if self._metadata(idx, snap).get("run_id") in targets:
                        doomed += [snap.seq, *(w.seq for w in idx.writes.get(cid, []))]
                self._forget(idx, doomed)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: per namespace keep the newest checkpoint and its writes;
        ``delete``: forget the threads entirely."""
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}: use 'keep_latest' or 'delete'")
        for thread_id in thread_ids:
            tid = str(thread_id)
            with self._thread_lock(tid):
                for idx in self._thread_indexes(tid):
                    keep: set[int] = set()
                    if strategy == "keep_latest" and idx.checkpoints:
                        latest = max(idx.checkpoints)
                        keep = {idx.checkpoints[latest].seq,
                                *(w.seq for w in idx.writes.get(latest, [])[-1:])}
                    self._forget(idx, [s for s in idx.by_seq if s not in keep])

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every snapshot of a thread to another: new manifests naming the same entries,
        so no value is copied; checkpoint ids, metadata, parents and writes are kept."""
        src, dst = str(source_thread_id), str(target_thread_id)
        if src == dst:
            return
        first, second = sorted((src, dst))
        with self._thread_lock(first), self._thread_lock(second):
            self._ensure_store()
            for idx in self._thread_indexes(src):
                assert idx.ns is not None
                target = self._index(run_id_for(dst, idx.ns), dst, idx.ns)
                copied: dict[Digest, Digest] = {}
                for seq in sorted(idx.by_seq):
                    snap = idx.by_seq[seq]
                    m = snap.manifest
                    labels = {**m.labels, L_THREAD: dst, L_COPIED: snap.id}
                    new = self._commit(target, m.boundary, m.entries, labels,
                                       copied.get(m.parent) if m.parent else None)
                    copied[snap.digest] = new.digest

    # -- side effects ----------------------------------------------------------------------------
    def effect(self, config: RunnableConfig, name: str, fn: Callable[..., Any], *args: Any,
               key: str, reconcile: Callable[[Effect], Any] | None = None, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` at most once per ``key`` for the config's thread, through
        ckptfs's effect ledger (``Run.effect``) in run ``effects_run_id(thread)``: the intent is
        committed before the call and the result after, so a tool node re-run after a crash or
        a resume gets the recorded result instead of acting twice."""
        tid, _ = _ids(config)
        with self._thread_lock(f"\0effects\0{tid}"):
            run = self._effect_runs.get(tid)
            if run is None:
                rid = effects_run_id(tid)
                try:
                    run = self.store.resume(rid)
                except NotFound:
                    run = self.store.start_run(rid, schema=("langgraph-effects", 1))
                self._effect_runs[tid] = run
            try:
                return run.effect(name, fn, *args, key=key, reconcile=reconcile, **kwargs)
            except ConflictError:
                del self._effect_runs[tid]  # another process moved the ledger: resume next time
                raise

    # -- async twins -----------------------------------------------------------------------------
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None
                    ) -> AsyncIterator[CheckpointTuple]:
        found = await asyncio.to_thread(
            lambda: builtins.list(self.list(config, filter=filter, before=before, limit=limit)))
        for item in found:
            yield item

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint,
                   metadata: CheckpointMetadata, new_versions: ChannelVersions) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                          task_id: str, task_path: str = "") -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    def close(self) -> None:
        """Close the store if this saver opened it."""
        if self._owns_store:
            self.store.close()


__all__ = ["CkptfsSaver", "channel_entry", "effects_run_id", "run_id_for", "thread_prefix"]
