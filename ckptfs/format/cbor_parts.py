"""Canonical CBOR assembled from already-encoded parts (heads, arrays and maps).

Canonical CBOR (RFC 8949 4.2.1, as ckptfs.format.cbor writes it) is compositional: definite
lengths, and a map's order depends on its keys' encodings only. So an array is its head and
its items' encodings; a map is its head and its ``key, value`` encodings sorted by encoded key
(for text keys the length-first order cbor2 uses). The commit path uses this to reuse the
encodings of unchanged parts (tests compare with ``cbor.encode`` of the whole).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ckptfs.format import cbor


def uint_head(major: int, n: int) -> bytes:
    """The canonical head of major type ``major`` with argument ``n`` (RFC 8949 3.1); with
    ``major`` 0 the encoding of the unsigned integer ``n``."""
    m = major << 5
    if n < 24:
        return bytes([m | n])
    if n < 1 << 8:
        return bytes([m | 24, n])
    if n < 1 << 16:
        return bytes([m | 25]) + n.to_bytes(2, "big")
    if n < 1 << 32:
        return bytes([m | 26]) + n.to_bytes(4, "big")
    return bytes([m | 27]) + n.to_bytes(8, "big")


def array_head(n: int) -> bytes:
    """The canonical CBOR head of an array of ``n`` items."""
    return uint_head(4, n)


def array_bytes(items: Iterable[bytes]) -> bytes:
    """The canonical CBOR array of already-encoded items."""
    parts = list(items)
    return array_head(len(parts)) + b"".join(parts)


#: encoded map keys (text is immutable: keyed by content); bounded, cleared when full
_KEYS: dict[str, bytes] = {}
_KEYS_MAX = 4096


def key_bytes(k: str) -> bytes:
    """The canonical encoding of the text map key ``k`` (remembered)."""
    got = _KEYS.get(k)
    if got is None or type(k) is not str:
        got = cbor.encode(k)
        if type(k) is str:
            if len(_KEYS) >= _KEYS_MAX:
                _KEYS.clear()
            _KEYS[k] = got
    return got


def map_bytes(parts: Mapping[str, bytes]) -> bytes:
    """The canonical CBOR map whose values are already encoded (``parts``: key -> bytes)."""
    keyed = sorted((key_bytes(k), v) for k, v in parts.items())
    return uint_head(5, len(keyed)) + b"".join(k + v for k, v in keyed)


__all__ = ["array_bytes", "array_head", "map_bytes", "uint_head"]
