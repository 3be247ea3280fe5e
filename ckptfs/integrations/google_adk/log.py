"""A session's events in its ckptfs run: an append costs O(event), reading the last N costs
O(N), and a full read a handful of chunk reads.

Layout (one run per ADK session, ``names.session_run``): entries

* ``events/NNNNNN``: segment ``NNNNNN`` of the event log, a list of the events' JSON texts
  (``Event.model_dump_json(exclude_none=True)``, what ADK's own SQLite service stores), at most
  ``SEGMENT`` of them. A list entry is a CBOR sequence that an append extends by the new
  items' bytes only (ckptfs.store.entries), and a segment that is full is never encoded again;
* ``index``: one ``[encoded length, timestamp]`` pair per event, in order. It tells where each
  event starts in its segment, so a tail read reads only the chunks of the segments that hold
  the events it returns;
* ``state``: the session-scoped state (``app:``/``user:`` keys live in runs of their own);
* ``session``: the ids the run belongs to (run ids are hashes of them).

Readers need nothing but this layout: a tail read that finds the lengths disagreeing with what
a segment holds reads the segment whole (and is still exact).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ckptfs.errors import CorruptSnapshot
from ckptfs.format import cbor
from ckptfs.format.models import Captured, ChunkRef
from ckptfs.store.entry_reads import decode_value, read_content
from ckptfs.store.repository import Repository, Snapshot

#: events per segment entry: a full segment is a few hundred KiB to a few MiB of JSON
SEGMENT = 1024
SEG_PREFIX = "events/"
INDEX = "index"
STATE = "state"
META = "session"


def seg_name(k: int) -> str:
    return f"{SEG_PREFIX}{k:06d}"


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
    index: list[Any] = state[INDEX]
    changed = {INDEX}
    grown: dict[int, tuple[list[Any], int]] = {id(index): (index, len(index))}
    for text, ts in zip(texts, stamps):
        name = seg_name(len(index) // SEGMENT)
        seg = state.setdefault(name, [])
        grown.setdefault(id(seg), (seg, len(seg)))
        seg.append(text)
        index.append([item_size(text), ts])
        changed.add(name)
    return changed, list(grown.values())


def undo(grown: Iterable[tuple[list[Any], int]], state: dict[str, Any]) -> None:
    """Take back what ``append_items`` added (a failed commit stored none of it)."""
    for lst, n in grown:
        del lst[n:]
    for name in [k for k, v in state.items() if k.startswith(SEG_PREFIX) and v == []]:
        del state[name]


class LogReader:
    """Reads a session snapshot's entries, only the chunks a read needs."""

    def __init__(self, repo: Repository, snap: Snapshot) -> None:
        self.repo = repo
        self.snap = snap
        repo.ensure_located(snap)  # a record another process wrote: learn its locators
        self.where = f"snapshot {snap.digest.short} (run {snap.run!r} seq {snap.seq})"

    def entry(self, name: str) -> Captured:
        e = self.snap.manifest.entries.get(name)
        if not isinstance(e, Captured) or e.kind != "value":
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
        on (as ADK's in-memory service filters). Reads the index and the chunks holding them."""
        index = self.value(INDEX) if INDEX in self.snap.manifest.entries else []
        total = len(index)
        first = 0 if num_recent is None else max(0, total - num_recent)
        if after is not None:
            i = total - 1
            while i >= first and index[i][1] >= after:
                i -= 1
            first = i + 1
        out: list[str] = []
        k = first // SEGMENT
        while k * SEGMENT < total:
            lo = max(first, k * SEGMENT)
            hi = min(total, (k + 1) * SEGMENT)
            out.extend(self._segment(k, index, lo, hi))
            k += 1
        return out

    def _segment(self, k: int, index: list[Any], lo: int, hi: int) -> list[str]:
        """Items ``lo:hi`` (log positions) of segment ``k``: the chunks from ``lo``'s offset."""
        name = seg_name(k)
        e = self.entry(name)
        base = k * SEGMENT
        sizes = [int(x[0]) for x in index[base:hi]]
        where = f"{self.where} entry {name!r}"
        start = sum(sizes[:lo - base])
        if sum(sizes) != e.size or e.inline is not None or not e.chunks:
            return self._whole(e, where, lo - base, hi - base)
        at, skip = 0, 0
        picked: list[ChunkRef] = []
        for c in e.chunks:
            if at + c.size > start:
                if not picked:
                    skip = start - at
                picked.append(c)
            at += c.size
        data = b"".join(self.repo.objects.get_chunks(picked, where=where))
        try:
            items = cbor.decode_sequence(memoryview(data)[skip:], what=where)
        except Exception:  # lengths that do not fit the content: read the whole segment
            return self._whole(e, where, lo - base, hi - base)
        if len(items) != hi - lo or not all(type(x) is str for x in items):
            return self._whole(e, where, lo - base, hi - base)
        return items

    def _whole(self, e: Captured, where: str, lo: int, hi: int) -> list[str]:
        items = decode_value(e, read_content(self.repo.objects, e, where=where), where=where)
        if not isinstance(items, list) or not all(type(x) is str for x in items):
            raise CorruptSnapshot(f"{where}: not a list of event texts")
        return list(items[lo:hi])


__all__ = ["SEGMENT", "LogReader", "append_items", "undo", "seg_name", "item_size"]
