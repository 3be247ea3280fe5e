"""Reading and writing content-addressed objects: chunks and manifests, verified on read."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

from ckptfs.errors import CorruptObject, CorruptSnapshot, MissingObject
from ckptfs.format import framing
from ckptfs.format.digest import Digest
from ckptfs.format.models import MAX_CHUNK_SIZE, MAX_MANIFEST_SIZE, ChunkRef, Manifest
from ckptfs.format.names import chunk_path, snapshot_path
from ckptfs.storage.base import Storage

#: How long a writer trusts that a chunk it wrote (or restored) still exists without writing it
#: again. Must stay well under the store's GC grace period (spec/retention.md "Grace rule").
REUSE_WINDOW_S = 600.0


class KnownChunks:
    """Digests a writer may skip uploading, each trusted for ``window`` seconds only: after
    that the chunk is written again (which refreshes it), so GC's grace period covers it."""

    def __init__(self, window: float = REUSE_WINDOW_S) -> None:
        self.window = window
        self._seen: dict[Digest, float] = {}

    def __contains__(self, d: object) -> bool:
        t = self._seen.get(d)  # type: ignore[call-overload]
        return t is not None and time.monotonic() - t < self.window

    def add(self, d: Digest) -> None:
        self._seen[d] = time.monotonic()

    def update(self, ds: Iterable[Digest]) -> None:
        now = time.monotonic()
        for d in ds:
            self._seen[d] = now

    def clear(self) -> None:
        """Trust nothing (after chunks were deleted without a grace period, as erase does)."""
        self._seen.clear()

    def __len__(self) -> int:
        return len(self._seen)


class ObjectStore:
    """Chunks and manifests over a storage backend. Remembers which chunks it knows exist."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.known = KnownChunks()

    # -- chunks ------------------------------------------------------------------------------
    def frame_chunks(self, chunks: Iterable[tuple[Digest, bytes | memoryview]]
                     ) -> list[tuple[str, bytes]]:
        """Framed objects for the chunks not already known to exist (deduplicated)."""
        batch: list[tuple[str, bytes]] = []
        seen: set[Digest] = set()
        for d, data in chunks:
            if d in self.known or d in seen:
                continue
            seen.add(d)
            batch.append((chunk_path(d), framing.frame(data)))
        return batch

    def put_chunks(self, chunks: Iterable[tuple[Digest, bytes | memoryview]]) -> int:
        """Store chunks not already known to exist, durably now; returns the number written."""
        chunks = list(chunks)
        batch = self.frame_chunks(chunks)
        if batch:
            self.storage.write_many(batch)
        self.known.update(d for d, _ in chunks)
        return len(batch)

    def manifest_object(self, manifest: Manifest) -> tuple[Digest, int, tuple[str, bytes]]:
        """The snapshot id, uncompressed size and framed object of a manifest."""
        data = manifest.to_bytes()
        if len(data) > MAX_MANIFEST_SIZE:
            raise CorruptObject(f"manifest would be {len(data)} bytes, over {MAX_MANIFEST_SIZE}")
        d = Digest.of(data)
        return d, len(data), (snapshot_path(d), framing.frame(data))

    def get_chunk(self, ref: ChunkRef, *, where: str) -> bytes:
        """One chunk's content, verified against its size and digest."""
        try:
            stored: bytes | None = self.storage.read(chunk_path(ref.digest))
        except FileNotFoundError:
            stored = None
        return check_chunk(ref, stored, where=where)

    def get_chunks(self, refs: Sequence[ChunkRef], *, where: str) -> list[bytes]:
        """Several chunks' contents, read in one batch (concurrently on object stores)."""
        got = self.storage.read_many([chunk_path(r.digest) for r in refs])
        return [check_chunk(r, stored, where=where) for r, stored in zip(refs, got)]

    # -- manifests ---------------------------------------------------------------------------
    def get_manifest(self, d: Digest, size: int | None = None) -> Manifest:
        path = snapshot_path(d)
        what = f"snapshot {d}"
        try:
            stored = self.storage.read(path)
        except FileNotFoundError:
            raise MissingObject(f"{what}: manifest file {path} is missing") from None
        if size is None:
            size = _declared_size(stored, what)
        try:
            data = framing.unframe(stored, size, what=f"{what} manifest")
        except CorruptObject as e:
            raise CorruptSnapshot(str(e)) from e
        if Digest.of(data) != d:
            raise CorruptSnapshot(f"{what}: manifest bytes do not match the snapshot id")
        return Manifest.from_bytes(data, what=what)


def check_chunk(ref: ChunkRef, stored: bytes | None, *, where: str) -> bytes:
    """Unframe a chunk file's bytes (None: the file is absent) and verify them against ``ref``."""
    if stored is None:
        raise MissingObject(
            f"{where}: chunk {ref.digest} is missing from the store ({chunk_path(ref.digest)}); "
            "the snapshot cannot be restored. Run 'ckptfs verify' to list every affected snapshot.")
    try:
        data = framing.unframe(stored, ref.size, what=f"{where}: chunk {ref.digest}")
    except CorruptObject as e:
        raise CorruptSnapshot(str(e)) from e
    if Digest.of(data) != ref.digest:
        raise CorruptSnapshot(
            f"{where}: chunk {ref.digest} does not match its digest (bytes flipped on disk?)")
    return data


def _declared_size(stored: bytes, what: str) -> int:
    """Size of a framed object when no record names it: zstd frames carry it, raw is explicit."""
    import zstandard

    if not stored:
        raise CorruptSnapshot(f"{what}: manifest file is empty (truncated)")
    if stored[0] == framing.CODEC_RAW:
        return len(stored) - 1
    if stored[0] == framing.CODEC_ZSTD:
        try:
            n = int(zstandard.frame_content_size(stored[1:]))
        except zstandard.ZstdError as e:
            raise CorruptSnapshot(f"{what}: manifest zstd header damaged ({e})") from e
        if 0 <= n <= MAX_MANIFEST_SIZE:
            return n
        raise CorruptSnapshot(f"{what}: manifest declares an impossible size ({n})")
    raise CorruptSnapshot(f"{what}: unknown codec byte 0x{stored[0]:02x}")


__all__ = ["ObjectStore", "MAX_CHUNK_SIZE"]
