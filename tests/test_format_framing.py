"""Object framing: codec byte, raw or one zstd frame, exact size, no inflation past it."""

from __future__ import annotations

import os
import tracemalloc

import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from ckptfs.errors import CorruptObject
from ckptfs.format import framing


@given(st.binary(max_size=5000) | st.text(max_size=2000).map(lambda t: (t * 5).encode()))
def test_round_trip(data: bytes) -> None:
    stored = framing.frame(data)
    assert stored[0] in (framing.CODEC_RAW, framing.CODEC_ZSTD)
    assert framing.unframe(stored, len(data), what="x") == data
    raw = framing.frame(data, compress=False)
    assert raw == b"\x00" + data and framing.unframe(raw, len(data), what="x") == data


def test_compressible_data_is_zstd_with_content_size() -> None:
    data = b"hello world " * 1000
    stored = framing.frame(data)
    assert stored[0] == framing.CODEC_ZSTD and len(stored) < len(data) // 10
    assert zstandard.frame_content_size(stored[1:]) == len(data)


def test_frame_is_deterministic() -> None:
    data = b"abc" * 5000
    assert framing.frame(data) == framing.frame(bytes(data))


def test_incompressible_data_stays_raw() -> None:
    data = os.urandom(4096)
    assert framing.frame(data)[0] == framing.CODEC_RAW


@pytest.mark.parametrize("stored,size", [
    (b"", 0),  # no codec byte
    (b"\x02abc", 3),  # unknown codec
    (b"\xffabc", 3),
    (b"\x00abc", 4),  # raw: size disagrees
    (b"\x00abcd", 3),
    (b"\x01", 0),  # zstd: no frame at all
    (b"\x01\x28\xb5\x2f", 10),  # truncated magic
])
def test_bad_frames(stored: bytes, size: int) -> None:
    with pytest.raises(CorruptObject):
        framing.unframe(stored, size, what="x")


def test_truncated_zstd_frame() -> None:
    data = b"some text " * 500
    stored = framing.frame(data)
    for cut in (len(stored) - 1, len(stored) // 2, 6):
        with pytest.raises(CorruptObject):
            framing.unframe(stored[:cut], len(data), what="x")


def test_zstd_frame_with_a_different_declared_size() -> None:
    data = b"abc" * 1000
    stored = framing.frame(data)
    with pytest.raises(CorruptObject, match="declares"):
        framing.unframe(stored, len(data) - 1, what="x")


def test_zstd_frame_without_content_size_is_rejected() -> None:
    data = b"abc" * 1000
    z = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    body = z.compress(data) + z.flush()
    assert zstandard.frame_content_size(body) == -1
    with pytest.raises(CorruptObject, match="content size"):
        framing.unframe(b"\x01" + body, len(data), what="x")


def _zero_frame(real_size: int, claimed: int | None) -> bytes:
    """A zstd frame of ``real_size`` zero bytes whose header claims ``claimed`` bytes (None: no
    content size at all)."""
    cobj = zstandard.ZstdCompressor(level=1, write_content_size=False,
                                    write_checksum=False).compressobj()
    block = bytes(1 << 20)
    body = b"".join(cobj.compress(block) for _ in range(real_size >> 20)) + cobj.flush()
    if claimed is None:
        return body
    fhd = body[4]
    assert fhd & 0xC3 == 0 and not fhd & 0x20  # no FCS, no dict id, not single-segment
    # FCS field of 2 bytes (flag 1) stores claimed - 256, little-endian, after the window byte.
    assert 256 <= claimed < 65536 + 256
    return body[:4] + bytes([fhd | 0x40]) + body[5:6] + (claimed - 256).to_bytes(2, "little") \
        + body[6:]


@pytest.mark.parametrize("claimed", [None, 1000])
def test_bomb_is_refused_without_inflating_it(claimed: int | None) -> None:
    size = 1000  # what the manifest declares
    stored = b"\x01" + _zero_frame(64 << 20, claimed)
    assert len(stored) < 64 * 1024
    tracemalloc.start()
    try:
        with pytest.raises(CorruptObject):
            framing.unframe(stored, size, what="bomb")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"inflating allocated {peak} bytes"


def test_frame_is_safe_from_many_threads() -> None:
    """A compressor shared between threads crashed the interpreter (seen under LangGraph's
    worker threads); each thread must get its own."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    from ckptfs.format.framing import frame, unframe

    payloads = [os.urandom(512) * (i % 7 + 1) for i in range(64)]

    def work(p: bytes) -> bool:
        return all(unframe(frame(p), len(p), what="t") == p for _ in range(50))

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(work, payloads))
