"""Reading a blob of a format v2 store back, verified, at close to the speed of the disk.

A reader owes two BLAKE3 passes over the content (spec/format.md 6.1: every chunk's digest,
then the digest of the whole content); this path spends little else. The content streams a
*window* of chunk references (``READ_WINDOW`` bytes) at a time, through a pipeline:

- the caller's thread plans each window (where each body is), opening each container once
  while it is in use (``Storage.open_stream``, told how many bytes of it the stream reads:
  on local disk one descriptor, checked as ``read`` checks it; an encrypted store opens a
  pack it reads much of whole, decrypted on a worker from then on; at most ``MAX_OPEN``
  idle ones stay open) and queues up to ``DEPTH`` windows ahead for
- the *read* worker, which reads every body of a window and verifies it. On local disk a body
  is two ``pread`` calls, its codec byte and then its payload straight into the ``bytes``
  object handed out: no copy in Python, and nothing is handed out that did not match its
  chunk's digest (codec byte raw, length, digest). Elsewhere (object stores) the bodies of a
  container are coalesced into ranged reads into a reused buffer, verified from views of it
  and copied out. Compressed bodies are unframed (size-bounded inflate), then digested;
- a *hash* worker, which feeds each window's chunks (in order) to the whole-content BLAKE3
  while the next windows are read, at most ``HASH_BEHIND`` windows behind.

The caller gets one piece per chunk. A chunk that did not verify where its location says is
read again by ``ChunkReader`` in the caller's thread (which owns the object store's state:
forwards, loose objects, the snapshot's own record), else the stream fails with its
``MissingObject`` / ``CorruptSnapshot`` before any chunk of that window is handed out. The
whole content's digest is compared before the stream ends normally. Memory is bounded by the
windows in flight (``DEPTH`` queued, one handed out, ``HASH_BEHIND`` being hashed), whatever
the blob's size.
"""

from __future__ import annotations

import collections
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import attrs
import blake3

from ckptfs.errors import CorruptSnapshot
from ckptfs.format import containers as ct
from ckptfs.format import framing
from ckptfs.format.containers import ContainerRef, Location
from ckptfs.format.digest import Digest, hasher
from ckptfs.format.models import Captured, ChunkRef
from ckptfs.storage.base import RangeReader, Storage
from ckptfs.store.containers import MAX_RANGE, container_path, unframe_body
from ckptfs.store.objects import ObjectStore

#: bytes of chunks per window: one job of the read worker, one of the hash worker. Small, so
#: that the few windows in flight (about 14 MiB) reuse the allocator's memory: with 8-16 MiB
#: windows every piece handed out was fresh pages (a page fault per 4 KiB: 65,000 faults and
#: ~40 ms of kernel time per 256 MiB), with 2 MiB none (measured, 2 cores)
READ_WINDOW = 2 * 1024 * 1024
#: windows queued for the read worker ahead of the one handed out (each with its own buffer
#: for ranged reads)
DEPTH = 4
#: read workers: one, since two contend for the GIL between their per-chunk calls (measured
#: slower on 2 cores)
READERS = 1


#: containers kept open by a stream when no queued window needs them
MAX_OPEN = 32
#: windows the hash worker may hold that it has not hashed yet
HASH_BEHIND = 2
_RAW = framing.CODEC_RAW
_RAW_BYTE = bytes([_RAW])

#: a planned range: the container's reader (None: the container is absent) and [start, end)
_Range = tuple[ContainerRef, "RangeReader | None", int, int]


class _Readers:
    """The containers a stream reads, each opened once while it is in use (in the caller's
    thread). A container stays open while a queued window needs it (``acquire`` /
    ``release``); beyond ``MAX_OPEN`` the least recently used idle ones are closed (a blob of
    100 GiB spans 6,400 packs: more descriptors than a process may have), and opened again if
    a later chunk (a repeated one) lies in one of them."""

    def __init__(self, storage: Storage, expect: dict[ContainerRef, int]) -> None:
        self.storage = storage
        #: the bytes of the stream's bodies in each container (``Storage.open_stream``)
        self.expect = expect
        self.open: collections.OrderedDict[ContainerRef, RangeReader | None] = (
            collections.OrderedDict())
        self.users: collections.Counter[ContainerRef] = collections.Counter()

    def acquire(self, c: ContainerRef) -> RangeReader | None:
        """The reader of ``c`` (None: absent), held until ``release``."""
        if c in self.open:
            self.open.move_to_end(c)
        else:
            try:
                self.open[c] = self.storage.open_stream(container_path(c),
                                                        self.expect.get(c, 0))
            except FileNotFoundError:
                self.open[c] = None
        self.users[c] += 1
        return self.open[c]

    def release(self, cs: Iterable[ContainerRef]) -> None:
        """A window's job is done with ``cs``; close idle readers beyond MAX_OPEN."""
        for c in cs:
            self.users[c] -= 1
        extra = len(self.open) - MAX_OPEN
        for c in [c for c in self.open if self.users[c] <= 0][:max(0, extra)]:
            r = self.open.pop(c)
            del self.users[c]
            if r is not None:
                r.close()

    def close(self) -> None:
        for r in self.open.values():
            if r is not None:
                r.close()
        self.open.clear()
        self.users.clear()


def windows(chunks: Sequence[ChunkRef], size: int = READ_WINDOW) -> Iterator[list[ChunkRef]]:
    """Consecutive runs of ``chunks`` of at most ``size`` bytes (one chunk at least): a blob
    streams in bounded memory, a window at a time."""
    out: list[ChunkRef] = []
    total = 0
    for c in chunks:
        if out and total + c.size > size:
            yield out
            out, total = [], 0
        out.append(c)
        total += c.size
    if out:
        yield out


def read_v2(objects: ObjectStore, entry: Captured, *, where: str) -> Iterator[bytes]:
    """The verified content of a chunked entry of a v2 store, in order, one piece per chunk
    (the module docstring says how); CorruptSnapshot before the stream ends normally when the
    whole content does not match the entry's digest."""
    whole = hasher()
    readers = _Readers(objects.storage, expected(objects, entry.chunks))
    reading = ThreadPoolExecutor(READERS, thread_name_prefix="ckptfs-blob-read")
    hashing = ThreadPoolExecutor(1, thread_name_prefix="ckptfs-blob-hash")
    buffers = [[bytearray()] for _ in range(DEPTH)]
    pending: deque[tuple[list[ChunkRef], set[ContainerRef], Future[list[bytes | None]]]] = (
        deque())
    hashed: deque[Future[Any]] = deque()
    todo = windows(entry.chunks, READ_WINDOW)
    n = 0

    def submit() -> None:
        nonlocal n
        window = next(todo, None)
        if window is None:
            return
        locs = [objects.locations.get(r.digest) for r in window]
        used = {loc.container for loc in locs if loc is not None}
        held = {c: readers.acquire(c) for c in used}
        at = [None if loc is None else held[loc.container] for loc in locs]
        ranges = [(c, held[c], a, b) for c, a, b in ct.body_ranges(
            [loc for loc, r in zip(locs, at) if loc is not None and r is not None
             and not r.per_call]) if b - a <= MAX_RANGE]
        # the buffer of window n - DEPTH, whose job is done (its result was taken)
        pending.append((window, used, reading.submit(_fetch, window, locs, at, ranges,
                                                     buffers[n % DEPTH])))
        n += 1

    try:
        for _ in range(DEPTH):
            submit()
        while pending:
            window, used, job = pending.popleft()
            got = job.result()
            readers.release(used)
            submit()
            parts = _complete(objects, window, got, where=where)
            while len(hashed) >= HASH_BEHIND:
                hashed.popleft().result()
            hashed.append(hashing.submit(_update, whole, parts))
            yield from parts
        while hashed:
            hashed.popleft().result()
    finally:
        reading.shutdown(wait=True, cancel_futures=True)
        hashing.shutdown(wait=True, cancel_futures=True)
        readers.close()
    if Digest(whole.digest()) != entry.digest:
        raise CorruptSnapshot(f"{where}: content does not match the entry digest {entry.digest}")


def expected(objects: ObjectStore, chunks: Sequence[ChunkRef]) -> dict[ContainerRef, int]:
    """How many bytes of bodies a stream of ``chunks`` reads from each container (a body
    once per time the content holds its chunk): what ``Storage.open_stream`` is told."""
    out: collections.Counter[ContainerRef] = collections.Counter()
    get = objects.locations.get
    for r in chunks:
        loc = get(r.digest)
        if loc is not None:
            out[loc.container] += loc.stored
    return dict(out)


def _update(h: Any, parts: Sequence[bytes]) -> None:
    """The hash worker's job: a window's chunks into the whole-content hash, in order."""
    for p in parts:
        h.update(p)


def _complete(objects: ObjectStore, window: Sequence[ChunkRef], parts: list[bytes | None],
              *, where: str) -> list[bytes]:
    """A window's chunks, those that did not verify at their location (None) read the slow
    way (``ChunkReader``: forwards, loose objects; MissingObject / CorruptSnapshot when no
    place holds them), in the caller's thread, which owns the object store's state."""
    return [data if data is not None else objects.reader.read([r], where=where)[0]
            for r, data in zip(window, parts)]


def _fetch(window: Sequence[ChunkRef], locs: Sequence[Location | None],
           at: Sequence[RangeReader | None], ranges: Sequence[_Range],
           holder: list[bytearray]) -> list[bytes | None]:
    """A read worker's job: each chunk of ``window`` as verified bytes, or None where it is
    not where its location says (or does not verify there). A body in a container whose
    reads are system calls (``RangeReader.per_call``: local disk) is read by itself straight
    into the bytes handed out (``_body``); the others come from ``ranges``, read into the
    reused buffer ``holder[0]`` (grown to fit), verified from a view and then copied out."""
    need = sum(b - a for _, _, a, b in ranges)
    if len(holder[0]) < need:
        holder[0] = bytearray(need)
    buf = memoryview(holder[0])
    spans: dict[ContainerRef, list[tuple[int, int, memoryview]]] = {}
    pos = 0
    for c, reader, a, b in ranges:
        if reader is None:
            continue
        try:
            got = reader.read_into(a, buf[pos:pos + b - a])
        except FileNotFoundError:
            continue
        spans.setdefault(c, []).append((a, a + got, buf[pos:pos + got]))
        pos += got
    out: list[bytes | None] = []
    for r, loc, reader in zip(window, locs, at):
        if loc is None or reader is None:
            out.append(None)
        elif reader.per_call:
            out.append(_body(reader, loc, r))
        else:
            data = verified(spans.get(loc.container, ()), loc, r)
            out.append(None if data is None else bytes(data))
    return out


def _body(reader: RangeReader, loc: Location, ref: ChunkRef) -> bytes | None:
    """The chunk ``ref`` from its body at ``loc``, read by itself, or None (cut short, damaged,
    another chunk). A body as long as a raw one is read as its codec byte, then its payload
    straight into the bytes returned (no copy); the payload is returned only if the codec byte
    is raw, its length is the chunk's size and it hashes to the chunk's digest. Any other
    body is read whole and unframed (size-bounded inflate), then digested."""
    try:
        if loc.stored == ref.size + 1 and reader.read(loc.start, 1) == _RAW_BYTE:
            payload = reader.read(loc.start + 1, ref.size)
            ok = len(payload) == ref.size and blake3.blake3(payload).digest() == ref.digest.raw
            return payload if ok else None
        body = reader.read(loc.start, loc.stored)
    except FileNotFoundError:
        return None
    if len(body) != loc.stored:
        return None
    return unframe_body(body, ref, where="chunk")


def verified(spans: Sequence[tuple[int, int, memoryview]], loc: Location, ref: ChunkRef
             ) -> bytes | memoryview | None:
    """The chunk ``ref`` (a view into the read buffer when raw) from the body at ``loc``
    within the ranges read, or None (not read, cut short, damaged or another chunk: the
    caller reads it the slow way). Raw bodies are checked for their codec byte, size and
    digest without a copy; others are unframed (size-bounded inflate), then digested."""
    for a, b, view in spans:
        if a <= loc.start and loc.start + loc.stored <= b:
            body = view[loc.start - a:loc.start - a + loc.stored]
            break
    else:
        return None
    if len(body) < 1:
        return None
    if body[0] == _RAW:
        payload = body[1:]
        if len(payload) != ref.size or blake3.blake3(payload).digest() != ref.digest.raw:
            return None
        return payload
    return unframe_body(body, ref, where="chunk")
