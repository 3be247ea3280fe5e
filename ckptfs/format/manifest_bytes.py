"""Canonical manifest bytes assembled from cached per-entry parts.

``Manifest.to_bytes()`` re-encodes (and re-checks) every entry's chunk list at every commit:
O(chunks) Python work per step although only the appended-to entry changed. An encoder keeps
the canonical CBOR of each entry it encoded last time, keyed by the entry object's identity
(entries are frozen: an unchanged entry is the very same object), and assembles the manifest
from them. The bytes are exactly ``Manifest.to_bytes()`` (tests compare the two on random
manifests): the manifest is encoded canonically with each entry replaced by a unique random
byte-string marker, and every marker's encoding is then replaced by the entry's cached
encoding. Map ordering depends only on the keys, so the splice cannot change it. The reader
checks run on the manifest with only the new entries (cached ones passed them already).
"""

from __future__ import annotations

import os

import attrs

from ckptfs.format import cbor
from ckptfs.errors import FormatError
from ckptfs.format.models import Captured, Entry, Manifest

_MARK = 16


class ManifestEncoder:
    """``to_bytes(m)`` == ``m.to_bytes()``, in time proportional to the entries that changed."""

    def __init__(self) -> None:
        self._cache: dict[str, tuple[Entry, bytes]] = {}

    def to_bytes(self, m: Manifest) -> bytes:
        fresh: dict[str, Entry] = {}
        parts: dict[str, bytes] = {}
        for name, e in m.entries.items():
            hit = self._cache.get(name)
            if hit is not None and hit[0] is e:
                parts[name] = hit[1]
            else:
                fresh[name] = e
        # the checks Manifest.to_bytes makes, on the new entries only; an entry that extends
        # the cached one of its name (the same leading chunk objects) is checked on its new
        # chunks, with its size checked here against all of them
        checked: dict[str, Entry] = {}
        for name, e in fresh.items():
            hit = self._cache.get(name)
            checked[name] = e if hit is None else _new_part(e, hit[0])
        c = attrs.evolve(m, entries=checked).to_cbor()
        Manifest.from_cbor(c, what=f"new manifest for run {m.run!r} seq {m.seq}")
        for name, e in fresh.items():
            parts[name] = cbor.encode(c["entries"][name] if checked[name] is e else e.to_cbor())
        if not parts:
            data = cbor.encode(c)
        else:
            marks = {name: os.urandom(_MARK) for name in parts}
            c["entries"] = dict(marks)
            data = cbor.encode(c)
            for name, mark in marks.items():
                enc = cbor.encode(mark)
                if data.count(enc) != 1:  # a marker that collides: take the plain path
                    return self._plain(m)
                data = data.replace(enc, parts[name])
        self._cache = {name: (e, parts[name]) for name, e in m.entries.items()}
        return data

    def _plain(self, m: Manifest) -> bytes:
        self._cache = {}
        return m.to_bytes()


def _new_part(e: Entry, old: Entry) -> Entry:
    """What of ``e`` still needs the reader's checks, given that ``old`` passed them: ``e``
    itself, or (when ``e`` keeps ``old``'s leading chunks) ``e`` with only its other chunks
    and their size, after checking here that all its chunks add up to its size."""
    if not (isinstance(e, Captured) and isinstance(old, Captured) and e.inline is None
            and old.inline is None and e.chunks and old.chunks):
        return e
    k, n = 0, min(len(e.chunks), len(old.chunks))
    a, b = e.chunks, old.chunks
    while k < n and a[k] is b[k]:
        k += 1
    if k == 0 or k == len(a):
        return e
    rest = a[k:]
    if sum(c.size for c in a) != e.size:
        raise FormatError(f"entry: chunk sizes add up to {sum(c.size for c in a)}, but size "
                          f"says {e.size}")
    return attrs.evolve(e, chunks=rest, size=sum(c.size for c in rest))


__all__ = ["ManifestEncoder"]
