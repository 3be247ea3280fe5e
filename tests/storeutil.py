"""Helpers for tests that look at a store's files through its Storage."""

from __future__ import annotations

from ckptfs.storage import Storage


def walk(storage: Storage, prefix: str = "") -> list[str]:
    """Every object path under ``prefix``, depth first."""
    out = []
    for name in storage.list(prefix):
        path = f"{prefix}/{name}" if prefix else name
        if storage.size(path) is None:
            out.extend(walk(storage, path))
        else:
            out.append(path)
    return out


def contents(storage: Storage) -> dict[str, bytes]:
    """Path -> bytes of every object in the store (to prove a failing read changed nothing)."""
    return {p: storage.read(p) for p in walk(storage)}
