"""Streamed blobs (ckptfs/store/blobs.py): the windowed writer stores what the reference
chunker cuts, its worker threads' failures reach the caller and leave no partial pack, and the
reader still detects a damaged chunk and a whole-content mismatch. Real local disk only."""

from __future__ import annotations

import io
import os
import random
from pathlib import Path
from typing import Any

import attrs
import pytest

import ckptfs
from ckptfs.errors import CorruptSnapshot, StorageError
from ckptfs.format import containers as ct
from ckptfs.format import framing
from ckptfs.format.cdc import ChunkerParams, cut_lengths_py
from ckptfs.format.containers import PackHeader
from ckptfs.format.digest import Digest
from ckptfs.format.models import Captured, ChunkRef
from ckptfs.format.pack_parts import pack_parts
from ckptfs.storage import local_os as los
from ckptfs.store import blobs
from ckptfs.store.blobs import read_stream

#: small chunks (many per window) so that windows and carries are exercised on little data
SMALL = ChunkerParams(min_size=256, avg_size=1024, max_size=4096)


def _data(n: int, seed: int = 1) -> bytes:
    """Half random, half repetitive text (both codecs, and a repeated chunk deduplicated)."""
    rnd = random.Random(seed).randbytes(n // 2)
    text = (b"the same line of text again and again %d\n" * (n // 80 + 1))[: n - n // 2]
    return rnd + text


def _store(tmp_path: Path, name: str = "s") -> ckptfs.Store:
    return ckptfs.open_store(str(tmp_path / name), chunker=SMALL)


def _packs(root: Path) -> list[Path]:
    return sorted(p for p in (root / "packs").rglob("*") if p.is_file())


@pytest.fixture
def small_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows of 16 KiB (4 x max_size): a 200 KiB blob crosses a dozen window boundaries."""
    monkeypatch.setattr(blobs, "WINDOW", 16 * 1024)


@pytest.mark.parametrize("size", [0, 1, 255, 4096, 16 * 1024, 16 * 1024 + 1, 200_000])
def test_windowed_cuts_match_the_reference_chunker(tmp_path: Path, small_window: None,
                                                   size: int) -> None:
    data = _data(size)
    s = _store(tmp_path)
    s.start_run("r").checkpoint({"b": ckptfs.Blob(io.BytesIO(data))})
    entry = s.read("r")["b"]
    assert [c.size for c in entry.chunks] == cut_lengths_py(data, SMALL)
    pos = 0
    for c in entry.chunks:  # the same chunk digests as cutting the whole buffer at once
        assert c.digest == Digest.of(data[pos:pos + c.size])
        pos += c.size
    assert entry.digest == Digest.of(data) and entry.size == size
    assert entry.read() == data
    s.close()


def test_every_pack_of_a_streamed_blob_is_a_whole_container(tmp_path: Path,
                                                             small_window: None) -> None:
    data = _data(300_000, seed=2)
    s = _store(tmp_path)
    s.start_run("r").checkpoint({"b": ckptfs.Blob(io.BytesIO(data))})
    s.close()
    packs = _packs(tmp_path / "s")
    assert len(packs) > 1  # one pack (or more) per window
    held = 0
    for p in packs:
        raw = p.read_bytes()
        assert p.name == Digest.of(raw).hex  # named by the digest of the whole file
        c = ct.decode(raw, what=str(p))
        for b in c.header.bodies:
            body = c.body_bytes(raw, b)
            assert Digest.of(framing.unframe(body, b.size, what="body")) == b.digest
            held += 1
    assert held == len({c.digest for c in ckptfs.open_store(str(tmp_path / "s"))
                        .read("r")["b"].chunks})  # each chunk stored once


def test_pack_parts_are_the_bytes_encode_pack_makes() -> None:
    chunks = [_data(5000, seed=i) for i in range(4)] + [os.urandom(70_000)]
    bodies = []
    for c in chunks:
        codec, payload = framing.frame_parts(c)
        assert codec + payload == framing.frame(c)
        bodies.append((Digest.of(c), len(c), codec, memoryview(payload)))
    p = pack_parts(bodies, created=123, writer="w")
    table, area, n = ct.layout_parts([(d, size, codec + bytes(pl))
                                      for d, size, codec, pl in bodies])
    data, name, start = ct.encode_pack(PackHeader(created=123, writer="w", bodies=table,
                                                  body_length=n), area)
    assert b"".join(p.parts) == data and p.name == name and p.start == start
    assert p.bodies == table and p.size == len(data)


def test_write_all_splits_parts_over_iov_max(tmp_path: Path) -> None:
    parts: list[bytes | memoryview] = [os.urandom(i % 7 + 1) for i in range(3000)]
    parts += [b"", memoryview(os.urandom(1 << 20))[3:]]
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
    try:
        los.write_all(fd, parts)
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == b"".join(parts)


def test_read_range_into_reads_up_to_the_end(tmp_path: Path) -> None:
    s = ckptfs.open_store(str(tmp_path / "s"))
    storage = s.storage
    data = os.urandom(10_000)
    storage.write("chunks/ab/" + "ab" * 32, data)
    buf = bytearray(6000)
    assert storage.read_range_into("chunks/ab/" + "ab" * 32, 8000, memoryview(buf)) == 2000
    assert bytes(buf[:2000]) == data[8000:]
    with pytest.raises(FileNotFoundError):
        storage.read_range_into("chunks/cd/" + "cd" * 32, 0, memoryview(buf))


class _Failing(io.RawIOBase):
    """A source that fails after ``ok`` bytes (a disk error mid-blob)."""

    def __init__(self, data: bytes, ok: int) -> None:
        self.data, self.ok, self.pos = data, ok, 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        if self.pos >= self.ok:
            raise OSError(5, "Input/output error (test)")
        n = min(len(b), self.ok - self.pos)
        b[:n] = self.data[self.pos:self.pos + n]
        self.pos += n
        return n


def test_a_source_error_mid_blob_propagates_and_leaves_only_whole_packs(
        tmp_path: Path, small_window: None) -> None:
    data = _data(200_000, seed=3)
    s = _store(tmp_path)
    run = s.start_run("r")
    with pytest.raises(OSError, match="test"):
        run.checkpoint({"b": ckptfs.Blob(_Failing(data, 100_000))})  # type: ignore[arg-type]
    s.close()
    root = tmp_path / "s"
    for p in _packs(root):  # the packs written before the error are complete (garbage for gc)
        ct.decode(p.read_bytes(), what=str(p))
    assert not [p for p in (root / "tmp").rglob("*") if p.is_file()]
    assert not (root / "runs" / "r").exists() or not any((root / "runs" / "r").iterdir())


def test_a_pack_write_failing_in_the_worker_reaches_the_caller(tmp_path: Path,
                                                              small_window: None) -> None:
    s = _store(tmp_path)
    s.start_run("setup").checkpoint({"x": 1})  # creates the store
    (tmp_path / "s" / "packs").write_bytes(b"not a folder")  # every pack write fails
    with pytest.raises(StorageError):
        s.start_run("r").checkpoint({"b": ckptfs.Blob(io.BytesIO(_data(200_000, seed=4)))})
    s.close()
    assert (tmp_path / "s" / "packs").read_bytes() == b"not a folder"
    assert not [p for p in (tmp_path / "s" / "tmp").rglob("*") if p.is_file()]


def test_a_framing_failure_in_the_store_worker_reaches_the_caller(
        tmp_path: Path, small_window: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure in the store worker (framing a chunk, mid-blob) reaches the caller, and no
    temp file or partial pack is left."""
    s = _store(tmp_path)
    s.start_run("setup").checkpoint({"x": 1})
    calls = [0]
    real = framing.frame_parts

    def failing(data: Any, **k: Any) -> Any:
        calls[0] += 1
        if calls[0] == 60:
            raise MemoryError("test: framing failed")
        return real(data, **k)

    monkeypatch.setattr(framing, "frame_parts", failing)
    with pytest.raises(MemoryError, match="test: framing failed"):
        s.start_run("r").checkpoint({"b": ckptfs.Blob(io.BytesIO(_data(200_000, seed=8)))})
    s.close()
    assert calls[0] >= 60  # later windows may be framed before the failure is seen
    root = tmp_path / "s"
    for p in _packs(root):
        ct.decode(p.read_bytes(), what=str(p))
    assert not [p for p in (root / "tmp").rglob("*") if p.is_file()]


def test_a_flipped_byte_in_a_pack_is_corrupt_on_read(tmp_path: Path,
                                                     small_window: None) -> None:
    data = os.urandom(100_000)  # raw bodies: the reader verifies them from views
    s = _store(tmp_path)
    s.start_run("r").checkpoint({"b": ckptfs.Blob(io.BytesIO(data))})
    s.close()
    pack = _packs(tmp_path / "s")[-1]
    raw = bytearray(pack.read_bytes())
    c = ct.decode(bytes(raw), what="p")
    b = c.header.bodies[len(c.header.bodies) // 2]
    raw[c.body_start + b.offset + 1 + b.size // 2] ^= 0x40
    os.chmod(pack, 0o644)
    pack.write_bytes(bytes(raw))
    blob = ckptfs.open_store(str(tmp_path / "s")).read("r")["b"]
    with pytest.raises(CorruptSnapshot, match="does not match its digest"):
        for _ in blob.iter_bytes():
            pass


def test_whole_content_mismatch_is_reported_before_the_stream_ends(tmp_path: Path) -> None:
    data = _data(50_000, seed=5)
    s = _store(tmp_path)
    s.start_run("r").checkpoint({"b": ckptfs.Blob(io.BytesIO(data))})
    s.close()
    fresh = ckptfs.open_store(str(tmp_path / "s"))
    blob = fresh.read("r")["b"]
    chunks = tuple(ChunkRef(c.digest, c.size) for c in blob.chunks)
    bad = Captured(kind="blob", type=blob.type, size=blob.size, digest=Digest.of(b"other"),
                   chunks=chunks, labels={})
    got = []
    with pytest.raises(CorruptSnapshot, match="entry digest"):
        for piece in read_stream(fresh.repo.objects, bad, where="t"):
            got.append(piece)
    assert b"".join(got) == data  # every chunk verified; the mismatch came at the end


def test_a_source_without_readinto_is_read_whole(tmp_path: Path, small_window: None) -> None:
    data = _data(60_000, seed=7)

    @attrs.define
    class Reader:
        buf: io.BytesIO

        def read(self, n: int = -1) -> bytes:
            return self.buf.read(min(n, 999) if n > 0 else n)

    s = _store(tmp_path)
    s.start_run("r").checkpoint({"b": ckptfs.Blob(Reader(io.BytesIO(data)))})  # type: ignore[arg-type]
    assert s.read("r")["b"].read() == data
    s.close()


@pytest.mark.parametrize("fail", ["writev", "fsync"])
def test_a_pack_whose_write_fails_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 fail: str) -> None:
    s = ckptfs.open_store(str(tmp_path / "s"))
    storage = s.storage
    storage.write("warm/up", b"creates tmp/")

    def boom(*a: object, **k: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, fail, boom)
    parts: list[bytes | memoryview] = [b"head", memoryview(os.urandom(5000)), b"tail"]
    with pytest.raises(StorageError, match="No space"):
        storage.stage_parts("packs/ab/" + "ab" * 32, parts).finish()
    assert not (tmp_path / "s" / "packs").exists()
    assert not [p for p in (tmp_path / "s" / "tmp").rglob("*") if p.is_file()]


def test_an_object_store_uploads_several_packs_at_once(small_window: None) -> None:
    # the sync worker used to upload one staged pack at a time on every backend: serial PUTs
    import threading
    import time
    import uuid

    s = ckptfs.open_store(f"memory://blobs-{uuid.uuid4().hex}", chunker=SMALL)
    s.start_run("r").checkpoint({"x": 0})
    storage = s.repo.storage
    write = storage.write
    lock = threading.Lock()
    now = [0]
    most = [0]

    def slow_write(path: str, data: bytes) -> None:
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        try:
            time.sleep(0.05)  # a request's latency: the uploads can overlap
            write(path, data)
        finally:
            with lock:
                now[0] -= 1

    storage.write = slow_write  # type: ignore[method-assign]
    data = random.Random(3).randbytes(200_000)
    run = s.resume("r")
    run.checkpoint({"b": ckptfs.Blob(io.BytesIO(data))})
    assert 1 < most[0] <= storage.staged_workers
    assert ckptfs.open_store(storage.url).resume("r").state["b"].read() == data
