"""Streaming a large blob into a store and back out, in bounded memory, at disk speed.

Writing (``write_stream``) is a pipeline over two reused window buffers (about one pack each):

- the caller's thread reads a window (``readinto``) and cuts it with pyfastcdc's ``cut_buf``
  (C, without the GIL; views, no copies; a chunk that could still grow past the window's end
  is carried to the start of the next window and cut again with what follows it);
- a *hash* worker feeds the window to the whole-blob BLAKE3 (one call per window, in order);
- a *store* worker takes each chunk's BLAKE3 from its view, skips a chunk the commit may rely
  on (one this writer wrote within the reuse window, or one its parent names and locates:
  ``reuse``, spec/v2.md 5.2; the commit locates it from there), frames new chunks as (codec byte,
  payload) without copying a raw payload (``framing.frame_parts``: the choice ``frame`` makes),
  lays them out as a pack named by the BLAKE3 of its parts (``pack_parts``) and hands the
  parts to the OS (``Storage.stage_parts``: a temp file written with ``writev``);
- *sync* workers (``Storage.staged_workers``: one on local disk, which fsyncs each staged pack
  and links it at its final name; several on object stores, which upload) finish the staged
  packs, at most ``Storage.staged_max`` behind, so the next windows reach the OS while a pack
  is flushed or uploaded.

A buffer is reused only after the hash and store workers are done with it; a pack is visible
only once complete and durable; the commit that names the blob waits for every pack; the
first failure of any worker is raised in the caller's thread, and staged temp files are
dropped. The stored bytes follow the reference path: the same FastCDC cut points and chunk
digests (tests/test_blobs.py), the same framing choice per chunk, the pack layout of
``containers.encode_pack``; only the grouping of chunks into packs (one per window) is this
writer's choice.

Reading (``read_stream``): format v2 in ``blob_reads`` (windows of chunks read from packs and
verified by two workers, the whole-content BLAKE3 on a third); v1 a window of loose chunk
files at a time, the whole-content hash on a worker thread. Either way every chunk verifies
before its window is handed out and a whole-content mismatch is raised before the stream ends
normally (spec/format.md 6.1).
"""

from __future__ import annotations

from collections.abc import Container, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import IO, Any, BinaryIO, cast

import blake3

from ckptfs.errors import CorruptSnapshot
from ckptfs.format import framing
from ckptfs.format.cdc import ChunkerParams, iter_chunks, native
from ckptfs.format.containers import Location, PackRef
from ckptfs.format.digest import Digest, hasher
from ckptfs.format.models import Captured, ChunkRef
from ckptfs.format.names import pack_path
from ckptfs.format.pack_parts import FramedParts, pack_parts
from ckptfs.format.values import StoredBlob
from ckptfs.storage.base import Staged
from ckptfs.store.blob_reads import read_v2, windows
from ckptfs.store.containers import PACK_TARGET, created_now, random_order, shuffled
from ckptfs.store.new_store import check_writable
from ckptfs.store.objects import ObjectStore

#: bytes of source read at a time: a window's new chunks, framed, fill about one pack (the
#: margin leaves room for one codec byte per chunk)
WINDOW = PACK_TARGET - 64 * 1024
#: version 1 stores: bytes of chunks read (one loose file each) and handed out as one piece
V1_READ_WINDOW = 16 * 1024 * 1024
#: the pure-Python chunker: chunks written (packed) per this many bytes
_BATCH_BYTES = 32 * 1024 * 1024
_RAW = framing.CODEC_RAW


class _Written:
    """What a blob write produced: its chunk list, the bytes of chunks new to the store."""

    def __init__(self) -> None:
        self.chunks: list[ChunkRef] = []
        self.size = 0
        self.new_bytes = 0


def write_stream(objects: ObjectStore, f: IO[bytes], params: ChunkerParams, typ: str,
                 labels: dict[str, str], reuse: Container[bytes] = frozenset()
                 ) -> tuple[Captured, int]:
    """Store the stream ``f`` as a blob entry's chunks, durably; the entry and how many bytes
    of new chunks were written. ``reuse``: raw digests of chunks the commit that will name
    the entry may locate without writing them (its parent's: ``Repository.reusable``); they
    are skipped, as are those this writer wrote within the reuse window (``objects.known``).
    Memory stays bounded by the windows whatever the stream's length: the skip consults sets
    the commit holds anyway."""
    check_writable(objects.layout, objects.storage.url)  # never packs into a version 1 store
    objects.sweeps.before_write()  # the writer's first write looks at the lease first
    cdc = native(params)
    out = _Written()
    if cdc is None:
        digest = _write_slow(objects, f, params, out, reuse)
    else:
        digest = _write_windows(objects, f, params, cdc, out, reuse)
    return (Captured(kind="blob", type=typ, size=out.size, digest=digest,
                     chunks=tuple(out.chunks), labels=labels), out.new_bytes)


def write_again(objects: ObjectStore, refs: Sequence[ChunkRef], *, where: str) -> None:
    """Write chunks the store holds again, into new packs of this writer, read (verified) a
    window at a time through the blob writer's store job: what the grace rule makes a commit
    write again (spec/retention.md 4.1: a fork's first commit, a blob stored by another run),
    in the memory of about two windows whatever their total. Version 2 stores only. They are
    then this writer's own (``known``, ``locations.own``): the commit locates them there."""
    syncing = ThreadPoolExecutor(objects.storage.staged_workers,
                                 thread_name_prefix="ckptfs-blob-sync")
    job = _StoreJob(objects, _Written(), syncing, frozenset())
    try:
        for window in windows(refs, WINDOW):
            job.window([memoryview(b) for b in objects.get_chunks(window, where=where)])
        job.finish_all()
        objects.locations.add(job.placed)
        objects.known.update(job.seen)
    finally:
        syncing.shutdown(wait=True, cancel_futures=True)
        job.drop_unfinished()


def _write_slow(objects: ObjectStore, f: IO[bytes], params: ChunkerParams,
                out: _Written, reuse: Container[bytes]) -> Digest:
    """Without pyfastcdc's extension: the reference chunker, chunks written in batches."""
    h = hasher()
    batch: list[tuple[Digest, bytes | memoryview]] = []
    batch_bytes = 0
    for data in iter_chunks(cast(BinaryIO, f), params):
        h.update(data)
        d = Digest.of(data)
        out.chunks.append(ChunkRef(d, len(data)))
        out.size += len(data)
        if d not in objects.known and d.raw not in reuse:
            batch.append((d, data))
            batch_bytes += len(data)
            out.new_bytes += len(data)
        if batch_bytes >= _BATCH_BYTES:
            objects.put_chunks(batch)
            batch, batch_bytes = [], 0
    objects.put_chunks(batch)
    return Digest(h.digest())


def _fill(f: IO[bytes], view: memoryview) -> int:
    """Read from ``f`` into ``view`` until it is full or the stream ends; the count read."""
    readinto = getattr(f, "readinto", None)
    got = 0
    while got < len(view):
        if readinto is not None:
            n = readinto(view[got:])
        else:
            data = f.read(len(view) - got)
            n = len(data)
            view[got:got + n] = data
        if not n:
            break
        got += n
    return got


def _write_windows(objects: ObjectStore, f: IO[bytes], params: ChunkerParams, cdc: Any,
                   out: _Written, reuse: Container[bytes]) -> Digest:
    """The main thread reads and cuts; the "store" worker digests, frames and writes each
    window's chunks (in window order), the "hash" worker feeds the whole-blob hash."""
    window = max(WINDOW, 4 * params.max_size)
    views = [memoryview(bytearray(window)), memoryview(bytearray(window))]
    busy: list[list[Future[Any]]] = [[], []]  # the workers' jobs on each buffer
    whole = hasher()
    hashing = ThreadPoolExecutor(1, thread_name_prefix="ckptfs-blob-hash")
    storing = ThreadPoolExecutor(1, thread_name_prefix="ckptfs-blob-store")
    syncing = ThreadPoolExecutor(objects.storage.staged_workers,
                                 thread_name_prefix="ckptfs-blob-sync")
    job = _StoreJob(objects, out, syncing, reuse)
    carry = 0  # bytes at the start of the current buffer, carried from the previous one
    k = 0
    try:
        while True:
            view = views[k]
            filled = carry + _fill(f, view[carry:])
            eof = filled < window
            cuts: list[memoryview] = []
            keep = filled
            for c in cdc.cut_buf(view[:filled]):
                if not eof and c.offset + params.max_size > filled:
                    keep = c.offset  # could grow past the window: cut again with what follows
                    break
                cuts.append(c.data)
            out.size += keep
            busy[k].append(hashing.submit(whole.update, view[:keep]))
            busy[k].append(storing.submit(job.window, cuts))
            if eof:
                break
            nxt = 1 - k
            _wait(busy[nxt])
            carry = filled - keep
            views[nxt][:carry] = view[keep:filled]
            k = nxt
        for b in busy:
            _wait(b)
        job.finish_all()
        objects.locations.add(job.placed)
        objects.known.update(job.seen)
        return Digest(whole.digest())
    finally:
        hashing.shutdown(wait=True, cancel_futures=True)
        storing.shutdown(wait=True, cancel_futures=True)
        syncing.shutdown(wait=True, cancel_futures=True)
        job.drop_unfinished()




class _StoreJob:
    """The store worker's side of a blob write: one call per window, in order."""

    def __init__(self, objects: ObjectStore, out: _Written, syncing: ThreadPoolExecutor,
                 reuse: Container[bytes]) -> None:
        self.objects = objects
        self.reuse = reuse
        self.out = out
        self.syncing = syncing
        #: packs handed to the OS whose fsync and link run on the sync worker, oldest first
        self.staged: list[tuple[Future[None], Staged]] = []
        self.created = created_now()
        self.seen: set[Digest] = set()
        self.placed: dict[Digest, Location] = {}
        self.shuffle = random_order(objects.storage)

    def window(self, cuts: list[memoryview]) -> None:
        """Digest the chunks ``cuts`` (views into a window), frame the new ones and write them
        (packs, durable when this returns). A chunk written before
        in this blob, by this writer recently, or that the parent locates is not written."""
        bodies: list[FramedParts] = []
        known, seen, chunks, reuse = self.objects.known, self.seen, self.out.chunks, self.reuse
        for data in cuts:
            raw = blake3.blake3(data).digest()
            d = Digest(raw)
            chunks.append(ChunkRef(d, len(data)))
            if d in seen or d in known or raw in reuse:
                continue
            seen.add(d)
            self.out.new_bytes += len(data)
            codec, payload = framing.frame_parts(data)
            bodies.append((d, len(data), codec, payload))
        for group in _groups(bodies):
            if self.shuffle:  # an encrypted store: each pack's bodies in random order
                group = shuffled(group)
            p = pack_parts(group, created=self.created, writer=self.objects.writer)
            staged = self.objects.storage.stage_parts(pack_path(p.name), p.parts)
            self.staged.append((self.syncing.submit(staged.finish), staged))
            ref = PackRef(p.name)
            self.placed.update({b.digest: Location(ref, p.start + b.offset, b.stored)
                                for b in p.bodies})
            while len(self.staged) > self.objects.storage.staged_max:
                self.staged.pop(0)[0].result()

    def finish_all(self) -> None:
        """Wait until every pack is durable and in place (the first failure raises)."""
        while self.staged:
            self.staged[0][0].result()
            self.staged.pop(0)

    def drop_unfinished(self) -> None:
        """After a failure: drop the temp files of packs whose finish never ran."""
        for fut, staged in self.staged:
            if fut.cancelled():
                staged.discard()
        self.staged.clear()


def _wait(jobs: list[Future[Any]]) -> None:
    """Wait for every job (a failed one raises here, in the writer's thread)."""
    try:
        for j in jobs:
            j.result()
    finally:
        jobs.clear()


def _groups(bodies: list[FramedParts]) -> Iterator[list[FramedParts]]:
    """Consecutive bodies of at most PACK_TARGET framed bytes each (one body at least)."""
    group: list[FramedParts] = []
    size = 0
    for b in bodies:
        n = len(b[2]) + len(b[3])
        if group and size + n > PACK_TARGET:
            yield group
            group, size = [], 0
        group.append(b)
        size += n
    if group:
        yield group


# -- reading -----------------------------------------------------------------------------------
def stored_blob(objects: ObjectStore, entry: Captured, *, where: str) -> StoredBlob:
    """A blob entry as a StoredBlob that streams (verified) from the store when iterated."""
    def opener() -> Iterator[bytes]:
        if entry.inline is not None:
            yield entry.inline
            return
        yield from read_stream(objects, entry, where=where)

    return StoredBlob(size=entry.size, digest=entry.digest, type=entry.type,
                      labels=dict(entry.labels), opener=opener, chunks=entry.chunks)


def read_stream(objects: ObjectStore, entry: Captured, *, where: str) -> Iterator[bytes]:
    """The verified content of a chunked entry, in order, one piece per read window (whole
    chunks, each verified before its window is handed out); CorruptSnapshot (before the stream
    ends normally) when the whole content does not match the entry's digest. Format v2:
    ``blob_reads.read_v2`` (packs read and verified by two workers, hashed whole by a third);
    v1: loose chunk files, a window at a time, the whole-content hash on a worker thread."""
    if objects.layout >= 2:
        yield from read_v2(objects, entry, where=where)
        return
    h = hasher()
    hashing = ThreadPoolExecutor(1, thread_name_prefix="ckptfs-blob-hash")
    job: list[Future[Any]] = []
    try:
        for window in windows(entry.chunks, V1_READ_WINDOW):
            piece = b"".join(objects.get_chunks(window, where=where))
            _wait(job)  # the previous window's hash: at most two pieces held here
            job.append(hashing.submit(h.update, piece))
            yield piece
        _wait(job)
    finally:
        hashing.shutdown(wait=True, cancel_futures=True)
    if Digest(h.digest()) != entry.digest:
        raise CorruptSnapshot(f"{where}: content does not match the entry digest {entry.digest}")
