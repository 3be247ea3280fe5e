"""Every byte a store holds, as stored and zstd-decompressed, for the erasure scans of
tests/test_ops_stateful.py: a local store by walking its folder (hidden and temporary files
included), an object store (memory, S3) by listing its prefix through its fsspec filesystem,
not through ckptfs's own listing (which skips names that are not objects)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

import zstandard

from ckptfs.storage.base import Storage

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def _raw(storage: Storage) -> Iterator[tuple[str, bytes]]:
    root = getattr(storage, "root", None)
    fs = getattr(storage, "fs", None)
    if fs is None:  # local disk
        assert isinstance(root, str)
        for d, _, names in os.walk(root):
            for n in names:
                p = os.path.join(d, n)
                with open(p, "rb") as f:
                    yield os.path.relpath(p, root).replace(os.sep, "/"), f.read()
        return
    assert root is not None
    for p in fs.find(root, withdirs=False):
        rel = p[len(root.lstrip("/")):].lstrip("/") if not p.startswith(root) else \
            p[len(root):].lstrip("/")
        yield rel, fs.cat_file(p)


def store_files(storage: Storage) -> list[str]:
    """Every file or object of the store, by path relative to its root."""
    return [p for p, _ in _raw(storage)]


def payloads(data: bytes) -> Iterator[bytes]:
    """``data`` and every zstd frame in it, decompressed (a pack holds many)."""
    yield data
    at = data.find(ZSTD_MAGIC)
    while at >= 0:
        try:
            yield zstandard.ZstdDecompressor().decompressobj().decompress(data[at:])
        except zstandard.ZstdError:
            pass
        at = data.find(ZSTD_MAGIC, at + 1)


def files_with_tokens(storage: Storage, tokens: Iterable[str]) -> dict[str, list[str]]:
    """path -> the tokens found in it, for every file holding one of ``tokens``."""
    want = [t.encode() for t in sorted(tokens)]
    found: dict[str, list[str]] = {}
    for path, data in _raw(storage):
        hit = sorted({t.decode() for p in payloads(data) for t in want if t in p})
        if hit:
            found[path] = hit
    return found
