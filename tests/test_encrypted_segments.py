"""Segmented sealing (spec/encryption.md 5.1 layout 2, issue 33 W2): a range of a sealed
object opens from the segments that hold it, equals the plaintext's range, and never returns
bytes that did not authenticate; stores of layout 1 still read."""

from __future__ import annotations

import io
import os
import random
from pathlib import Path
from typing import Any

import pytest

import ckptfs
from ckptfs.format import crypto, crypto_stream as cs
from ckptfs.format.crypto import DecryptionError

KEY, STORE, SCOPE = bytes(range(32)), bytes(16), bytes(range(16))
PATH = "packs/ab/" + "ab" * 32
S = cs.SEGMENT


def sealed(n: int) -> tuple[bytes, bytes]:
    plain = random.Random(n).randbytes(n)
    return plain, cs.seal(KEY, store_id=STORE, scope_id=SCOPE, path=PATH, plaintext=plain)


def opener(data: bytes) -> cs.Opener:
    return cs.Opener(KEY, data[:cs.HEADER_SIZE], store_id=STORE, path=PATH)


def ranged(data: bytes, start: int, end: int) -> tuple[bytes, bytes]:
    """``[start, end)`` through ``open_range`` and through ``open_into``."""
    first, a, b = cs.span(start, end)
    op = opener(data)
    buf = bytearray(end - start)
    got = op.open_into(first, data[a:b], start, memoryview(buf))
    return op.open_range(first, data[a:b], start, end), bytes(buf[:got])


@pytest.mark.parametrize("n", [0, 1, S - 1, S, S + 1, 3 * S, 3 * S + 7])
def test_sizes_round_trip(n: int) -> None:
    plain, data = sealed(n)
    assert len(data) == cs.sealed_size(n) and cs.plain_size(len(data)) == n
    assert cs.open_sealed(KEY, data, store_id=STORE, path=PATH) == plain
    assert len(data) - n == crypto.OVERHEAD + crypto.TAG_SIZE * (cs.segments(n) - 1)


def test_ranges_equal_the_plaintext_ranges() -> None:
    plain, data = sealed(3 * S + 1234)
    rnd = random.Random(7)
    cases = [(0, 1), (0, S), (S - 1, S + 1), (S, 2 * S), (3 * S, 3 * S + 1234),
             (3 * S + 1000, 4 * S), (5 * S, 6 * S), (10, 3 * S + 1234)]
    cases += [tuple(sorted((rnd.randrange(len(plain)), rnd.randrange(len(plain) + 100))))
              for _ in range(200)]
    for start, end in cases:
        if end <= start:
            continue
        a, b = ranged(data, start, end)
        assert a == b == plain[start:end], (start, end)


def test_a_range_reads_only_its_segments() -> None:
    _, data = sealed(8 * S)
    first, a, b = cs.span(3 * S + 10, 3 * S + 4000)
    assert (first, b - a) == (3, S + 16)
    first, a, b = cs.span(S - 10, S + 10)
    assert (first, b - a) == (0, 2 * (S + 16))


def test_truncated_reordered_extended_tampered_fail() -> None:
    plain, data = sealed(3 * S)  # the final segment is a full one
    hs, seg = cs.HEADER_SIZE, cs.SEALED_SEGMENT
    segs = [data[hs + i * seg:hs + (i + 1) * seg] for i in range(3)]
    bad = {"drop-last": data[:hs] + segs[0] + segs[1],
           "swap": data[:hs] + segs[1] + segs[0] + segs[2],
           "append": data + segs[1],
           "header-only": data[:hs],
           "cut": data[:-3]}
    for why, b in bad.items():
        with pytest.raises(DecryptionError):
            cs.open_sealed(KEY, b, store_id=STORE, path=PATH)
    # ranges: a swapped segment is refused; a dropped final segment ends the range early
    # with authenticated bytes only (the caller's length and digest checks then fail)
    with pytest.raises(DecryptionError):
        ranged(bad["swap"], 0, 10)
    got, got_into = ranged(bad["drop-last"], S, 3 * S)
    assert got == got_into == plain[S:2 * S]
    flipped = bytearray(data)
    flipped[hs + seg + 100] ^= 1
    op = opener(bytes(flipped))
    buf = bytearray(b"\xee" * (2 * S))
    first, a, b = cs.span(0, 2 * S)
    with pytest.raises(DecryptionError):
        op.open_into(first, bytes(flipped)[a:b], 0, memoryview(buf))
    assert buf == bytes(2 * S)  # nothing unauthenticated left in the caller's buffer
    with pytest.raises(DecryptionError):
        cs.open_sealed(KEY, data, store_id=STORE, path="packs/cd/" + "cd" * 32)


class Counting:
    """Counts the stored bytes the encryption layer reads through its inner storage."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.bytes = inner, 0

    def wrap(self, name: str) -> None:
        real = getattr(self.inner, name)

        def counted(*a: Any) -> Any:
            got = real(*a)
            if name == "read_range":
                self.bytes += len(got)
            elif name == "read":
                self.bytes += len(got)
            return got

        setattr(self.inner, name, counted)


def test_store_reads_a_range_of_a_pack_by_its_segments(tmp_path: Path) -> None:
    url, ring = str(tmp_path / "s"), str(tmp_path / "ring")
    blob = os.urandom(6 << 20)
    st = ckptfs.open_store(url, keyring=ring)
    st.start_run("w2").checkpoint({"blob": ckptfs.Blob(io.BytesIO(blob))})
    st2 = ckptfs.open_store(url, keyring=ring)
    enc = st2.storage
    packs = [p for p in enc.scan("packs")]  # type: ignore[attr-defined]
    assert packs
    pack = max(packs, key=lambda p: enc.size(p))  # type: ignore[attr-defined]
    size = enc.size(pack)  # type: ignore[attr-defined]
    whole = enc.read(pack)  # type: ignore[attr-defined]
    assert len(whole) == size > 4 * S
    st3 = ckptfs.open_store(url, keyring=ring)
    count = Counting(st3.storage.inner)  # type: ignore[attr-defined]
    for name in ("read", "read_range"):  # (local read_ranges reads by read_range)
        count.wrap(name)
    mid = size // 2
    assert st3.storage.read_range(pack, mid, mid + 100) == whole[mid:mid + 100]
    assert 0 < count.bytes <= 2 * (S + 16) + cs.HEADER_SIZE  # not the pack: its segments
    reader = st3.storage.open_ranges(pack)
    buf = bytearray(3 * S)
    try:
        n = reader.read_into(S + 5, memoryview(buf))
        assert bytes(buf[:n]) == whole[S + 5:4 * S + 5]
        assert reader.read(size - 10, 100) == whole[-10:]
    finally:
        reader.close()
    # the blob reads back whole and verified through the segmented reader
    got = b"".join(st3.read("w2")["blob"].iter_bytes())
    assert got == blob


def test_layout_1_objects_still_read(tmp_path: Path) -> None:
    """A store written before layout 2 (every object ``CKE 0x01``): a record resealed as
    layout 1 reads whole and by range."""
    url, ring = str(tmp_path / "s"), str(tmp_path / "ring")
    st = ckptfs.open_store(url, keyring=ring)
    st.start_run("r").checkpoint({"v": "x" * 100_000})
    enc: Any = st.storage
    recs = [p for p in enc.scan("runs") if p.rsplit("/", 1)[-1].isdigit()]
    assert recs
    for p in recs:
        plain = enc.read(p)
        scope = enc.scope_of(p)
        old = crypto.seal(scope.key, store_id=enc.store_id, scope_id=scope.id, path=p,
                          plaintext=plain)
        enc.inner.replace(enc.out(p), old)
    again = ckptfs.open_store(url, keyring=ring)
    assert again.read("r") == {"v": "x" * 100_000}
    e2: Any = again.storage
    assert e2.read_range(recs[0], 3, 50) == enc.read(recs[0])[3:50]
