"""The reading side of CkptfsSaver (its ``CheckpointReads`` base): a checkpoint tuple from a
snapshot, ``get_tuple``, ``list`` (newest first, merged across a thread's runs), and the
entries they read (metadata, pending writes). Kept apart from ``saver`` (construction,
commits, ``put``, ``put_writes``, deletes) to keep modules small; the run indexes and
lookups by history labels it uses are ``index.RunLookup``."""

from __future__ import annotations

import bisect
import builtins
import heapq
from collections.abc import Container, Iterable, Iterator, Mapping, Sequence
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    Checkpoint,
    CheckpointTuple,
    get_checkpoint_id,
    writes_sort_key,
)

from ckptfs.errors import ErasedError, NotFound
from ckptfs.format.models import Captured
from ckptfs.format.typed import FEATURE as TYPED_FEATURE
from ckptfs.integrations.langgraph import fold
from ckptfs.integrations.langgraph.index import RunLookup
from ckptfs.integrations.langgraph.layout import (
    L_CHANNEL,
    L_MAX_CID,
    L_PARENT,
    RUN_PREFIX,
    _cid,
    _config,
    _ids,
    _kind,
    _RunIndex,
)
from ckptfs.integrations.langgraph.values import Packer
from ckptfs.store.entry_reads import decode_value, read_content
from ckptfs.store.repository import Snapshot


class CheckpointReads(RunLookup):
    """The saver's reads (CkptfsSaver provides these attributes and ``_unpack``)."""

    _packer: Packer
    _fold: fold.Holder | None

    def _unpack(self, data: Any, decoded: bool = False) -> Any:
        raise NotImplementedError

    def _entry_value(self, snap: Snapshot, name: str) -> Any:
        entry = snap.manifest.entries[name]
        assert isinstance(entry, Captured)
        where = f"snapshot {snap.digest.short} (run {snap.run!r} seq {snap.seq}) entry {name!r}"
        return decode_value(entry, read_content(self.store.repo.objects, entry, where=where),
                            where=where)

    def _metadata(self, idx: _RunIndex, snap: Snapshot) -> Any:
        if snap.digest in idx.meta:
            return idx.meta[snap.digest]
        return idx.remember_meta(snap.digest, self._unpack(self._entry_value(snap, "metadata")))

    def _rows(self, idx: _RunIndex, checkpoint_id: str, near: int | None = None
              ) -> builtins.list[Any]:
        held = self._fold.get(idx.run_id, checkpoint_id) if self._fold is not None else None
        if held is not None:  # fold.py: not in a snapshot yet
            return held.rows
        last = self._writes_snap(idx, checkpoint_id, near)
        if last is None:
            return []
        if last.digest not in idx.rows:
            idx.rows = {last.digest: self._entry_value(last, "writes")}
        return idx.rows[last.digest]

    def _tuple(self, idx: _RunIndex, snap: Snapshot, thread_id: Any) -> CheckpointTuple:
        # a class this saver was not given (allowed_types) comes back in its stored form, a
        # ckptfs.TypedValue, with a warning naming the argument: listing and inspecting a
        # thread never needs the application's classes
        state = self.store.read(snap, raw_types=True)
        if TYPED_FEATURE in snap.manifest.required:
            self._packer.report_raw(state)
        ns = idx.ns or ""
        values = {}
        for name, entry in snap.manifest.entries.items():
            channel = entry.labels.get(L_CHANNEL)
            if name.startswith("channels/") and channel is not None:
                values[channel] = self._packer.unpack_channel(state[name], decoded=True)
        doc = self._unpack(state["checkpoint"], decoded=True)
        checkpoint = cast(Checkpoint, {**doc, "channel_values": values})
        cid = checkpoint["id"]
        parent = snap.manifest.labels.get(L_PARENT)
        return CheckpointTuple(
            config=_config(thread_id, ns, cid), checkpoint=checkpoint,
            metadata=self._unpack(state["metadata"], decoded=True),
            parent_config=_config(thread_id, ns, parent) if parent else None,
            pending_writes=self._pending(idx, cid, snap.seq))

    def _pending(self, idx: _RunIndex, cid: str, seq: int,
                 channels: Container[str] | None = None) -> builtins.list[Any]:
        """The writes of checkpoint ``cid`` (its snapshot at ``seq``) as LangGraph's pending
        writes, in its order (``writes_sort_key``), each value unpacked; with ``channels``,
        only the writes to those."""
        rows = sorted(self._rows(idx, cid, seq), key=lambda r: writes_sort_key(r[3], r[0], r[2]))
        return [(r[0], r[1], self._unpack(r[4])) for r in rows
                if channels is None or r[1] in channels]

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names, or the thread's latest in its namespace; else None.
        Reads a few snapshots near the head (or O(log n) for an old id), not the history."""
        tid, ns = _ids(config)
        cid = get_checkpoint_id(config)
        self._prepare_store()
        with self._thread_lock(tid):
            idx = self._ns_index(tid, ns)

            def find() -> CheckpointTuple | None:
                snap = self._checkpoint(idx, cid) if cid else self._latest(idx)
                if snap is None:
                    return None
                return self._tuple(idx, snap, config["configurable"]["thread_id"])

            with idx.lock:
                return self._fresh(idx, find)

    def get_delta_channel_history(self, *, config: RunnableConfig, channels: Sequence[str]
                                  ) -> Mapping[str, Any]:
        """What LangGraph's default returns (each ``DeltaChannel``'s writes along the parent
        chain of the checkpoint ``config`` names, oldest first, and the nearest ancestor's
        stored value as its seed), read in one walk down the run: the run is refreshed once,
        and each parent is looked for just below its child (a parent is committed before its
        child) instead of by a new lookup. The default calls ``get_tuple`` per ancestor, each
        a refresh of the run and a binary search: at N = 250 a fresh ``get_state`` made 53
        such calls, 219 reads, 55 listings and 52 existence checks."""
        if not channels:
            return {}
        tid, ns = _ids(config)
        cid = get_checkpoint_id(config)
        self._prepare_store()
        with self._thread_lock(tid):
            idx = self._ns_index(tid, ns)
            with idx.lock:
                return self._fresh(idx, lambda: self._delta_history(
                    idx, cid, channels, config["configurable"]["thread_id"]))

    def _delta_history(self, idx: _RunIndex, cid: str | None, channels: Sequence[str],
                       thread_id: Any) -> dict[str, Any]:
        writes: dict[str, builtins.list[Any]] = {c: [] for c in channels}
        seeds: dict[str, Any] = {}
        remaining = set(channels)
        snap = self._checkpoint(idx, cid) if cid else self._latest(idx)
        parent = snap.manifest.labels.get(L_PARENT) if snap is not None else None
        while snap is not None and parent and remaining:
            below = bisect.bisect_left(idx.seqs, snap.seq) - 1
            snap = self._checkpoint(idx, parent, max(below, 0))
            if snap is None:
                break
            stored = {e.labels.get(L_CHANNEL) for e in snap.manifest.entries.values()}
            if remaining & stored:  # a seed: the whole tuple, as get_tuple gives it
                tup = self._tuple(idx, snap, thread_id)
                values, pending = tup.checkpoint["channel_values"], tup.pending_writes or []
            else:  # only this checkpoint's writes to the channels asked for
                values, pending = {}, self._pending(idx, _cid(snap), snap.seq, remaining)
            for write in reversed(pending):
                if write[1] in remaining:
                    writes[write[1]].append(write)
            for ch in builtins.list(remaining):
                if ch in values:
                    seeds[ch] = values[ch]
                    remaining.discard(ch)
            parent = snap.manifest.labels.get(L_PARENT)
        out: dict[str, Any] = {}
        for ch in channels:
            out[ch] = {"writes": builtins.list(reversed(writes[ch]))}
            if ch in seeds:
                out[ch]["seed"] = seeds[ch]
        return out

    def _newest_first(self, idx: _RunIndex, before_id: str | None
                      ) -> Iterator[tuple[str, _RunIndex, Snapshot]]:
        """The run's checkpoints by descending id, those below ``before_id`` only; lazily
        from the head in an ordered run."""
        with idx.lock:
            if self._ordered(idx):
                hi = len(idx.seqs)
                if before_id:
                    hi = self._bisect(idx, L_MAX_CID, lambda top: top >= before_id)
                seqs = idx.seqs[:hi]
            else:  # ascending ids, as seqs to walk down
                found = self._all_checkpoints(idx)
                seqs = [found[c].seq for c in sorted(found) if not before_id or c < before_id]
        for s in reversed(seqs):
            with idx.lock:
                snap = self._at(idx, s)
            if _kind(snap) == "checkpoint":
                yield _cid(snap), idx, snap

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None
             ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first: of a thread (and namespace, when the config names one),
        or of every thread for ``None``; ``filter`` matches metadata keys exactly. With a
        limit, reads about as many snapshots as it returns."""
        conf = (config or {}).get("configurable") or {}
        if conf.get("thread_id") is not None:
            tid, ns = _ids(config or {})
            if "checkpoint_ns" in conf:
                indexes = [self._ns_index(tid, ns)]
            else:
                indexes = self._thread_indexes(tid)
        else:
            indexes = [self._index(r, None, None) for r in self._run_ids(RUN_PREFIX)]
        seen: set[tuple[str, str]] = set()
        try:
            for key, item in self._found(indexes, config, filter, before, limit, conf):
                seen.add(key)
                yield item
        except ErasedError:
            raise
        except NotFound:  # a record the index named is gone (``_fresh``): list and look again,
            for idx in indexes:  # without what was yielded already (the order is the same)
                self._sync(idx)
            left = None if limit is None else limit - len(seen)
            for key, item in self._found(indexes, config, filter, before, None, conf):
                if left is not None and left <= 0:
                    break
                if key not in seen:
                    if left is not None:
                        left -= 1
                    yield item

    def _found(self, indexes: builtins.list[_RunIndex], config: RunnableConfig | None,
               filter: dict[str, Any] | None, before: RunnableConfig | None,
               limit: int | None, conf: Mapping[str, Any]
               ) -> Iterator[tuple[tuple[str, str], CheckpointTuple]]:
        """What ``list`` yields, from the given run indexes, one at a time (no lock is held
        between items, so that ``alist`` streams them from worker threads), each with its
        (run id, checkpoint id)."""
        only = get_checkpoint_id(config) if config else None
        before_id = get_checkpoint_id(before) if before else None
        n = 0
        streams: builtins.list[Iterable[tuple[str, _RunIndex, Snapshot]]]
        if only:
            streams = [[(only, idx, snap)] for idx in indexes
                       if (snap := self._locked_checkpoint(idx, only)) is not None
                       and not (before_id and not only < before_id)]
        else:
            streams = [self._newest_first(idx, before_id) for idx in indexes]
        for cid, idx, snap in heapq.merge(*streams, key=lambda f: f[0], reverse=True):
            if limit is not None and n >= limit:
                break
            with idx.lock:
                if filter:
                    meta = self._metadata(idx, snap)
                    if not all(meta.get(k) == v for k, v in filter.items()):
                        continue
                item = self._tuple(idx, snap, conf.get("thread_id", idx.thread_id))
            n += 1
            yield (idx.run_id, cid), item
