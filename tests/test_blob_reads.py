"""Reading a v2 blob back (ckptfs/store/blob_reads.py): damage anywhere in a large blob fails
the stream with the documented error before any byte of the damaged chunk (or of its window)
is handed out, on both read paths (local disk: a ``pread`` per body straight into the bytes
handed out; object stores: coalesced ranges into a buffer); the pipeline reads only a few
windows ahead and leaves no thread or descriptor behind. Real local disk only."""

from __future__ import annotations

import io
import os
import random
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import ckptfs
from ckptfs.errors import CorruptSnapshot, MissingObject, StorageError
from ckptfs.format import containers as ct
from ckptfs.format import framing
from ckptfs.format.cdc import ChunkerParams
from ckptfs.format.values import StoredBlob
from ckptfs.storage.base import Storage
from ckptfs.storage.local import LocalStorage
from ckptfs.store import blob_reads, blobs

SMALL = ChunkerParams(min_size=256, avg_size=1024, max_size=4096)
SIZE = 400_000


@pytest.fixture(params=["per-body", "ranges"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Small windows (packs and read windows of 16 KiB: a blob crosses many of each), read
    either way: local disk's per-body reads, or the ranged reads of a backend whose reads are
    requests (``Storage.open_ranges``' default)."""
    monkeypatch.setattr(blobs, "WINDOW", 16 * 1024)
    monkeypatch.setattr(blob_reads, "READ_WINDOW", 16 * 1024)
    if request.param == "ranges":
        monkeypatch.setattr(LocalStorage, "open_ranges", Storage.open_ranges)
    return str(request.param)


def _random(n: int, seed: int = 1) -> bytes:
    return random.Random(seed).randbytes(n)


def _text(n: int) -> bytes:
    """Numbered lines: every chunk differs, and zstd shrinks each (zstd bodies)."""
    return b"".join(b"line %d of a text that zstd shrinks well\n" % i
                    for i in range(n // 40 + 1))[:n]


def _write(tmp_path: Path, data: bytes) -> Path:
    s = ckptfs.open_store(str(tmp_path / "s"), chunker=SMALL)
    s.start_run("r").checkpoint({"b": ckptfs.Blob(io.BytesIO(data))})
    s.close()
    return tmp_path / "s"


def _blob(root: Path) -> StoredBlob:
    blob = ckptfs.open_store(str(root)).read("r")["b"]
    assert isinstance(blob, StoredBlob)
    return blob


def _bodies(root: Path) -> list[tuple[Path, int, ct.Body]]:
    """Every body of every pack: (pack file, absolute start of the body, its table row)."""
    out = []
    for pack in sorted(p for p in (root / "packs").rglob("*") if p.is_file()):
        c = ct.decode(pack.read_bytes(), what="p")
        out += [(pack, c.body_start + b.offset, b) for b in c.header.bodies]
    return out


def _damage(pack: Path, at: int, xor: int) -> None:
    raw = bytearray(pack.read_bytes())
    raw[at] ^= xor
    os.chmod(pack, 0o644)
    pack.write_bytes(bytes(raw))


def _offset_of(blob: StoredBlob, digest: ckptfs.Digest) -> int:
    """Where the first chunk ``digest`` starts in the content."""
    pos = 0
    for c in blob.chunks:
        if c.digest == digest:
            return pos
        pos += c.size
    raise AssertionError("not a chunk of the blob")


def _read_until_error(blob: StoredBlob) -> tuple[bytes, BaseException]:
    got = []
    with pytest.raises((CorruptSnapshot, MissingObject)) as e:
        for piece in blob.iter_bytes():
            got.append(piece)
    return b"".join(got), e.value


def _middle_body(root: Path, codec: int) -> tuple[Path, int, ct.Body]:
    bodies = [(p, at, b) for p, at, b in _bodies(root)
              if p.read_bytes()[at] == codec]
    assert len(bodies) > 20
    return bodies[len(bodies) // 2]


def test_a_large_blob_reads_back_whole(tmp_path: Path, path: str) -> None:
    data = _random(SIZE // 2) + _text(SIZE // 2)  # raw and zstd bodies, a repeated chunk
    blob = _blob(_write(tmp_path, data))
    assert len(list(blob.iter_bytes())) == len(blob.chunks)  # a piece per chunk
    assert blob.read() == data


@pytest.mark.parametrize("where", ["payload", "codec byte"])
def test_a_damaged_raw_body_mid_blob_fails_before_any_byte_of_it(tmp_path: Path, path: str,
                                                                 where: str) -> None:
    """A flipped payload byte, or a raw body's codec byte changed to zstd (its payload then
    still hashes right: only the codec check sees it): CorruptSnapshot naming the chunk, and
    what was handed out before is a prefix of the content ending before that chunk."""
    data = _random(SIZE)
    root = _write(tmp_path, data)
    pack, at, body = _middle_body(root, framing.CODEC_RAW)
    if where == "payload":
        _damage(pack, at + 1 + body.size // 2, 0x40)
    else:
        _damage(pack, at, framing.CODEC_ZSTD)  # 0x00 becomes 0x01
    blob = _blob(root)
    got, err = _read_until_error(blob)
    assert isinstance(err, CorruptSnapshot)
    assert str(body.digest) in str(err) and "does not match its digest" in str(err)
    assert data.startswith(got)
    assert len(got) <= _offset_of(blob, body.digest)


def test_a_damaged_zstd_body_mid_blob_fails_before_any_byte_of_it(tmp_path: Path,
                                                                  path: str) -> None:
    data = _text(SIZE)
    root = _write(tmp_path, data)
    pack, at, body = _middle_body(root, framing.CODEC_ZSTD)
    _damage(pack, at + body.stored // 2, 0x01)
    blob = _blob(root)
    got, err = _read_until_error(blob)
    assert isinstance(err, CorruptSnapshot) and str(body.digest) in str(err)
    assert data.startswith(got)
    assert len(got) <= _offset_of(blob, body.digest)


def test_a_pack_cut_short_is_corrupt(tmp_path: Path, path: str) -> None:
    """The last body of a pack lies past its end: the short read is not handed out."""
    data = _random(SIZE, seed=3)
    root = _write(tmp_path, data)
    pack, at, body = [x for x in _bodies(root) if x[0] == _bodies(root)[30][0]][-1]
    os.chmod(pack, 0o644)
    with open(pack, "r+b") as f:
        f.truncate(at + body.stored - 10)
    blob = _blob(root)
    got, err = _read_until_error(blob)
    assert isinstance(err, CorruptSnapshot) and str(body.digest) in str(err)
    assert data.startswith(got) and len(got) <= _offset_of(blob, body.digest)


def test_a_deleted_pack_is_missing(tmp_path: Path, path: str) -> None:
    data = _random(SIZE, seed=4)
    root = _write(tmp_path, data)
    pack, _, body = _bodies(root)[len(_bodies(root)) // 2]
    first = next(b for p, _, b in _bodies(root) if p == pack)
    os.chmod(pack.parent, 0o755)
    pack.unlink()
    blob = _blob(root)
    got, err = _read_until_error(blob)
    assert isinstance(err, MissingObject)
    assert data.startswith(got) and len(got) <= _offset_of(blob, first.digest)


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
def test_a_stream_dropped_early_reads_a_few_windows_and_leaves_nothing_open(
        tmp_path: Path, path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """After the first piece at most DEPTH + 1 windows were queued (memory stays bounded
    whatever the blob's size); closing the stream stops the workers and closes every pack."""
    root = _write(tmp_path, _random(SIZE, seed=5))
    blob = _blob(root)
    fetched = []
    real = blob_reads._fetch

    def counting(*args: object) -> object:
        fetched.append(1)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(blob_reads, "_fetch", counting)
    before = _fds()
    stream: Iterator[bytes] = blob.iter_bytes()
    next(stream)
    stream.close()  # type: ignore[attr-defined]
    assert 1 <= len(fetched) <= blob_reads.DEPTH + 1
    assert _fds() == before
    assert not [t for t in threading.enumerate() if t.name.startswith("ckptfs-blob-")]


@pytest.mark.parametrize("how", ["local", "default"])
def test_open_ranges_reads_ranges_of_one_object(tmp_path: Path, how: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """``read_into`` and ``read`` up to the end of the object (short there), from several
    threads; an absent object is FileNotFoundError (local disk: at the open), and a link in
    an object's place is refused at the open, as ``read`` refuses it."""
    if how == "default":
        monkeypatch.setattr(LocalStorage, "open_ranges", Storage.open_ranges)
    storage = ckptfs.open_store(str(tmp_path / "s")).storage
    data = os.urandom(100_000)
    name = "packs/ab/" + "ab" * 32
    storage.write(name, data)
    r = storage.open_ranges(name)
    try:
        assert r.per_call is (how == "local")
        buf = bytearray(6000)
        assert r.read_into(97_000, memoryview(buf)) == 3000 and bytes(buf[:3000]) == data[97_000:]
        assert r.read(99_990, 50) == data[99_990:] and r.read(200_000, 5) == b""
        got: dict[int, bytes] = {}
        threads = [threading.Thread(target=lambda i=i: got.__setitem__(
            i, r.read(i * 1000, 1000))) for i in range(50)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert b"".join(got[i] for i in range(50)) == data[:50_000]
    finally:
        r.close()
    with pytest.raises(FileNotFoundError):
        storage.open_ranges("packs/cd/" + "cd" * 32).read(0, 10)
    link = "packs/ef/" + "ef" * 32
    os.makedirs(tmp_path / "s" / "packs" / "ef", exist_ok=True)
    os.symlink(tmp_path / "s" / name, tmp_path / "s" / link)
    with pytest.raises(StorageError, match="symbolic link"):
        storage.open_ranges(link).read(0, 10)


def test_a_blob_over_many_packs_keeps_few_open_and_reopens_an_evicted_one(
        tmp_path: Path, path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A blob over dozens of packs, whose second half repeats its first (those chunks lie in
    the first packs, closed by then): at most MAX_OPEN idle packs plus those of the queued
    windows are open at once, every one is closed at the end, and the content is right."""
    monkeypatch.setattr(blob_reads, "MAX_OPEN", 2)
    half = _random(600_000, seed=9)
    data = half + half
    root = _write(tmp_path, data)
    assert len({p for p, _, _ in _bodies(root)}) > 30
    now, most, opened = [0], [0], [0]
    real = Storage.open_ranges if path == "ranges" else LocalStorage.open_ranges

    def tracked(self: Storage, name: str) -> object:
        r = real(self, name)  # type: ignore[arg-type]
        now[0] += 1
        opened[0] += 1
        most[0] = max(most[0], now[0])

        def close() -> None:
            now[0] -= 1
            r.close()

        return type(r)(read_into=r.read_into, read=r.read, close=close, per_call=r.per_call)

    monkeypatch.setattr(LocalStorage, "open_ranges", tracked)
    blob = _blob(root)
    assert blob.read() == data
    assert now[0] == 0
    packs = len({p for p, _, _ in _bodies(root)})
    assert opened[0] > packs  # the first packs were opened again for the repeated half
    assert most[0] <= 2 + (blob_reads.DEPTH + 1) * 3
