"""Digests: BLAKE3-256 of the bytes, the 32-byte raw form and the ``blake3:<hex>`` text form."""

from __future__ import annotations

import blake3
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckptfs.errors import FormatError, InvalidName
from ckptfs.format.digest import Digest, hasher


@given(st.binary(max_size=4096))
def test_digest_is_blake3_256_of_the_bytes(data: bytes) -> None:
    d = Digest.of(data)
    assert d.raw == blake3.blake3(data).digest() and len(d.raw) == 32
    assert d.text == "blake3:" + d.raw.hex() and d.hex == d.raw.hex() and str(d) == d.text
    assert Digest.parse(d.text) == d == Digest.parse(d.hex)
    assert d.short == d.hex[:12]


@given(st.lists(st.binary(max_size=512), max_size=8))
def test_incremental_hasher_equals_one_shot(pieces: list[bytes]) -> None:
    h = hasher()
    for p in pieces:
        h.update(p)
    assert Digest(h.digest()) == Digest.of(b"".join(pieces))


def test_known_vector() -> None:
    # BLAKE3 of the empty input (from the BLAKE3 test vectors).
    assert Digest.of(b"").hex == "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"


@pytest.mark.parametrize("text", [
    "", "blake3:", "blake3:" + "0" * 63, "blake3:" + "0" * 65, "blake3:" + "A" * 64,
    "BLAKE3:" + "0" * 64, "sha256:" + "0" * 64, "blake3:" + "0" * 64 + "\n", "0" * 64 + "\n",
    " blake3:" + "0" * 64, "blake3:" + "g" * 64, "blake3: " + "0" * 63,
])
def test_parse_refuses_anything_but_the_text_form(text: str) -> None:
    # a caller's text that is no digest is a bad name (`path`, format.md 3.3; issue 16)
    with pytest.raises(InvalidName):
        Digest.parse(text)


@pytest.mark.parametrize("raw", [b"", b"\x00" * 31, b"\x00" * 33, bytearray(32), "0" * 32])
def test_raw_must_be_32_bytes(raw: object) -> None:
    with pytest.raises(FormatError):
        Digest(raw)  # type: ignore[arg-type]


def test_digests_order_by_raw_bytes() -> None:
    a, b = Digest(b"\x00" * 32), Digest(b"\x00" * 31 + b"\x01")
    assert a < b and sorted([b, a]) == [a, b]
