"""Listing the objects of a store: the one place that decides which names under ``chunks/`` and
``snapshots/`` are objects.

format.md 3.1: an object's name is its digest as 64 lowercase hex digits, inside the fan-out
folder of its first two. Any other name there (a ``.DS_Store``, an rsync temp file
``.<name>.XyZ12``, an uppercase or ``blake3:``-prefixed copy, a file in the wrong fan-out
folder) is not an object: readers and maintenance MUST ignore it, never parse it, never act on
it. Every walk over those folders goes through ``object_paths``.
"""

from __future__ import annotations

import re

from ckptfs.format.digest import Digest
from ckptfs.storage.base import Storage

_FAN = re.compile(r"[0-9a-f]{2}\Z")
_HEX = re.compile(r"[0-9a-f]{64}\Z")


def object_digest(fan: str, name: str) -> Digest | None:
    """The digest a name ``<fan>/<name>`` stands for, or None when it is no object's name."""
    if _FAN.match(fan) and _HEX.match(name) and name.startswith(fan):
        return Digest(bytes.fromhex(name))
    return None


def object_paths(storage: Storage, top: str) -> list[tuple[str, Digest]]:
    """``(path, digest)`` of every object under ``top`` (``chunks`` or ``snapshots``), sorted
    by path; names that are no object's are skipped (two listing levels, like the fan-out)."""
    out = []
    for fan in storage.list(top):
        if not _FAN.match(fan):
            continue
        for name in storage.list(f"{top}/{fan}"):
            d = object_digest(fan, name)
            if d is not None:
                out.append((f"{top}/{fan}/{name}", d))
    return out
