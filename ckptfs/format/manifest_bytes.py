"""Canonical manifest bytes assembled from cached parts, in time proportional to the change.

``Manifest.to_bytes()`` re-encodes (and re-checks) every entry's chunk list at every commit:
O(chunks) Python work per step although only the appended-to entry changed. An encoder keeps

* the canonical CBOR of each entry it encoded, keyed by the entry object's identity (entries
  are frozen: an unchanged entry is the very same object; its labels, a plain mapping, are
  compared too, so an edit made in place is encoded afresh), for the last few hundred entries
  of any run or manifest (a saver that alternates manifests keeps its hits);
* for a chunked entry, its chunk list's item encodings (ckptfs.format.chunk_lists): a list
  that keeps the leading chunk objects of a cached one encodes as the cached prefix's bytes
  and its new items only.

Canonical CBOR is compositional (definite lengths; a map's order depends on its keys only), so
a map is assembled from its keys' and values' encodings sorted by encoded key, exactly as
``cbor2.dumps(..., canonical=True)`` orders them: the bytes equal ``Manifest.to_bytes()``
(tests compare the two on random sequences of manifests). The reader checks run on the
manifest with only the new entries, and of an extended chunk list only on its new chunks (the
cached prefix passed them; its total size is checked here against the entry's size).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import attrs

from ckptfs.errors import FormatError
from ckptfs.format import cbor
from ckptfs.format.cbor_parts import map_bytes
from ckptfs.format.chunk_lists import ChunkList, ChunkListCache
from ckptfs.format.models import Captured, Entry, Manifest

#: entries remembered (by identity) and the most bytes their encodings may hold in all
KEEP_ENTRIES = 512
KEEP_BYTES = 64 * 1024 * 1024


class ManifestEncoder:
    """``to_bytes(m)`` == ``m.to_bytes()``, in time proportional to the entries that changed
    (and, of a grown chunk list, to its new chunks). Thread-safe; bounded."""

    def __init__(self, keep: int = KEEP_ENTRIES, keep_bytes: int = KEEP_BYTES) -> None:
        self.keep = keep
        self.keep_bytes = keep_bytes
        self._lock = threading.Lock()
        #: id(entry) -> (the entry, kept alive so that its id is not reused; its labels as
        #: encoded; its canonical bytes)
        self._entries: dict[int, tuple[Entry, dict[str, str], bytes]] = {}
        self._bytes = 0
        self.chunk_lists = ChunkListCache()

    def cached(self, e: Entry) -> bytes | None:
        """The cached canonical bytes of ``e``, when it is an entry this encoder encoded."""
        with self._lock:
            hit = self._entries.pop(id(e), None)
            if hit is None:
                return None
            self._entries[id(e)] = hit  # the most recently used last (evicted last)
        if hit[0] is not e or hit[1] != e.labels:
            return None
        return hit[2]

    def to_bytes(self, m: Manifest) -> bytes:
        parts: dict[str, bytes] = {}
        fresh: dict[str, Entry] = {}
        for name, e in m.entries.items():
            got = self.cached(e)
            if got is None:
                fresh[name] = e
            else:
                parts[name] = got
        # the checks Manifest.to_bytes makes, on the new entries only; of an entry whose chunk
        # list extends a cached (checked) one, on its new chunks, its size checked here
        lists: dict[str, ChunkList] = {}
        checked: dict[str, Entry] = {}
        for name, e in fresh.items():
            checked[name] = e
            if isinstance(e, Captured) and e.inline is None and e.chunks:
                cl = lists[name] = self.chunk_lists.get(e.chunks)
                if cl.base:
                    if cl.total != e.size:
                        raise FormatError(f"entry {name!r}: chunk sizes add up to {cl.total}, "
                                          f"but size says {e.size}")
                    checked[name] = attrs.evolve(e, chunks=e.chunks[cl.base:],
                                                 size=cl.total - cl.sizes[cl.base])
        c = attrs.evolve(m, entries=checked).to_cbor()
        Manifest.from_cbor(c, what=f"new manifest for run {m.run!r} seq {m.seq}")
        for name, e in fresh.items():
            cl_ = lists.get(name)
            parts[name] = (_chunked_entry(e, cl_) if cl_ is not None
                           else cbor.encode(c["entries"][name]))
        c["entries"] = None
        top = {k: cbor.encode(v) for k, v in c.items()}
        top["entries"] = map_bytes(parts)
        data = cbor.check_items(map_bytes(top), what=f"manifest for run {m.run!r} seq {m.seq}")
        self._remember(fresh, parts, lists)
        return data

    def _remember(self, fresh: Mapping[str, Entry], parts: Mapping[str, bytes],
                  lists: Mapping[str, ChunkList]) -> None:
        for cl in lists.values():
            self.chunk_lists.put(cl)
        with self._lock:
            for name, e in fresh.items():
                data = parts[name]
                if len(data) > self.keep_bytes:
                    continue
                old = self._entries.pop(id(e), None)
                if old is not None:
                    self._bytes -= len(old[2])
                self._entries[id(e)] = (e, dict(e.labels), data)
                self._bytes += len(data)
            while len(self._entries) > self.keep or self._bytes > self.keep_bytes:
                gone = self._entries.pop(next(iter(self._entries)))
                self._bytes -= len(gone[2])

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0
        self.chunk_lists.clear()

    def __len__(self) -> int:
        return len(self._entries)


def _chunked_entry(e: Entry, cl: ChunkList) -> bytes:
    """A chunked entry's canonical bytes: its other fields encoded now, its chunk list from
    ``cl`` (the cached prefix's item bytes and the new items')."""
    assert isinstance(e, Captured)
    head: dict[str, Any] = attrs.evolve(e, chunks=()).to_cbor()
    parts = {k: cbor.encode(v) for k, v in head.items() if k != "chunks"}
    parts["chunks"] = cl.array()
    return map_bytes(parts)


__all__ = ["ManifestEncoder", "map_bytes"]
