"""Vectors for the maintenance lease's blocking rule (spec/retention.md section 6): which lease
objects block another forget/gc/erase at a given time. The holder-liveness part of the rule
(same host id, pid gone) depends on the reader's host and is not in vectors: every vector's
host is one no reader has."""

from __future__ import annotations

from typing import Any

from ckptfs.errors import CkptfsError
from ckptfs.format import cbor
from ckptfs.format.lifecycle import MAX_LEASE_TTL_MS, Lease
from ckptfs.format.models import MAX_U64

T0 = 1_700_000_000_000
TTL = 120_000


def _lease(**kw: Any) -> bytes:
    m: dict[str, Any] = {"owner": "host-a:4242:1", "acquired": T0, "expires": T0 + TTL,
                         "deletes": True, "released": False, "host": "no-such-host/-/-",
                         "pid": 4242}
    m.update(kw)
    return cbor.encode({k: v for k, v in m.items() if v is not None})


#: name -> (description, lease bytes, now, expected "blocks"/"free")
CASES: dict[str, tuple[str, bytes, int, str]] = {
    "held": ("held and unexpired: blocks", _lease(), T0 + 1000, "blocks"),
    "expired": ("now = expires: free", _lease(), T0 + TTL, "free"),
    "released": ("released by its holder: free", _lease(released=True), T0 + 1000, "free"),
    "not-deleting": ("held with deletes = false: still blocks maintenance",
                     _lease(deletes=False), T0 + 1000, "blocks"),
    "old-keys-only": ("only owner/acquired/expires (deletes and released absent): blocks",
                      _lease(deletes=None, released=None, host=None, pid=None), T0 + 1000,
                      "blocks"),
    "forever": ("expires = 2^64 - 1: damaged (past the one-hour bound), free",
                _lease(expires=MAX_U64), T0 + 1000, "free"),
    "at-bound": ("expires exactly one hour after acquired: blocks",
                 _lease(expires=T0 + MAX_LEASE_TTL_MS), T0 + 1000, "blocks"),
    "over-bound": ("expires one hour and 1 ms after acquired: damaged, free",
                   _lease(expires=T0 + MAX_LEASE_TTL_MS + 1), T0 + 1000, "free"),
    "unparseable": ("not a lease map: blocks nobody", b"\xa1\x65owner", T0 + 1000, "free"),
    "wrong-type": ("deletes is not a bool: damaged, free", _lease(deletes="yes"), T0 + 1000,
                   "free"),
}


def lease_blocks(data: bytes, now: int) -> str:
    """The reference answer: ``blocks`` or ``free`` (what the adapter's ``lease`` prints)."""
    try:
        lease = Lease.from_bytes(data, what="lease")
    except CkptfsError:  # an unparseable lease blocks nobody
        return "free"
    return "blocks" if lease.blocks(now) else "free"


def lease_vectors(g: Any) -> None:
    for name, (desc, data, now, want) in CASES.items():
        assert lease_blocks(data, now) == want, name
        g.vector("lookup", f"lease-{name}", f"retention.md 6: {desc}",
                 ["lease", "{file:input}", str(now)], {"output": want, "compare": "text"},
                 ["lifecycle"], {"input": {"hex": data.hex()}})
