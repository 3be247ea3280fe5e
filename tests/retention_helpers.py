"""Helpers for the retention tests: a storage wrapper that crashes, and a byte scanner."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

import zstandard

from ckptfs.storage.base import Listing, Storage


class InjectedCrash(Exception):
    """Raised by CrashingStorage: the process 'died' at this operation."""


def crashes_at(k: int, inner: Storage, act: Callable[[Storage], object]) -> bool:
    """Run ``act`` on ``inner`` wrapped to die at its mutation ``k + 1``: True when it died
    there (a crash point), False when it finished first (no mutation ``k + 1``: the
    enumeration is complete)."""
    crashing = CrashingStorage(inner, crash_at=k)
    try:
        act(crashing)
    except InjectedCrash:
        return True
    finally:
        crashing.crash_at = None
    return False


class CrashingStorage(Storage):
    """Passes everything to ``inner`` but fails every mutating operation from the k-th on
    (as if the process had died there); ``ops`` counts the mutations attempted.
    ``before(op, path)`` runs before every write and create (to interleave other work)."""

    def __init__(self, inner: Storage, crash_at: int | None,
                 before: Callable[[str, str], None] | None = None) -> None:
        self.inner = inner
        self.before = before
        self.url = inner.url
        self.capabilities = inner.capabilities
        self.crash_at = crash_at
        self.ops = 0

    def _tick(self) -> None:
        self.ops += 1
        if self.crash_at is not None and self.ops > self.crash_at:
            raise InjectedCrash(f"crash at mutation {self.ops}")

    def read(self, path: str) -> bytes:
        return self.inner.read(path)

    def write(self, path: str, data: bytes) -> None:
        if self.before is not None:
            self.before("write", path)
        self._tick()
        self.inner.write(path, data)

    def write_many(self, items: Iterable[tuple[str, bytes]]) -> None:
        for p, d in items:
            self.write(p, d)

    def create(self, path: str, data: bytes) -> None:
        if self.before is not None:
            self.before("create", path)
        self._tick()
        self.inner.create(path, data)

    def replace(self, path: str, data: bytes) -> None:
        self._tick()
        self.inner.replace(path, data)

    def list(self, prefix: str) -> list[str]:
        return self.inner.list(prefix)

    def listing(self, prefix: str) -> Listing:
        return self.inner.listing(prefix)

    def delete(self, path: str) -> None:
        self._tick()
        self.inner.delete(path)

    def size(self, path: str) -> int | None:
        return self.inner.size(path)

    def mtime(self, path: str) -> float | None:
        return self.inner.mtime(path)


def files_containing(root: str, marker: bytes) -> list[str]:
    """Every file under ``root`` whose bytes, or zstd-decompressed payload, contain ``marker``."""
    found = []
    dctx = zstandard.ZstdDecompressor()
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            with open(p, "rb") as f:
                data = f.read()
            hay = [data]
            if data[:1] == b"\x01":
                try:
                    hay.append(dctx.decompress(data[1:], max_output_size=64 << 20))
                except zstandard.ZstdError:
                    pass
            if any(marker in h for h in hay):
                found.append(os.path.relpath(p, root))
    return found


def age_tree(root: str, seconds: float) -> None:
    """Make every file under ``root`` look ``seconds`` older (for the grace rule)."""
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            st = os.stat(p)
            os.utime(p, (st.st_atime - seconds, st.st_mtime - seconds))
