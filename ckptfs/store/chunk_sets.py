"""The chunks a manifest names, as sets of raw digests, for the commit path.

``sweeps.named_chunks`` builds a ``Digest -> size`` dict by walking every chunk of every
entry, hashing each ``Digest`` through attrs' generated ``__hash__`` (a Python call per chunk),
and a commit asked for it three times (the grace rule's check of the new manifest and its
parent, the record's locators). Here the raw digests of a chunk list come from the manifest
encoder's chunk-list cache (ckptfs.format.chunk_lists: a grown list reuses the prefix of the
one it extends), and sets of bytes are built, differenced and looked up in C. Pure: no
storage access. The answers equal ``named_chunks``' keys (tests compare them).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping

import attrs

from ckptfs.format.chunk_lists import ChunkListCache
from ckptfs.format.containers import LOCATOR_PREFIX, Location
from ckptfs.format.digest import Digest
from ckptfs.format.ledger import LedgerRef
from ckptfs.format.models import Captured, Manifest
from ckptfs.store.sweeps import named_chunks

#: the last few manifests' answers, by identity (a commit asks for its new manifest's and its
#: parent's, the previous commit's new one): id -> (the manifest, kept alive; its raw digests)
_KEEP = 4
_RAWS: dict[int, tuple[Manifest, frozenset[bytes]]] = {}
_LOCK = threading.Lock()


def named_raws(manifest: Manifest, lists: ChunkListCache) -> frozenset[bytes]:
    """The raw digests of every chunk the manifest's entries and ledger name."""
    with _LOCK:
        hit = _RAWS.get(id(manifest))
    if hit is not None and hit[0] is manifest:
        return hit[1]
    out: set[bytes] = set()
    for e in manifest.entries.values():
        if isinstance(e, Captured) and e.chunks:
            out.update(lists.get(e.chunks).raws)
    if manifest.ledger is not None:
        out.update(c.digest.raw for c in LedgerRef.from_cbor(manifest.ledger).as_entry().chunks)
    got = frozenset(out)
    with _LOCK:
        while len(_RAWS) >= _KEEP:
            _RAWS.pop(next(iter(_RAWS)))
        _RAWS[id(manifest)] = (manifest, got)
    return got


def unprotected(manifest: Manifest, parent: Manifest | None, written: Iterable[Digest],
                mine: Callable[[Digest], bool], lists: ChunkListCache
                ) -> list[tuple[Digest, int]]:
    """``sweeps.unprotected`` (same answer, same order) from raw-digest sets: the chunks
    ``manifest`` names that this commit does not write, that its parent does not name while
    it is the same run's previous snapshot, and that this writer did not write recently.
    O(change) Python work when there are none (the usual commit)."""
    named = named_raws(manifest, lists)
    left: set[bytes] | frozenset[bytes] = named
    if parent is not None and parent.run == manifest.run and parent.seq == manifest.seq - 1:
        left = named - named_raws(parent, lists)
    if left:
        left = left - {d.raw for d in written}
    if not left:
        return []
    return [(d, n) for d, n in named_chunks(manifest).items()
            if d.raw in left and not mine(d)]


@attrs.frozen(eq=False)
class ParentChunks:
    """The chunks a commit may locate instead of writing because its parent, the run's
    previous snapshot, names them (spec/v2.md 5.2, retention.md 4.1): ``raw in`` it is true
    for a raw digest the parent's manifest names and its record
    locates (its body table or its locators, ``table``: the commit takes the locator from
    there). Held by reference: the parent's digest set (``named_raws``, which the commit
    computes anyway) and its record's remembered table; no index of its own, whatever the
    size of what the commit streams."""

    named: frozenset[bytes] = frozenset()
    #: the parent record's (bodies by raw digest, locators by raw digest or prefix); None
    #: without a parent (``NO_PARENT``)
    table: tuple[Mapping[bytes, Location], Mapping[bytes, Location]] | None = None

    def __contains__(self, raw: object) -> bool:
        if raw not in self.named:
            return False
        if self.table is None:
            return True
        exact, other = self.table
        assert isinstance(raw, bytes)
        return raw in exact or raw in other or raw[:LOCATOR_PREFIX] in other


#: a commit without a parent it may rely on (a run's first, a fork's first): nothing
NO_PARENT = ParentChunks()


__all__ = ["NO_PARENT", "ParentChunks", "named_raws", "unprotected"]
