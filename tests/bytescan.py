"""Byte scans for erasure proofs: every file of a store, read raw, as one zstd frame (a
compressed loose object or header) and every zstd frame found anywhere inside it (a framed
chunk body in a record or pack), so that content stored compressed is found too."""

from __future__ import annotations

import os

import zstandard

_MAGIC = b"\x28\xb5\x2f\xfd"
_CAP = 64 << 20


def _frames(data: bytes) -> list[bytes]:
    """What every zstd frame that starts somewhere in ``data`` decompresses to."""
    out = []
    at = data.find(_MAGIC)
    while at >= 0:
        try:
            d = zstandard.ZstdDecompressor().decompressobj()
            out.append(d.decompress(data[at:at + _CAP]))
        except zstandard.ZstdError:
            pass
        at = data.find(_MAGIC, at + 1)
    return out


def holds(data: bytes, marker: bytes) -> bool:
    """Whether ``data`` holds ``marker``, as is or inside a zstd frame."""
    return marker in data or any(marker in f for f in _frames(data))


def files_holding(root: str, marker: bytes) -> list[str]:
    """Every file under ``root`` (relative paths) whose bytes hold ``marker`` (``holds``)."""
    found = []
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            with open(p, "rb") as f:
                if holds(f.read(), marker):
                    found.append(os.path.relpath(p, root))
    return sorted(found)
