"""A v2 run record's bytes without building its header model first (the commit path).

``RecordHeader.to_cbor()`` over ``make_locators``'s table makes two Python objects per chunk
the snapshot names (a ``Locator``, then its list) and hashes each location's container
through attrs' generated methods: most of a commit's CPU once the manifest holds hundreds of
chunks. The format requires the table (every record locates every chunk it names, sorted by
digest, containers numbered in order of first use: spec/v2.md), so its size is O(chunks);
this builds it as plain rows, keyed by the digests' raw bytes and by plain container keys,
and encodes the header map in one C call; or, with a ``LocatorRows`` kept across commits,
joins the rows' cached encodings (cbor2 takes about a microsecond per nested list). The
bytes are exactly those of ``ct.encode_record(RecordHeader(...))`` with ``make_locators``'
table (tests compare them).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from ckptfs.errors import FormatError
from ckptfs.format import cbor
from ckptfs.format import containers as ct
from ckptfs.format.cbor_parts import array_bytes, map_bytes, uint_head
from ckptfs.format.containers import Body, ContainerRef, Location, RecordRef
from ckptfs.format.digest import Digest


def _key(c: ContainerRef) -> object:
    """A plain value equal for equal container refs (a record's [run, seq], a pack's digest)."""
    if isinstance(c, RecordRef):
        return (c.run, c.seq)
    return c.digest.raw


def locator_table(where: Mapping[bytes, Location]) -> dict[str, Any]:
    """The header's ``locators`` map for chunks at ``where`` (raw digest -> location): rows
    ``[prefix, container, start, stored]`` sorted by digest, containers numbered in order of
    first use (``make_locators``' table, as ``RecordHeader.to_cbor`` writes it).

    Containers are numbered by object identity first (in C; a container's bodies share one
    ref object as a rule), then equal refs that are distinct objects are merged, keeping the
    first use of each: the same numbering as numbering by equality."""
    raws = sorted(where)
    check_prefixes(raws)
    locs = [where[r] for r in raws]
    conts = [loc.container for loc in locs]
    first = dict(zip(map(id, conts), conts))  # id -> ref, in order of first use
    index: dict[object, int] = {}
    refs: list[ContainerRef] = []
    by_id: dict[int, int] = {}
    for i, c in first.items():
        k = _key(c)
        j = index.get(k)
        if j is None:
            j = index[k] = len(refs)
            refs.append(c)
        by_id[i] = j
    n = ct.LOCATOR_PREFIX
    rows = [[r[:n], by_id[id(c)], loc.start, loc.stored] for r, c, loc in zip(raws, conts, locs)]
    return {"containers": [c.to_cbor() for c in refs], "chunks": rows}


def encode_record(*, run: str, seq: int, snapshot: Digest, created: int, nonce: bytes,
                  manifest: bytes, bodies: Sequence[Body], where: Mapping[bytes, Location],
                  area: Sequence[bytes], body_length: int,
                  rows: LocatorRows | None = None, compress: bool = False,
                  base: tuple[int, bytes] | None = None) -> tuple[bytes, int, bytes]:
    """The record's bytes, its body area's offset (``ct.encode_record`` of the header
    ``RecordHeader(..., containers, locators = make_locators(where))`` would write) and the
    header's canonical bytes (a later record's ``base``). ``rows``: a cache of encoded
    locator rows kept across commits (else the table is built as plain rows and encoded by
    cbor2); ``compress``: the header as a zstd frame (form 0x03, a store that requires
    ``compressed-headers``); ``base``: ``(seq, header)`` of the parent record, to store the
    header against (form 0x04, a store that requires ``delta-headers``)."""
    head = {"kind": "record", "run": run, "seq": seq, "snapshot": snapshot.raw,
            "size": len(manifest), "created": created, "nonce": nonce,
            "bodies": [b.to_cbor() for b in bodies], "body_length": body_length}
    if rows is None:
        plain = cbor.encode({**head, "manifest": manifest, "locators": locator_table(where)})
    else:
        parts = {k: cbor.encode(v) for k, v in head.items()}
        parts["manifest"] = cbor.encode(manifest)
        parts["locators"] = rows.table(where)
        plain = map_bytes(parts)
    data, start = ct.encode_bytes(plain, area, compress=compress, base=base)
    return data, start, plain


_ROW = b"\x84" + uint_head(2, ct.LOCATOR_PREFIX)  # [prefix (8 bytes), ...]


def check_prefixes(raws: Sequence[bytes]) -> None:
    """FormatError when two of the sorted raw digests ``raws`` share their locator prefix:
    no record may locate both by it (spec/v2.md 3.5; readers refuse such a record), so the
    commit is refused (2^-64 a pair; committing other content avoids it)."""
    n = ct.LOCATOR_PREFIX
    for a, b in zip(raws, raws[1:]):
        if a[:n] == b[:n]:
            raise FormatError(f"chunks {a.hex()} and {b.hex()} share their first {n} bytes, "
                              "which no record may locate both by; the commit is refused "
                              "(commit again with different content)")


def _uints(*ns: int) -> bytes | None:
    """The canonical encodings of unsigned integers ``ns``, joined (None if one is not)."""
    if not all(type(n) is int and 0 <= n < 1 << 64 for n in ns):
        return None
    return b"".join(uint_head(0, n) for n in ns)


class LocatorRows:
    """The encoded ``locators`` map of a record, from encodings kept across commits: each
    located chunk's row but its container number (``[prefix, _, start, stored]``), keyed by
    raw digest and valid while the chunk's Location is the same object (Locations keep one
    object per place: a moved chunk has a new one), and each container's encoding and plain
    key, by the ref object's identity (kept alive). The numbers themselves (first use in
    digest order) are recomputed at every commit: one new container can renumber them all.
    Bounded: cleared when over ``keep`` rows or containers. Thread-safe."""

    def __init__(self, keep: int = 1 << 18) -> None:
        self.keep = keep
        self._lock = threading.Lock()
        self._rows: dict[bytes, tuple[Location, bytes, bytes]] = {}
        self._conts: dict[int, tuple[ContainerRef, object, bytes]] = {}

    def table(self, where: Mapping[bytes, Location]) -> bytes:
        """``cbor.encode(locator_table(where))``."""
        with self._lock:
            if len(self._rows) > self.keep or len(self._conts) > self.keep:
                self._rows.clear()
                self._conts.clear()
            return self._table(where)

    def _table(self, where: Mapping[bytes, Location]) -> bytes:
        rows, conts = self._rows, self._conts
        index: dict[object, int] = {}
        by_id: dict[int, bytes] = {}
        encs: list[bytes] = []
        out: list[bytes] = []
        last = b""
        for raw in sorted(where):
            if raw[:ct.LOCATOR_PREFIX] == last:
                check_prefixes(sorted(where))  # raises: two chunks share a locator prefix
            last = raw[:ct.LOCATOR_PREFIX]
            loc = where[raw]
            hit = rows.get(raw)
            if hit is None or hit[0] is not loc:
                tail = _uints(loc.start, loc.stored)
                if tail is None or len(raw) < ct.LOCATOR_PREFIX:
                    return cbor.encode(locator_table(where))  # not ours to shortcut
                hit = rows[raw] = (loc, _ROW + raw[:ct.LOCATOR_PREFIX], tail)
            c = loc.container
            num = by_id.get(id(c))
            if num is None:
                got = conts.get(id(c))
                if got is None or got[0] is not c:
                    got = conts[id(c)] = (c, _key(c), cbor.encode(c.to_cbor()))
                j = index.get(got[1])
                if j is None:
                    j = index[got[1]] = len(encs)
                    encs.append(got[2])
                num = by_id[id(c)] = uint_head(0, j)
            out.append(hit[1] + num + hit[2])
        return map_bytes({"containers": array_bytes(encs), "chunks": array_bytes(out)})


__all__ = ["LocatorRows", "encode_record", "locator_table"]
