"""Listing the objects of a store: the one place that decides which names in a listing are
objects (chunks, manifests, packs, run records, forwards).

format.md 3.1, v2.md 3 and 8: an object's name is fixed by the format: a digest as 64 lowercase
hex digits inside the fan-out folder of its first two (``chunks/``, ``snapshots/``, ``packs/``),
a 20-digit seq inside a run's folder, ``moved/`` followed by the path of a container. Any other
name there (a ``.DS_Store``, an rsync temp file ``.<name>.XyZ12``, an editor's ``.x.swp`` or
``name~``, an uppercase or ``blake3:``-prefixed copy, a name too short, a file in the wrong
fan-out folder) is not an object: readers and maintenance MUST ignore it, never parse it as one,
never act on it and never delete it. Every walk over those folders goes through the parsers
here, which return None for such a name, and every caller skips None.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ckptfs.format.containers import ContainerRef, PackRef, RecordRef
from ckptfs.format.digest import Digest
from ckptfs.format.names import CHUNKS, MOVED, PACKS, RUN_ID, RUNS, SNAPSHOTS, parse_seq_name
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
    by path, from one listing of its files; names that are no object's are skipped, and so is
    a file where a fan-out folder belongs (it holds no object)."""
    found = ((p, loose_digest(p)) for p in storage.scan(top))
    return sorted((p, d) for p, d in found if d is not None)


def pack_ref(path: str) -> PackRef | None:
    """The pack ``packs/<xx>/<hex>`` names, or None when ``path`` is no pack's path."""
    parts = path.split("/")
    if len(parts) != 3 or parts[0] != PACKS:
        return None
    d = object_digest(parts[1], parts[2])
    return None if d is None else PackRef(d)


def record_ref(path: str) -> RecordRef | None:
    """The run record ``runs/<run>/<seq>`` names, or None when ``path`` is no record's path
    (a seq of 0 or above 2^64-1, a run id the format does not allow, a deeper name)."""
    parts = path.split("/")
    if len(parts) != 3 or parts[0] != RUNS:
        return None
    run, seq = parts[1], parse_seq_name(parts[2])
    if seq is None or seq < 1 or not RUN_ID.match(run) or run.endswith("."):
        return None
    return RecordRef(run, seq)


def container_ref(path: str) -> ContainerRef | None:
    """The container (pack or run record) a store path names, or None."""
    return pack_ref(path) or record_ref(path)


def forward_ref(path: str) -> ContainerRef | None:
    """The container whose forward ``moved/<container path>`` is, or None when ``path`` is no
    forward's path (spec/v2.md 8: a name under ``moved/`` that is not ``moved/`` followed by
    a pack's or a record's path is not a forward)."""
    top, _, rest = path.partition("/")
    return container_ref(rest) if top == MOVED else None


def loose_digest(path: str) -> Digest | None:
    """The digest a version 1 loose object's path ``chunks|snapshots/<xx>/<hex>`` names."""
    parts = path.split("/")
    return (object_digest(parts[1], parts[2])
            if len(parts) == 3 and parts[0] in (CHUNKS, SNAPSHOTS) else None)


#: the folders whose every name the format fixes, and the parser that accepts their objects
_PARSERS: dict[str, Callable[[str], object]] = {
    PACKS: pack_ref, MOVED: forward_ref, CHUNKS: loose_digest, SNAPSHOTS: loose_digest}


def foreign_names(storage: Storage) -> list[str]:
    """The files under ``packs/``, ``moved/``, ``chunks/`` and ``snapshots/`` that are not
    objects (one listing of each folder): ignored by every reader and by maintenance, which
    never deletes them; ``verify`` names them as notes, for the operator to remove."""
    out: list[str] = []
    for top, parse in _PARSERS.items():
        out += [p for p in storage.scan(top) if parse(p) is None]
    return sorted(out)
