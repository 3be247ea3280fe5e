"""Damaged stores give the documented errors through the public API, and a failing read
leaves the store byte-for-byte unchanged (spec format.md sections 4, 6, 8 and 13)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import ckptfs
from ckptfs.errors import (
    CkptfsError,
    CorruptSnapshot,
    FormatError,
    UnsupportedFeature,
    UnsupportedVersion,
)
from ckptfs.format import cbor
from ckptfs.format.models import Captured
from ckptfs.format.names import CONFIG_PATH, chunk_path, record_path
from ckptfs.storage import Storage
from tests.storeutil import contents


MSGS = [{"role": "user", "content": f"message {i} " * 30} for i in range(40)]


def populate(store: ckptfs.Store) -> ckptfs.Snapshot:
    run = store.start_run("r")
    run.checkpoint({"messages": MSGS[:10], "plan": {"step": 0}})
    return run.checkpoint({"messages": MSGS, "plan": {"step": 1},
                           "file": ckptfs.Blob(bytes(range(256)) * 400)})


def overwrite(storage: Storage, path: str, data: bytes) -> None:
    storage.delete(path)
    storage.write(path, data)


def flip_last_byte(storage: Storage, path: str) -> None:
    data = bytearray(storage.read(path))
    data[-1] ^= 0x55
    overwrite(storage, path, bytes(data))


def chunk_of(snap: ckptfs.Snapshot, entry: str, i: int = 0) -> str:
    e = snap.manifest.entries[entry]
    assert isinstance(e, Captured)
    return chunk_path(e.chunks[i].digest)


def fails_cleanly(storage: Storage, err: type[CkptfsError], call: Callable[[], Any],
                  *needles: str) -> CkptfsError:
    """``call`` raises ``err`` whose message holds every needle; no file changes."""
    before = contents(storage)
    with pytest.raises(err) as info:
        call()
    for n in needles:
        assert n in str(info.value), f"{n!r} not in {info.value}"
    assert contents(storage) == before
    return info.value


@pytest.mark.parametrize("keep", [0, 1, 10, -1])
def test_truncated_run_record(store: ckptfs.Store, storage: Storage, keep: int) -> None:
    populate(store)
    path = record_path("r", 2)
    data = storage.read(path)
    overwrite(storage, path, data[:keep] if keep >= 0 else data[:-1])
    for call in (lambda: store.read("r"), lambda: store.resume("r"), lambda: store.get("r@2"),
                 lambda: list(store.snapshots("r"))):
        err = fails_cleanly(storage, CorruptSnapshot, call, path)
        assert err.category == "corrupt"
    # the head is never silently the previous record: a new writer would reuse seq 2
    with pytest.raises(CorruptSnapshot):
        store.head("r")


@pytest.mark.parametrize("change,err", [
    ({"version": 3}, UnsupportedVersion),
    ({"required": ["encryption-v9"]}, UnsupportedFeature),
    ({"hash": "sha256"}, UnsupportedFeature),
])
def test_store_config_a_reader_cannot_read(store: ckptfs.Store, storage: Storage,
                                           change: dict[str, Any], err: type[CkptfsError]) -> None:
    snap = populate(store)
    cfg = cbor.decode(storage.read(CONFIG_PATH), what="config")
    cfg.update(change)
    overwrite(storage, CONFIG_PATH, cbor.encode(cfg))
    fresh = ckptfs.open_store(store.url)
    for call in (lambda: fresh.read(snap.id), lambda: fresh.resume("r"), fresh.runs,
                 lambda: fresh.start_run("new").checkpoint({"x": 1})):
        fails_cleanly(storage, err, call)


@pytest.mark.parametrize("damage", [b"", b"\xa1", b"not cbor at all"])
def test_damaged_store_config(store: ckptfs.Store, storage: Storage, damage: bytes) -> None:
    populate(store)
    overwrite(storage, CONFIG_PATH, damage)
    fresh = ckptfs.open_store(store.url)
    fails_cleanly(storage, FormatError, lambda: fresh.read("r"))


