"""Content-defined chunking: FastCDC 2020 (normalized chunking level 1, gear seed 0).

Cut points match fastcdc-rs ``v2020`` and pyfastcdc. ``pyfastcdc`` (Cython) does the work; the
pure-Python ``cut_lengths_py`` is the executable definition used as fallback and for vectors.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import IO, Any

import attrs

from ckptfs.errors import FormatError, UnsupportedFeature

ALGORITHM = "fastcdc-2020"
_U64 = (1 << 64) - 1

try:  # pragma: no cover - exercised implicitly
    from pyfastcdc.cy import FastCDC as _FastCDC

    HAVE_NATIVE = True
except ImportError:  # pragma: no cover
    _FastCDC = None
    HAVE_NATIVE = False

from pyfastcdc.py.constants import GEAR as _GEAR_ARRAY
from pyfastcdc.py.constants import MASKS as _MASKS_ARRAY

GEAR: tuple[int, ...] = tuple(_GEAR_ARRAY)
MASKS: tuple[int, ...] = tuple(_MASKS_ARRAY)


@attrs.frozen(slots=True)
class ChunkerParams:
    """The chunker pinned in a store's config: every writer of a store cuts alike."""

    min_size: int = 16 * 1024
    avg_size: int = 64 * 1024
    max_size: int = 256 * 1024
    normalization: int = 1
    algorithm: str = ALGORITHM
    #: the gear seed: XORed into every gear table entry (fastcdc-rs / pyfastcdc ``seed``). 0 in
    #: plaintext stores; an encrypted store's writers use a secret 64-bit seed per key scope
    #: (spec/encryption.md 4.1), so chunk boundaries are not a public function of content.
    #: Not part of the config (``to_cbor``): readers never need it.
    seed: int = 0

    def __attrs_post_init__(self) -> None:
        if self.algorithm != ALGORITHM:
            raise UnsupportedFeature(
                f"unknown chunker algorithm {self.algorithm!r} (this ckptfs knows {ALGORITHM}); "
                "upgrade ckptfs to write to this store")
        if not (64 <= self.min_size <= 1 << 20 and 256 <= self.avg_size <= 1 << 22
                and 1024 <= self.max_size <= 1 << 24
                and self.min_size <= self.avg_size <= self.max_size):
            raise FormatError(
                f"chunker sizes out of range: min {self.min_size} (64..1 MiB), avg {self.avg_size} "
                f"(256..4 MiB), max {self.max_size} (1 KiB..16 MiB), and min <= avg <= max"
            )
        if not 0 <= self.seed < 1 << 63:
            raise FormatError("chunker seed must be an unsigned integer below 2^63")
        if self.normalization not in (0, 1, 2, 3):
            raise FormatError(f"chunker normalization must be 0..3, got {self.normalization}")

    def to_cbor(self) -> dict[str, Any]:
        return {"algorithm": self.algorithm, "min": self.min_size, "avg": self.avg_size,
                "max": self.max_size, "normalization": self.normalization}

    @classmethod
    def from_cbor(cls, m: Any) -> ChunkerParams:
        if not isinstance(m, dict) or set(m) != {"algorithm", "min", "avg", "max", "normalization"}:
            raise FormatError(f"store config: chunker must have exactly algorithm, min, avg, max, "
                              f"normalization; got {m!r:.200}")
        for k in ("min", "avg", "max", "normalization"):
            if type(m[k]) is not int:
                raise FormatError(f"store config: chunker {k} must be an integer")
        return cls(min_size=m["min"], avg_size=m["avg"], max_size=m["max"],
                   normalization=m["normalization"], algorithm=m["algorithm"])


def _masks(p: ChunkerParams) -> tuple[int, int]:
    bits = math.floor(math.log2(p.avg_size) + 0.5)
    return MASKS[bits + p.normalization], MASKS[bits - p.normalization]


def _cut_py(p: ChunkerParams, buf: bytes | memoryview, start: int, end: int) -> int:
    """Length of the chunk that starts at ``start`` (the FastCDC 2020 two-bytes-a-step loop)."""
    remaining = end - start
    if remaining <= p.min_size:
        return remaining
    center = p.avg_size
    if remaining > p.max_size:
        remaining = p.max_size
    elif remaining < center:
        center = remaining
    mask_s, mask_l = _masks(p)
    mask_s_ls, mask_l_ls = (mask_s << 1) & _U64, (mask_l << 1) & _U64
    gear = GEAR if not p.seed else tuple(g ^ p.seed for g in GEAR)
    h = 0
    pos = (p.min_size // 2) * 2
    mid = (center // 2) * 2
    stop = (remaining // 2) * 2
    while pos < stop:
        ms, ms_ls = (mask_s, mask_s_ls) if pos < mid else (mask_l, mask_l_ls)
        h = ((h << 2) + ((gear[buf[start + pos]] << 1) & _U64)) & _U64
        if h & ms_ls == 0:
            return pos
        h = (h + gear[buf[start + pos + 1]]) & _U64
        if h & ms == 0:
            return pos + 1
        pos += 2
    return remaining


def cut_lengths_py(data: bytes | memoryview, params: ChunkerParams) -> list[int]:
    """Chunk lengths of ``data`` (pure Python; slow, about 10 MB/s, but the reference)."""
    out: list[int] = []
    pos, n = 0, len(data)
    while pos < n:
        length = _cut_py(params, data, pos, n)
        out.append(length)
        pos += length
    return out


def native(params: ChunkerParams) -> Any:
    """pyfastcdc's compiled chunker for ``params`` (its ``cut_buf`` cuts a buffer in C without
    the GIL, yielding views), or None when the extension is not installed."""
    return _native(params) if HAVE_NATIVE else None


def _native(params: ChunkerParams) -> Any:
    return _FastCDC(params.avg_size, min_size=params.min_size, max_size=params.max_size,
                    normalized_chunking=params.normalization, seed=params.seed)


def cut_lengths(data: bytes | memoryview, params: ChunkerParams) -> list[int]:
    """Chunk lengths of ``data``: native when available, identical to ``cut_lengths_py``."""
    if not HAVE_NATIVE:
        return cut_lengths_py(data, params)
    return [c.length for c in _native(params).cut_buf(data)]


def iter_chunks(stream: IO[bytes], params: ChunkerParams) -> Iterator[bytes]:
    """Chunks of a stream, read piecewise: memory stays within a few ``max_size`` buffers."""
    if HAVE_NATIVE:
        for c in _native(params).cut_stream(stream):
            yield bytes(c.data)
        return
    buf = b""
    eof = False
    while True:
        while not eof and len(buf) < params.max_size * 2:
            piece = stream.read(1 << 20)
            if not piece:
                eof = True
            buf += piece
        if not buf:
            return
        length = _cut_py(params, buf, 0, len(buf) if eof else min(len(buf), params.max_size * 2))
        yield buf[:length]
        buf = buf[length:]
