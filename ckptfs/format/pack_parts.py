"""A pack container as a list of parts (spec/v2.md 3.4), for blob streaming: no join.

``containers.encode_pack`` joins a pack's prefix, header and bodies into one bytes object
(a 16 MiB copy per pack). A streamed blob's bodies are views into its read window; this
module lays them out, encodes the header and names the pack (BLAKE3 of the whole file, hashed
part by part), leaving the bytes as parts that the storage writes with one ``writev``. The
result is byte for byte what ``containers.encode_pack`` makes of the same bodies.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import blake3

from ckptfs.format import containers as ct
from ckptfs.format.containers import Body, PackHeader
from ckptfs.format.digest import Digest

#: a body as (chunk digest, uncompressed size, codec byte, payload)
FramedParts = tuple[Digest, int, bytes, "bytes | memoryview"]


@attrs.frozen
class PackParts:
    """A pack ready to write: its parts in order, its name, its body table and where its body
    area starts in the file."""

    parts: list[bytes | memoryview]
    name: Digest
    bodies: tuple[Body, ...]
    start: int

    @property
    def size(self) -> int:
        return sum(len(p) for p in self.parts)


def pack_parts(bodies: Sequence[FramedParts], *, created: int, writer: str) -> PackParts:
    """Lay out ``bodies`` (back to back, in order) as one pack. Callers drop repeated digests
    first (a container holds each digest once)."""
    table = []
    parts: list[bytes | memoryview] = []
    offset = 0
    for d, size, codec, payload in bodies:
        stored = len(codec) + len(payload)
        table.append(Body(d, offset, stored, size))
        parts += (codec, payload)
        offset += stored
    prefix, start = ct.encode(PackHeader(created=created, writer=writer, bodies=tuple(table),
                                         body_length=offset).to_cbor(), b"")
    parts.insert(0, prefix)
    h = blake3.blake3()
    for p in parts:
        h.update(p)
    return PackParts(parts, Digest(h.digest()), tuple(table), start)
