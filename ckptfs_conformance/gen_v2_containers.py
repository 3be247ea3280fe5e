"""Container surgery for the version 2 vectors (spec/v2.md 3): take a container apart into its
header map and body area, put it together again (either header form), edit a header in place
with its digest recomputed, flip a bit, find a body. What the invalid vectors damage with.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import blake3
import cbor2

from ckptfs.format import cbor, framing
from ckptfs.format import containers as ct


def split(data: bytes) -> tuple[dict[str, Any], bytes]:
    """A container's header map (inflated first in form 0x03) and its body area."""
    hlen = int.from_bytes(data[9:13], "big")
    stored = data[13:13 + hlen]
    if data[8] == ct.CONTAINER_COMPRESSED:
        stored = framing.inflate_declared(memoryview(stored), ct.MAX_HEADER_SIZE, what="header")
    return cbor2.loads(stored), data[13 + hlen + 32:]


def form(data: bytes) -> int:
    """A container's form byte: 2 (header as is) or 3 (header a zstd frame, spec/v2.md 3.1)."""
    return data[8]


def join(header: dict[str, Any] | bytes, area: bytes, *, version: int = 2,
         hlen: int | None = None, digest: bytes | None = None) -> bytes:
    """A container from a header (a map, encoded canonically, or raw bytes) and a body area;
    ``version`` 3: the header bytes are stored as one zstd frame (form 0x03)."""
    h = cbor.encode(header) if isinstance(header, dict) else header
    if version == ct.CONTAINER_COMPRESSED:
        h = framing.deflate(h)
    return b"".join([ct.MAGIC, bytes([version]), (len(h) if hlen is None else hlen).to_bytes(
        4, "big"), h, blake3.blake3(h).digest() if digest is None else digest, area])


def edit(f: Path, change: Callable[[dict[str, Any], bytes], bytes | None]) -> None:
    """Rewrite container ``f``: ``change`` edits its header map in place and may return a new
    body area; the header digest is recomputed (so only the edited rule is broken) and the
    header keeps its form (a compressed header is compressed again)."""
    data = f.read_bytes()
    h, area = split(data)
    new = change(h, area)
    f.write_bytes(join(h, area if new is None else new, version=form(data)))


def flip(f: Path, at: int) -> None:
    """Flip the lowest bit of byte ``at`` of file ``f``."""
    b = bytearray(f.read_bytes())
    b[at] ^= 0x01
    f.write_bytes(bytes(b))


def body_at(f: Path, i: int = 0) -> tuple[int, int]:
    """Absolute start and stored length of body ``i`` of container ``f``."""
    c = ct.decode(f.read_bytes(), what=str(f))
    b = c.header.bodies[i]
    return c.body_start + b.offset, b.stored
