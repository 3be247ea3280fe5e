"""A v2 run record's bytes without building its header model first (the commit path).

``RecordHeader.to_cbor()`` over ``make_locators``'s table makes two Python objects per chunk
the snapshot names (a ``Locator``, then its list) and hashes each location's container
through attrs' generated methods: most of a commit's CPU once the manifest holds hundreds of
chunks. The format requires the table (every record locates every chunk it names, sorted by
digest, containers numbered in order of first use: spec/v2.md), so its size is O(chunks);
this builds it as plain rows, keyed by the digests' raw bytes and by plain container keys,
and encodes the header map in one C call. The bytes are exactly those of
``ct.encode_record(RecordHeader(...))`` with ``make_locators``' table (tests compare them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ckptfs.format import containers as ct
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
    first use (``make_locators``' table, as ``RecordHeader.to_cbor`` writes it)."""
    index: dict[object, int] = {}
    refs: list[ContainerRef] = []
    rows: list[list[Any]] = []
    n = ct.LOCATOR_PREFIX
    for raw in sorted(where):
        loc = where[raw]
        c = loc.container
        k = _key(c)
        i = index.get(k)
        if i is None:
            i = index[k] = len(refs)
            refs.append(c)
        rows.append([raw[:n], i, loc.start, loc.stored])
    return {"containers": [c.to_cbor() for c in refs], "chunks": rows}


def encode_record(*, run: str, seq: int, snapshot: Digest, created: int, nonce: bytes,
                  manifest: bytes, bodies: Sequence[Body], where: Mapping[bytes, Location],
                  area: Sequence[bytes], body_length: int) -> tuple[bytes, int]:
    """The record's bytes and its body area's offset (``ct.encode_record`` of the header
    ``RecordHeader(..., containers, locators = make_locators(where))`` would write)."""
    header = {"kind": "record", "run": run, "seq": seq, "snapshot": snapshot.raw,
              "size": len(manifest), "created": created, "nonce": nonce, "manifest": manifest,
              "bodies": [b.to_cbor() for b in bodies], "locators": locator_table(where),
              "body_length": body_length}
    return ct.encode(header, area)


__all__ = ["encode_record", "locator_table"]
