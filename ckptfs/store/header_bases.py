"""Decoding records whose header is stored by reference (container form 0x04, spec/v2.md
3.1.2, store feature ``delta-headers``).

A form 0x04 record's header is a zstd frame compressed against the header of an earlier
record of its run (the writer's parent record), so a commit's header costs what changed, not
the whole manifest and locator table again. To read it a reader needs that base record's
header, which may itself be stored by reference (a chain of at most ``ct.MAX_BASE_DEPTH``).
``Bases`` fetches them: the first bytes of each base record (one ranged read, a second when
its header is longer), its header inflated, remembered per storage in a bounded cache (headers
are immutable while their record exists). A decode that fails with a remembered base is tried
once more with every base read afresh: a record withdrawn and committed again at the same seq
has another header, and the frame's checksum tells a wrong base from a right one.
"""

from __future__ import annotations

import collections
import threading
import weakref
from collections.abc import Iterable, Set as AbstractSet
from typing import Any

from ckptfs.errors import CkptfsError, FormatError
from ckptfs.format import containers as ct
from ckptfs.format.containers import Container
from ckptfs.format.names import record_path
from ckptfs.storage.base import Storage

#: bytes of base headers remembered per storage (the oldest first out when over)
CACHE_BYTES = 32 * 1024 * 1024
#: records read ahead in one batch when a base is not remembered (the writer's chain length)
PREFETCH = 16

_lock = threading.Lock()


class _Cache:
    """Remembered headers of one storage, oldest first, and their total size."""

    def __init__(self) -> None:
        self.items: collections.OrderedDict[tuple[str, int], bytes] = collections.OrderedDict()
        self.total = 0

    def get(self, key: tuple[str, int]) -> bytes | None:
        with _lock:
            return self.items.get(key)

    def put(self, key: tuple[str, int], plain: bytes) -> None:
        with _lock:
            old = self.items.pop(key, None)
            self.total += len(plain) - (len(old) if old is not None else 0)
            self.items[key] = plain
            while self.total > CACHE_BYTES and len(self.items) > 1:
                _, gone = self.items.popitem(last=False)
                self.total -= len(gone)

    def drop_run(self, run_id: str) -> None:
        with _lock:
            for k in [k for k in self.items if k[0] == run_id]:
                self.total -= len(self.items.pop(k))


_caches: weakref.WeakKeyDictionary[Any, _Cache] = weakref.WeakKeyDictionary()
#: storages whose config requires ``delta-headers``: only there is a form 0x04 record read
#: (spec/v2.md 3.1.2); elsewhere it is ``corrupt``
_allowed: weakref.WeakSet[Any] = weakref.WeakSet()


def allow(storage: Storage, yes: bool) -> None:
    """Say whether ``storage``'s config requires ``delta-headers`` (the Repository does, as it
    takes the config)."""
    try:
        with _lock:
            if yes:
                _allowed.add(storage)
            else:
                _allowed.discard(storage)
    except TypeError:
        pass


def allowed(storage: Storage) -> bool:
    try:
        with _lock:
            return storage in _allowed
    except TypeError:
        return False


def _cache(storage: Storage) -> _Cache | None:
    try:
        with _lock:
            c = _caches.get(storage)
            if c is None:
                c = _caches[storage] = _Cache()
            return c
    except TypeError:  # a storage that cannot be weakly referenced: no cache
        return None


def remember(storage: Storage, run_id: str, seq: int, plain: bytes) -> None:
    """Keep ``plain``, the header of record ``run_id``/``seq`` (a writer's own record, or one
    just read), for decoding the records stored against it."""
    c = _cache(storage)
    if c is not None and plain:
        c.put((run_id, seq), plain)


def forget(storage: Storage, run_id: str) -> None:
    """Drop every remembered header of run ``run_id`` (records were deleted or replaced)."""
    c = _cache(storage)
    if c is not None:
        c.drop_run(run_id)


class Bases:
    """``ct.HeaderBase`` for the records of run ``run_id`` in ``storage``."""

    def __init__(self, storage: Storage, run_id: str, *, cached: bool = True) -> None:
        self.storage = storage
        self.run_id = run_id
        self.cached = cached
        self.hits = 0
        self.reads = 0
        #: first bytes of records read ahead (None: absent)
        self._ahead: dict[int, bytes | None] = {}

    def _first(self, seq: int, c: _Cache | None) -> bytes | None:
        """Record ``seq``'s first bytes. A miss reads it and the PREFETCH records below it
        (not remembered already) in one batch of ranged reads: a writer's chain is its
        parents, seq - 1, seq - 2, ..., so a head read needs them next (an object store
        overlaps the requests instead of sending them one after the other)."""
        if seq not in self._ahead:
            want = [s for s in range(seq, max(0, seq - PREFETCH), -1)
                    if s == seq or (s not in self._ahead
                                    and (c is None or c.get((self.run_id, s)) is None))]
            got = self.storage.read_ranges([(record_path(self.run_id, s), 0, ct.HEAD_READ)
                                            for s in want])
            self.reads += 1
            self._ahead.update(zip(want, got))
        return self._ahead.pop(seq)

    def __call__(self, seq: int, depth: int) -> bytes:
        c = _cache(self.storage) if self.cached else None
        if c is not None:
            got = c.get((self.run_id, seq))
            if got is not None:
                self.hits += 1
                return got
        path = record_path(self.run_id, seq)
        what = f"run record {path} (the base of a later record's header)"
        first = self._first(seq, c)
        if first is None:
            raise FormatError(f"{what} is gone: the records stored against it cannot be "
                              "decoded (spec/v2.md 9.1 keeps such records; run 'ckptfs "
                              "verify')")
        end = ct.header_length(first, what=what)
        if end > len(first):
            first += self.storage.read_range(path, len(first), end)
        plain, _ = ct.plain_header(first, what=what, base=self, depth=depth)
        remember(self.storage, self.run_id, seq, plain)
        return plain


def chains(storage: Storage, run_id: str, seqs: Iterable[int], *, low: int = 0) -> set[int]:
    """Every record above ``low`` that a record of ``seqs`` (of run ``run_id``) needs as a
    header base, directly or through other bases (``ct.peek_base`` on each record's first
    bytes, in batches of ranged reads); empty in a store without ``delta-headers``. A record
    that cannot be read needs nothing (it cannot be decoded anyway; verify names it)."""
    if not allowed(storage):
        return set()
    seen: set[int] = set()
    out: set[int] = set()
    todo = [s for s in seqs if s > low]
    while todo:
        part, todo = [s for s in dict.fromkeys(todo[:64]) if s not in seen], todo[64:]
        seen.update(part)
        try:
            got = storage.read_ranges([(record_path(run_id, s), 0, ct.PEEK_BASE) for s in part])
        except (OSError, CkptfsError):
            got = [None] * len(part)
        for first in got:
            b = ct.peek_base(first) if first else None
            if b is not None and b > low:
                out.add(b)
                if b not in seen:
                    todo.append(b)
    return out


def bases(storage: Storage, run_id: str, seqs: Iterable[int]) -> dict[int, int]:
    """seq -> the base seq its record names, for each record of ``seqs`` stored by reference
    (``ct.peek_base``; one batch of ranged reads per 64 records); others are absent."""
    out: dict[int, int] = {}
    todo = list(seqs)
    for i in range(0, len(todo), 64):
        part = todo[i:i + 64]
        try:
            got = storage.read_ranges([(record_path(run_id, s), 0, ct.PEEK_BASE) for s in part])
        except (OSError, CkptfsError):
            continue
        for s, first in zip(part, got):
            b = ct.peek_base(first) if first else None
            if b is not None:
                out[s] = b
    return out


def held_bases(storage: Storage, run_id: str, keep: Iterable[int], drop: AbstractSet[int]
               ) -> set[int]:
    """The seqs of ``drop`` that a record of ``keep`` needs as a base, directly or through
    other bases (spec/v2.md 9.1: while a record is visible its bases stay visible)."""
    if not drop:
        return set()
    low = min(drop) - 1
    return chains(storage, run_id, keep, low=low) & set(drop)


def decode_record(storage: Storage, run_id: str, data: bytes | memoryview, *, what: str,
                  whole: bool = True) -> Container:
    """``ct.decode`` of record bytes of run ``run_id`` (any form: a form 0x04 header is
    decoded through its base records, in a store that requires ``delta-headers``; in any other
    it is ``corrupt``). A failure with a remembered base is tried once more with the bases
    read afresh (see the module's docstring)."""
    if not allowed(storage):
        return ct.decode(data, what=what, whole=whole)
    b = Bases(storage, run_id)
    try:
        c = ct.decode(data, what=what, whole=whole, base=b)
    except FormatError:
        if not b.hits:
            raise
        forget(storage, run_id)
        c = ct.decode(data, what=what, whole=whole, base=Bases(storage, run_id, cached=False))
    if c.base is not None and isinstance(c.header, ct.RecordHeader):
        remember(storage, run_id, c.header.seq, c.plain)  # the next record's base, likely
    return c


def decode_at(storage: Storage, path: str, data: bytes | memoryview, *, what: str,
              whole: bool = True) -> Container:
    """``decode_record`` for a container at ``path``: a run record's run comes from the path
    (``runs/<run>/<seq>``); any other container needs no base."""
    parts = path.split("/")
    if len(parts) == 3 and parts[0] == "runs":
        return decode_record(storage, parts[1], data, what=what, whole=whole)
    return ct.decode(data, what=what, whole=whole)


__all__ = ["Bases", "bases", "chains", "held_bases", "allow", "allowed", "decode_record", "decode_at", "remember", "forget"]
