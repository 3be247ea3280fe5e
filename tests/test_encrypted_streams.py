"""Blob streams of an encrypted store (issue 33 W2, ``storage/encrypted_whole``): a stream that
reads much of a pack opens it whole, once (its bodies lie in random order, spec/encryption.md
5.3, so reading them by segments read and decrypted most segments twice), and still returns
nothing that did not authenticate: a pack with a flipped, dropped or swapped segment fails the
stream before any byte of it is handed out."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import pytest

import ckptfs
from ckptfs.errors import CorruptObject
from ckptfs.format import crypto_stream as cs
from ckptfs.storage.base import RangeReader
from ckptfs.storage.encrypted_whole import WHOLE_MIN, WholeObjects

MIB = 1 << 20


def _store(tmp_path: Path, size: int) -> tuple[str, str, bytes]:
    url, ring = str(tmp_path / "s"), str(tmp_path / "ring")
    blob = os.urandom(size)
    ckptfs.open_store(url, keyring=ring).start_run("w2").checkpoint(
        {"blob": ckptfs.Blob(io.BytesIO(blob))})
    return url, ring, blob


def _packs(enc: Any) -> dict[str, int]:
    """Plaintext path -> stored (sealed) size of every pack."""
    return {p: enc.inner.size(enc.out(p)) for p in enc.scan("packs")}


class _CountingReads:
    """Counts the sealed bytes the encryption layer reads from its inner (local) storage."""

    def __init__(self, inner: Any) -> None:
        self.bytes = 0
        real = inner.open_ranges

        def open_ranges(path: str) -> RangeReader:
            r = real(path)

            def read_into(start: int, buf: memoryview) -> int:
                n: int = r.read_into(start, buf)
                self.bytes += n
                return n

            def read(start: int, n: int) -> bytes:
                got: bytes = r.read(start, n)
                self.bytes += len(got)
                return got

            return RangeReader(read_into=read_into, read=read, close=r.close,
                               per_call=r.per_call)

        inner.open_ranges = open_ranges
        for name in ("read", "read_range"):
            fn = getattr(inner, name)

            def counted(*a: Any, _fn: Any = fn) -> Any:
                got = _fn(*a)
                self.bytes += len(got)
                return got

            setattr(inner, name, counted)


def test_a_stream_reads_each_pack_once(tmp_path: Path) -> None:
    """A 40 MiB blob (three packs) streams back reading each sealed pack once: before, its
    scattered bodies were read segment by segment per window, 1.45x the packs' bytes."""
    url, ring, blob = _store(tmp_path, 40 * MIB)
    st = ckptfs.open_store(url, keyring=ring)
    packs = _packs(st.storage)
    assert len(packs) >= 2
    count = _CountingReads(st.storage.inner)  # type: ignore[attr-defined]
    got = b"".join(st.read("w2")["blob"].iter_bytes())
    assert got == blob
    assert sum(packs.values()) <= count.bytes <= sum(packs.values()) + 64 * 1024


@pytest.mark.parametrize("damage", ["flip-first", "flip-last", "drop-last", "swap", "cut"])
def test_a_damaged_pack_fails_the_stream_before_its_bytes(tmp_path: Path, damage: str) -> None:
    """Every way a sealed pack can be damaged fails the stream (CorruptObject) before any
    chunk of it is handed out: the pieces yielded are a prefix of the blob taken only from
    the packs before the damaged one."""
    url, ring, blob = _store(tmp_path, 40 * MIB)
    st = ckptfs.open_store(url, keyring=ring)
    enc: Any = st.storage
    packs = _packs(enc)
    victim = max(packs, key=lambda p: packs[p])
    stored = enc.out(victim)
    data = bytearray(enc.inner.read(stored))
    hs, seg = cs.HEADER_SIZE, cs.SEALED_SEGMENT
    if damage == "flip-first":
        data[hs + 5] ^= 1
    elif damage == "flip-last":
        data[-3] ^= 1
    elif damage == "drop-last":
        data = data[:hs + (len(data) - hs - 1) // seg * seg]
    elif damage == "swap":
        data[hs:hs + 2 * seg] = data[hs + seg:hs + 2 * seg] + data[hs:hs + seg]
    else:
        data = data[:-100]
    enc.inner.replace(stored, bytes(data))
    out: list[bytes] = []
    fresh = ckptfs.open_store(url, keyring=ring)
    with pytest.raises(CorruptObject):
        for piece in fresh.read("w2")["blob"].iter_bytes():
            out.append(piece)
    got = b"".join(out)
    assert blob.startswith(got) and len(got) < len(blob)


def test_a_stream_of_a_few_bodies_of_a_pack_reads_segments(tmp_path: Path) -> None:
    """Below WHOLE_MIN a stream's reader opens ranges by their segments (not per call)."""
    url, ring, _ = _store(tmp_path, 20 * MIB)
    enc: Any = ckptfs.open_store(url, keyring=ring).storage
    pack = next(iter(_packs(enc)))
    small = enc.open_stream(pack, WHOLE_MIN - 1)
    big = enc.open_stream(pack, WHOLE_MIN)
    try:
        assert not small.per_call and big.per_call
        assert small.read(1000, 5000) == big.read(1000, 5000) == enc.read(pack)[1000:6000]
    finally:
        small.close()
        big.close()


def test_whole_objects_stay_bounded_and_reload(tmp_path: Path) -> None:
    """WholeObjects keeps at most its limit of plaintext (least recently used dropped); a
    dropped object is loaded again when read; a failed load is not kept; the last close
    drops everything."""
    loads: list[str] = []

    def loader(name: str, size: int) -> Any:
        def load(take: Any, give: Any) -> tuple[bytearray, int]:
            loads.append(name)
            if name == "bad":
                raise CorruptObject("refused")
            buf = take(size)
            buf[:size] = name.encode()[:1] * size
            return buf, size
        return load

    w = WholeObjects(limit=2 * MIB)
    for name in ("a", "b", "c"):
        w.opened(name, loader(name, MIB))
    assert w.read("a", loader("a", MIB), 10, 3) == b"aaa"
    assert w.read("b", loader("b", MIB), 0, 2) == b"bb"
    assert w.read("c", loader("c", MIB), MIB - 1, 5) == b"c"
    assert w.held <= 2 * MIB
    assert w.read("a", loader("a", MIB), 0, 1) == b"a"
    assert loads.count("a") == 2  # dropped for c, loaded again
    with pytest.raises(CorruptObject):
        w.read("bad", loader("bad", MIB), 0, 1)
    assert "bad" not in w.ready and "bad" not in w.loading
    for _ in range(3):
        w.closed()
    assert not w.ready and w.held == 0
