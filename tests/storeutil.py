"""Helpers for tests that look at a store's files through its Storage."""

from __future__ import annotations

from ckptfs.storage import Storage


def walk(storage: Storage, prefix: str = "") -> list[str]:
    """Every object path under ``prefix``, sorted (one listing on object stores)."""
    return sorted(storage.scan(prefix))


def contents(storage: Storage) -> dict[str, bytes]:
    """Path -> bytes of every object in the store (to prove a failing read changed nothing)."""
    paths = walk(storage)
    return {p: data for p, data in zip(paths, storage.read_many(paths), strict=True)
            if data is not None}
