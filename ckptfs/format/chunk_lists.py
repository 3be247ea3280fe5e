"""Incremental facts about an entry's chunk list: its items' canonical CBOR, digests and sizes.

A growing list entry (``cbor-seq`` with size-tiered appends, spec/format.md 10) keeps its chunk
list from one commit to the next and changes only its tail: the same leading ``ChunkRef``
objects, then a few new ones. Re-encoding, re-hashing and re-summing all of them at every
commit is O(history) Python work per step. A ``ChunkListCache`` remembers, for the chunk lists
it saw last, the canonical encoding of each ``[digest, size]`` item (one buffer with item
offsets), the raw digests and the cumulative sizes; a new list that starts with the *same
objects* (checked by identity, at C speed) as a cached one reuses that prefix and pays in
Python only for its new tail. Chunk refs are frozen values, so an object seen before still
holds what it held then; the cache keeps every list it describes alive, so an ``id`` it keys
on is never reused while cached. Bounded: at most ``keep`` lists and ``max_chunks`` chunks.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from operator import is_

import cbor2

from ckptfs.format.cbor_parts import array_head
from ckptfs.format.models import ChunkRef

#: lists remembered (the entries a writer appends to, plus a few it alternates with)
KEEP = 32
#: chunks remembered in all (memory: about 60 bytes of buffers and lists per chunk)
MAX_CHUNKS = 1 << 20


class ChunkList:
    """What a chunk list encodes to: ``items[offsets[i]:offsets[i+1]]`` is the canonical CBOR
    of ``chunks[i].to_cbor()``; ``raws[i]`` its digest's bytes; ``sizes[i]`` the sum of the
    first ``i`` sizes (so ``sizes[-1]`` is the total). Read-only once built."""

    __slots__ = ("chunks", "items", "offsets", "raws", "sizes", "base")

    def __init__(self, chunks: tuple[ChunkRef, ...], items: bytes, offsets: list[int],
                 raws: list[bytes], sizes: list[int], base: int) -> None:
        self.chunks = chunks
        self.items = items
        self.offsets = offsets
        self.raws = raws
        self.sizes = sizes
        #: how many leading chunks came from a cached list (the rest were encoded now)
        self.base = base

    @property
    def total(self) -> int:
        return self.sizes[-1]

    def array(self) -> bytes:
        """The canonical CBOR array of all items (what ``[c.to_cbor() for c in chunks]``
        encodes to)."""
        return array_head(len(self.chunks)) + self.items


def _encode_items(chunks: Sequence[ChunkRef]) -> tuple[list[bytes], list[int], list[bytes]]:
    """Each chunk's canonical item encoding, size and raw digest (fresh, no cache)."""
    enc = [cbor2.dumps([c.digest.raw, c.size], canonical=True) for c in chunks]
    return enc, [c.size for c in chunks], [c.digest.raw for c in chunks]


def common_prefix(new: tuple[ChunkRef, ...], old: tuple[ChunkRef, ...]) -> int:
    """The number of leading chunks ``new`` and ``old`` share *as objects* (identity): found
    from the end of the shorter list (an append changes the tail), then checked whole at C
    speed; 0 when the lists share less than that last common object suggests."""
    k = min(len(new), len(old))
    while k > 0 and new[k - 1] is not old[k - 1]:
        k -= 1
    if k and not all(map(is_, new[:k], old[:k])):
        return 0
    return k


class ChunkListCache:
    """``get(chunks)``: the ChunkList of ``chunks``, from a cached list with the same leading
    objects when there is one. ``put``: remember a list (callers that check what they encode
    put it only after the checks passed, so a cached prefix is always a checked one)."""

    def __init__(self, keep: int = KEEP, max_chunks: int = MAX_CHUNKS) -> None:
        self.keep = keep
        self.max_chunks = max_chunks
        self._lock = threading.Lock()
        #: id(chunks tuple) -> its ChunkList (the tuple itself is held by the value)
        self._exact: dict[int, ChunkList] = {}
        #: id(first chunk) -> the newest ChunkList starting with that object
        self._first: dict[int, ChunkList] = {}
        self._held = 0

    def get(self, chunks: tuple[ChunkRef, ...]) -> ChunkList:
        with self._lock:
            hit = self._exact.get(id(chunks))
            if hit is not None and hit.chunks is chunks:  # all of it seen (and checked)
                return ChunkList(chunks, hit.items, hit.offsets, hit.raws, hit.sizes,
                                 len(chunks))
            base = self._first.get(id(chunks[0])) if chunks else None
        k = 0
        if base is not None and base.chunks[0] is chunks[0]:
            k = common_prefix(chunks, base.chunks)
        enc, sizes, raws = _encode_items(chunks[k:])
        if k and base is not None:
            offsets = base.offsets[:k + 1]
            cum = base.sizes[:k + 1]
            prefix = base.items[:offsets[-1]]
            head_raws = base.raws[:k]
        else:
            offsets, cum, prefix, head_raws = [0], [0], b"", []
        pos, total = offsets[-1], cum[-1]
        for e, s in zip(enc, sizes):
            pos += len(e)
            total += s
            offsets.append(pos)
            cum.append(total)
        return ChunkList(chunks, prefix + b"".join(enc), offsets, head_raws + raws, cum, k)

    def put(self, cl: ChunkList) -> None:
        if not cl.chunks or len(cl.chunks) > self.max_chunks:
            return
        with self._lock:
            old = self._exact.pop(id(cl.chunks), None)
            if old is not None:
                self._held -= len(old.chunks)
            self._exact[id(cl.chunks)] = cl
            self._first[id(cl.chunks[0])] = cl
            self._held += len(cl.chunks)
            while len(self._exact) > self.keep or self._held > self.max_chunks:
                gone = self._exact.pop(next(iter(self._exact)))
                self._held -= len(gone.chunks)
                f = id(gone.chunks[0])
                if self._first.get(f) is gone:
                    del self._first[f]

    def clear(self) -> None:
        with self._lock:
            self._exact.clear()
            self._first.clear()
            self._held = 0

    def __len__(self) -> int:
        return len(self._exact)


__all__ = ["ChunkList", "ChunkListCache", "common_prefix"]
