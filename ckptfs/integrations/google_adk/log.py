"""A session's events in its ckptfs run: an append costs O(event), reading the last N costs
O(N), and a full read a handful of chunk reads.

Layout (one run per ADK session, ``names.session_run``): entries

* ``events/NNNNNN``: segment ``NNNNNN`` of the event log, a list of the events' JSON texts
  (``Event.model_dump_json(exclude_none=True)``, what ADK's own SQLite service stores), at most
  ``SEGMENT`` of them. A list entry is a CBOR sequence that an append extends by the new
  items' bytes only (ckptfs.store.entries), and a segment that is full is never encoded again;
* ``index/NNNNNN``: for each event of segment ``NNNNNN``, in order, 12 bytes: its encoded
  length (uint32) and timestamp (float64), big-endian. Every index item takes the same 13
  bytes in the CBOR sequence, so the last m of them are the last 13 m bytes of the entry; their
  lengths tell where the last m events start in their segment. A tail read of m events reads
  only the chunks holding those index items and those events, whatever the history's length;
* ``state``: the session-scoped state (``app:``/``user:`` keys live in runs of their own);
* ``session``: the ids the run belongs to (run ids are hashes of them).

A full segment is *sealed* when the next event needs a new one: its events and its index
become blob entries (``SEALED``) holding the same bytes. A blob is restored as a lazy handle
and committed again without being read, so a process resuming the session reads only the open
segment: its first ``append_event`` costs O(SEGMENT), not O(history).

Readers need nothing but this layout: a tail read that finds the lengths disagreeing with what
a segment holds reads the segment whole (and is still exact).
"""

from __future__ import annotations

import struct
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any

from ckptfs.errors import CorruptSnapshot
from ckptfs.format import cbor
from ckptfs.format.digest import Digest
from ckptfs.format.values import Blob
from ckptfs.format.models import Captured, ChunkRef
from ckptfs.store.entry_reads import decode_value, read_content
from ckptfs.store.repository import Repository, Snapshot

#: events per segment entry: a full segment is a few hundred KiB to a few MiB of JSON
SEGMENT = 1024
#: a segment is full at this many bytes too (a list value holds at most 64 MiB)
SEGMENT_BYTES = 16 * 1024 * 1024
SEG_PREFIX = "events/"
INDEX_PREFIX = "index/"
STATE = "state"
META = "session"
#: an index item: (encoded length, timestamp); in the CBOR sequence a byte string of 12 bytes
#: behind its one-byte head 0x4c
_IDX = struct.Struct(">Id")
IDX_ITEM = 1 + _IDX.size
#: the blob type of a sealed segment (its events or its index: a CBOR sequence)
SEALED = "application/vnd.ckptfs.adk-segment+cbor-seq"


def seg_name(k: int) -> str:
    return f"{SEG_PREFIX}{k:06d}"


def index_name(k: int) -> str:
    return f"{INDEX_PREFIX}{k:06d}"


def segments(names: Iterable[str]) -> int:
    """How many segments a session snapshot with these entry names holds."""
    return sum(1 for n in names if n.startswith(SEG_PREFIX))


def item_size(text: str) -> int:
    """The bytes a text string takes in a CBOR sequence: its head (major type 3) and UTF-8."""
    n = len(text.encode("utf-8", "surrogatepass"))
    head = 1 if n < 24 else 2 if n < 256 else 3 if n < 65536 else 5 if n < 2 ** 32 else 9
    return head + n


def append_items(state: dict[str, Any], texts: Sequence[str], stamps: Sequence[float]
                 ) -> tuple[set[str], list[tuple[list[Any], int]]]:
    """Grow the log held in ``state`` (a run's state, lists changed in place) by ``texts``.
    Returns the entry names that changed and, for each grown list, its old length (to undo
    the growth if the commit fails: ``undo``)."""
    changed: set[str] = set()
    grown: dict[int, tuple[list[Any], int]] = {}
    k = max(0, segments(state) - 1)
    index = state.get(index_name(k), [])
    held = sum(_IDX.unpack(x)[0] for x in index)
    for text, ts in zip(texts, stamps):
        size = item_size(text)
        if index and (len(index) >= SEGMENT or held + size > SEGMENT_BYTES):
            seal(state, k)
            changed.update((seg_name(k), index_name(k)))
            k, held = k + 1, 0
        held += size
        for name, item in ((seg_name(k), text), (index_name(k), _IDX.pack(size, ts))):
            lst = state.setdefault(name, [])
            grown.setdefault(id(lst), (lst, len(lst)))
            lst.append(item)
            changed.add(name)
        index = state[index_name(k)]
    return changed, list(grown.values())


def seal(state: dict[str, Any], k: int) -> None:
    """Make full segment ``k`` (its events and index lists in ``state``) blobs of the same
    bytes (module docstring)."""
    for name in (seg_name(k), index_name(k)):
        items = state[name]
        state[name] = Blob(b"".join(map(cbor.encode, items)), type=SEALED)


def undo(grown: Iterable[tuple[list[Any], int]], state: dict[str, Any]) -> None:
    """Take back what ``append_items`` added (a failed commit stored none of it)."""
    for lst, n in grown:
        del lst[n:]
    for name in [k for k, v in state.items()
                 if k.startswith((SEG_PREFIX, INDEX_PREFIX)) and v == []]:
        del state[name]


class LogReader:
    """Reads a session snapshot's entries, only the chunks a read needs."""

    def __init__(self, repo: Repository, snap: Snapshot,
                 sealed: SealedCache | None = None) -> None:
        self.repo = repo
        self.snap = snap
        self.sealed = sealed
        repo.ensure_located(snap)  # a record another process wrote: learn its locators
        self.where = f"snapshot {snap.digest.short} (run {snap.run!r} seq {snap.seq})"

    def entry(self, name: str) -> Captured:
        e = self.snap.manifest.entries.get(name)
        if not isinstance(e, Captured) or (e.kind == "blob" and e.type != SEALED):
            raise CorruptSnapshot(f"{self.where}: entry {name!r} is missing or not a value; "
                                  "this run is not an ADK session written by ckptfs")
        return e

    def value(self, name: str) -> Any:
        e = self.entry(name)
        where = f"{self.where} entry {name!r}"
        return decode_value(e, read_content(self.repo.objects, e, where=where), where=where)

    def events(self, num_recent: int | None = None, after: float | None = None) -> list[str]:
        """The JSON texts of the events a GetSessionConfig asks for, oldest first: the last
        ``num_recent`` (None: all), of those the ones from the last event older than ``after``
        on (as ADK's in-memory service filters). Reads, newest segment first, the index items
        and the event chunks it needs, and stops at the first segment it needs no more."""
        out: list[list[str]] = []
        got = 0
        for k in reversed(range(segments(self.snap.manifest.entries))):
            if num_recent is not None and got >= num_recent:
                break
            ie = self.entry(index_name(k))
            count = ie.size // IDX_ITEM
            need = count if num_recent is None else min(count, num_recent - got)
            # the index items this segment may contribute: the last ``need``; with ``after``,
            # read from the end in growing windows until an older event (or the start) shows
            m = need if after is None else min(need, 16)
            while True:
                index = self._index(ie, count, m)
                lo, stop = 0, False
                if after is not None:
                    i = len(index) - 1
                    while i >= 0 and index[i][1] >= after:
                        i -= 1
                    stop, lo = i >= 0, i + 1
                if stop or m == need:
                    break
                m = min(need, m * 4)
            if lo < len(index):
                out.append(self._segment(k, [size for size, _ in index[lo:]]))
                got += len(index) - lo
            if stop:
                break
        return [t for part in reversed(out) for t in part]

    def _from(self, e: Captured, start: int, where: str) -> memoryview:
        """The content of ``e`` from byte ``start`` on, reading only the chunks that hold it
        (each verified by its digest)."""
        if e.inline is not None:
            return memoryview(e.inline)[start:]
        at, skip = 0, 0
        picked: list[ChunkRef] = []
        for c in e.chunks:
            if at + c.size > start:
                if not picked:
                    skip = start - at
                picked.append(c)
            at += c.size
        if at != e.size:
            raise CorruptSnapshot(f"{where}: its chunks hold {at} bytes, the entry {e.size}")
        return memoryview(b"".join(self.repo.objects.get_chunks(picked, where=where)))[skip:]

    def _index(self, e: Captured, count: int, m: int) -> list[tuple[int, float]]:
        """The last ``m`` of the ``count`` items of index entry ``e``."""
        where = f"{self.where} index"
        if e.size != count * IDX_ITEM:
            raise CorruptSnapshot(f"{where}: {e.size} bytes is not a whole number of items")
        keep = self.sealed is not None and e.kind == "blob"
        hit = self.sealed.get(e.digest) if keep and self.sealed is not None else None
        if hit is not None:
            return list(hit[count - m:])
        data = self._from(e, (count - m) * IDX_ITEM, where)
        out = []
        for j in range(0, len(data), IDX_ITEM):
            if data[j] != 0x4C:
                raise CorruptSnapshot(f"{where}: item {count - m + j // IDX_ITEM} is not an "
                                      "index item")
            size, ts = _IDX.unpack_from(data, j + 1)
            out.append((size, ts))
        if keep and m == count and self.sealed is not None:
            self.sealed.put(e.digest, out)
        return list(out)

    def _segment(self, k: int, sizes: list[int]) -> list[str]:
        """The last ``len(sizes)`` events of segment ``k``, whose encoded sizes are ``sizes``:
        the chunks from the first one's offset to the segment's end."""
        e = self.entry(seg_name(k))
        where = f"{self.where} entry {seg_name(k)!r}"
        start = e.size - sum(sizes)
        hit = self.sealed.get(e.digest) if self.sealed is not None and e.kind == "blob" else None
        if hit is not None and len(hit) >= len(sizes):
            return hit[len(hit) - len(sizes):]
        try:
            if start < 0:
                raise CorruptSnapshot(f"{where}: shorter than its index says")
            items = cbor.decode_sequence(self._from(e, start, where), what=where)
        except CorruptSnapshot:
            raise
        except Exception:  # an index that does not fit the content: read the segment whole
            items = []
        if len(items) != len(sizes) or not all(type(x) is str for x in items):
            content = read_content(self.repo.objects, e, where=where)
            items = (cbor.decode_sequence(content, what=where) if e.kind == "blob"
                     else decode_value(e, content, where=where))
            if (not isinstance(items, list) or len(items) < len(sizes)
                    or not all(type(x) is str for x in items)):
                raise CorruptSnapshot(f"{where}: not the list of event texts its index says")
            items = items[len(items) - len(sizes):] if sizes else []
        if start == 0 and e.kind == "blob" and self.sealed is not None:
            self.sealed.put(e.digest, list(items))
        return list(items)


class SealedCache:
    """Sealed segments (event texts, index items) this process read whole, by content digest:
    a sealed segment never changes, so a process that reads a session whole every turn (ADK's
    Runner does) reads and decodes each once. Holds at most ``size`` entries."""

    def __init__(self, size: int = 32) -> None:
        self.size = size
        self._items: OrderedDict[Digest, list[Any]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, d: Digest) -> list[Any] | None:
        with self._lock:
            hit = self._items.get(d)
            if hit is not None:
                self._items.move_to_end(d)
            return hit

    def put(self, d: Digest, items: list[Any]) -> None:
        with self._lock:
            self._items[d] = items
            while len(self._items) > self.size:
                self._items.popitem(last=False)


__all__ = ["SEGMENT", "LogReader", "SealedCache", "append_items", "undo", "seg_name", "index_name",
           "item_size", "segments"]
