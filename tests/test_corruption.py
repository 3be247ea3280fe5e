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
    MissingObject,
    NotFound,
    UnsupportedFeature,
    UnsupportedVersion,
)
from ckptfs.format import cbor, framing
from ckptfs.format.models import Captured
from ckptfs.format.names import CONFIG_PATH, chunk_path, record_path, snapshot_path
from ckptfs.storage import Storage
from tests.storeutil import contents

#: format v1 layout on purpose: damages v1 chunk and manifest files; v2 damage: conformance v2 vectors, tests/test_v2_reader_rules.py
pytestmark = pytest.mark.layout(1)

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


def test_flipped_byte_in_a_value_chunk(store: ckptfs.Store, storage: Storage) -> None:
    snap = populate(store)
    path = chunk_of(snap, "messages", 0)
    flip_last_byte(storage, path)
    digest = snap.manifest.entries["messages"].chunks[0].digest.text  # type: ignore[union-attr]
    for call in (lambda: store.read(snap.id), lambda: store.resume("r")):
        fails_cleanly(storage, CorruptSnapshot, call, snap.digest.short, "'messages'", digest)


def test_flipped_byte_in_a_blob_chunk(store: ckptfs.Store, storage: Storage) -> None:
    snap = populate(store)
    flip_last_byte(storage, chunk_of(snap, "file", 0))
    blob = store.read(snap.id)["file"]  # blobs are read lazily
    digest = snap.manifest.entries["file"].chunks[0].digest.text  # type: ignore[union-attr]
    fails_cleanly(storage, CorruptSnapshot, blob.read, snap.digest.short, "'file'", digest)


def test_a_chunk_with_the_wrong_codec_byte(store: ckptfs.Store, storage: Storage) -> None:
    snap = populate(store)
    path = chunk_of(snap, "messages")
    overwrite(storage, path, b"\x07" + storage.read(path)[1:])
    fails_cleanly(storage, CorruptSnapshot, lambda: store.read(snap.id), "codec", "'messages'")


def test_missing_chunk(store: ckptfs.Store, storage: Storage) -> None:
    snap = populate(store)
    storage.delete(chunk_of(snap, "messages", 0))
    fails_cleanly(storage, MissingObject, lambda: store.read(snap.id), "'messages'", "missing")
    fails_cleanly(storage, MissingObject, lambda: store.resume("r"), "missing")


def test_missing_blob_chunk(store: ckptfs.Store, storage: Storage) -> None:
    snap = populate(store)
    storage.delete(chunk_of(snap, "file", 0))
    blob = store.read(snap.id)["file"]
    fails_cleanly(storage, MissingObject, blob.read, "'file'", "missing")
    assert store.read("r@1")["plan"] == {"step": 0}  # a snapshot without it still reads


def test_missing_manifest_of_a_committed_record(store: ckptfs.Store, storage: Storage) -> None:
    snap = populate(store)
    storage.delete(snapshot_path(snap.digest))
    fails_cleanly(storage, MissingObject, lambda: store.read("r"), snap.digest.text)


@pytest.mark.parametrize("keep", [0, 1, 5, -1])
def test_truncated_manifest(store: ckptfs.Store, storage: Storage, keep: int) -> None:
    snap = populate(store)
    path = snapshot_path(snap.digest)
    data = storage.read(path)
    overwrite(storage, path, data[:keep] if keep >= 0 else data[:-1])
    fails_cleanly(storage, FormatError, lambda: store.read("r"), snap.digest.text)
    fails_cleanly(storage, FormatError, lambda: store.resume("r"))


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


def test_edited_manifest_does_not_match_its_id(store: ckptfs.Store, storage: Storage) -> None:
    snap = populate(store)
    path = snapshot_path(snap.digest)
    m = snap.manifest.to_cbor()
    m["boundary"] = "stop"  # same length: only the digest can tell
    overwrite(storage, path, framing.frame(cbor.encode(m)))
    for call in (lambda: store.read("r"), lambda: store.read(snap.id)):
        fails_cleanly(storage, CorruptSnapshot, call, "do not match", snap.digest.text)


def test_record_pointing_at_another_runs_manifest(store: ckptfs.Store, storage: Storage) -> None:
    snap = populate(store)
    other = store.start_run("other")
    osnap = other.checkpoint({"x": 1})
    rec = cbor.decode(storage.read(record_path("r", 2)), what="rec")
    rec.update(snapshot=osnap.digest.raw, size=len(osnap.manifest.to_bytes()))
    overwrite(storage, record_path("r", 2), cbor.encode(rec))
    fails_cleanly(storage, CorruptSnapshot, lambda: store.read("r"), "'other'")
    fails_cleanly(storage, NotFound, lambda: store.read(snap.id), "never committed")


def test_uncommitted_manifest_is_not_a_snapshot(store: ckptfs.Store, storage: Storage) -> None:
    snap = populate(store)
    storage.delete(record_path("r", 2))  # as if the writer crashed before the commit point
    fails_cleanly(storage, NotFound, lambda: store.read(snap.id), "never committed")
    assert store.get("r").seq == 1


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


def test_noncanonical_manifest_is_refused(store: ckptfs.Store, storage: Storage) -> None:
    import cbor2

    from ckptfs.format.digest import Digest

    run = store.start_run("n")
    snap = run.checkpoint({"x": 1})
    loose = cbor2.dumps(snap.manifest.to_cbor())  # same content, insertion key order
    assert loose != snap.manifest.to_bytes()
    d = Digest.of(loose)
    storage.write(snapshot_path(d), framing.frame(loose))
    rec = cbor.decode(storage.read(record_path("n", 1)), what="rec")
    rec.update(snapshot=d.raw, size=len(loose))
    overwrite(storage, record_path("n", 1), cbor.encode(rec))
    fails_cleanly(storage, FormatError, lambda: store.read("n"), "canonical")


def test_a_non_canonical_run_record_is_reported_as_such(tmp_path: Path) -> None:
    import cbor2

    from ckptfs.errors import NonCanonical

    store = ckptfs.open_store(str(tmp_path / "s"))
    store.start_run("r").checkpoint({"x": 1})
    path = tmp_path / "s" / "runs" / "r" / ("0" * 19 + "1")
    fields = cbor2.loads(path.read_bytes())
    reordered = dict(reversed(list(fields.items())))  # same map, keys out of canonical order
    path.write_bytes(cbor2.dumps(reordered))
    with pytest.raises(NonCanonical):
        store.repo.record("r", 1)
