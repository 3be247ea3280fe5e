"""The checks of tests/test_ops_stateful.py: a store against its model (what reads back), and
every byte a store holds, as stored and zstd-decompressed, for the erasure scans: a local store by walking its folder (hidden and temporary files
included), an object store (memory, S3) by listing its prefix through its fsspec filesystem,
not through ckptfs's own listing (which skips names that are not objects)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

import zstandard

import ckptfs
from ckptfs.storage.base import Storage
from tests import ops_model as om

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


def plain(v: Any) -> Any:
    """A read-back value in comparable form: a blob as its bytes."""
    if isinstance(v, (ckptfs.StoredBlob, ckptfs.Blob)):
        return v.read()
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    return v


def effects_of(store: ckptfs.Store, snap: ckptfs.Snapshot) -> dict[str, tuple[str, Any]]:
    return {k: (e.status, e.result) for k, e in store.ledger(snap).effects.items()}


def check_store(s: ckptfs.Store, m: om.StoreModel, *, where: str) -> None:
    """Every retained snapshot reads back as reported; nothing else is visible."""
    listed = s.runs()
    assert set(m.runs()) <= set(listed), f"{where}: runs {listed} lack some of {m.runs()}"
    for run in listed:  # an erased run stays listed (its tombstone), with no snapshot
        want = m.retained(run)
        seqs = [x.seq for x in s.snapshots(run)]
        assert seqs == sorted(want), f"{where}: {run} seqs {seqs} != {sorted(want)}"
        for seq in want:
            check_snap(s, m, run, seq, where=where)


def check_snap(s: ckptfs.Store, m: om.StoreModel, run: str, seq: int, *, where: str) -> None:
    x = m.retained(run).get(seq)
    if x is None:
        return
    snap = s.get(f"{run}@{seq}")
    assert (snap.id, snap.parent, snap.labels) == (x.id, x.parent, x.labels), \
        f"{where}: {run}@{seq}"
    assert plain(dict(s.read(snap))) == x.state, f"{where}: {run}@{seq} state"
    assert effects_of(s, snap) == x.effects, f"{where}: {run}@{seq} ledger"
