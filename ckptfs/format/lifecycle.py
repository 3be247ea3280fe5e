"""Small mutable control objects of the retention layer: retired ranges, expiry overrides,
tombstones and maintenance leases (spec/retention.md).

Manifests and run records are immutable, so anything decided later about a run (a new
expiry, a forgotten sequence number, an erasure) lives in one of these objects. Each is a
canonical CBOR map; readers validate them strictly and fail closed when one is unreadable.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from ckptfs.errors import FormatError
from ckptfs.format import cbor
from ckptfs.format.digest import Digest
from ckptfs.format.models import MAX_U64, _digest, _get
from ckptfs.format.names import check_run_id

#: ``through`` of a retired marker that fences a whole run: no sequence number is free.
FENCE_ALL = MAX_U64
MAX_CONTROL_SIZE = 16 * 1024 * 1024
#: the most snapshot ids of retired seqs a retired marker lists (the highest seqs): ~180 KiB,
#: enough for a backup that fell 4096 forgotten snapshots behind (spec/retention.md 3)
MAX_RETIRED_IDS = 4096


def _decode_map(data: bytes, what: str) -> dict[str, Any]:
    if len(data) > MAX_CONTROL_SIZE:
        raise FormatError(f"{what}: {len(data)} bytes is too large")
    m = cbor.decode(data, what=what)
    if not isinstance(m, dict):
        raise FormatError(f"{what}: must be a CBOR map")
    return m


def _run(m: dict[str, Any], what: str) -> str:
    try:
        return check_run_id(_get(m, "run", str, what))
    except ValueError as e:
        raise FormatError(f"{what}: {e}") from e


def _ints(v: Any, what: str, key: str) -> tuple[int, ...]:
    if not isinstance(v, list) or not all(type(i) is int and 1 <= i <= MAX_U64 for i in v):
        raise FormatError(f"{what}: {key!r} must be a list of sequence numbers")
    return tuple(v)


def _seq(m: dict[str, Any], what: str) -> int | None:
    """Field ``seq``: a sequence number (>= 1), or null for the whole run."""
    seq: int | None = _get(m, "seq", int, what, optional=True, nullable=True)
    if seq == 0:
        raise FormatError(f"{what}: seq 0 is not a sequence number")
    return seq


@attrs.frozen(slots=True)
class Retired:
    """``runs/<run>/retired/<through>``: no record may be created at a seq <= ``through``;
    records <= ``through`` other than ``kept`` are strays that readers ignore."""

    run: str
    through: int
    kept: tuple[int, ...]
    created: int
    #: ``(seq, snapshot id)`` of retired seqs the store held: what it says was there after the
    #: record is gone, the proof a copy needs that another store's record at that seq is the
    #: same snapshot (spec/retention.md 3 and 9, step 0)
    ids: tuple[tuple[int, Digest], ...] = ()

    @property
    def fenced(self) -> bool:
        """True when the whole run is closed to writers (erase, or the whole run forgotten)."""
        return self.through == FENCE_ALL

    def visible(self, seq: int) -> bool:
        return seq > self.through or seq in self.kept

    def to_bytes(self) -> bytes:
        m: dict[str, Any] = {"run": self.run, "through": self.through,
                             "kept": sorted(self.kept), "created": self.created}
        if self.ids:
            m["ids"] = [[s, d.raw] for s, d in sorted(self.ids)]
        return cbor.encode(m)

    @classmethod
    def from_bytes(cls, data: bytes, *, what: str) -> Retired:
        m = _decode_map(data, what)
        through = _get(m, "through", int, what)
        kept = _ints(m.get("kept"), what, "kept")
        return cls(run=_run(m, what), through=through, kept=kept,
                   created=_get(m, "created", int, what),
                   ids=_retired_ids(m.get("ids"), through, kept))

    def with_ids(self, *known: Iterable[tuple[int, Digest]]) -> Retired:
        """This marker listing the ids of ``known`` (earlier sources first win a seq) for the
        seqs it retires and does not keep, the highest ``MAX_RETIRED_IDS`` of them."""
        out: dict[int, Digest] = {}
        kept = set(self.kept)
        for pairs in (self.ids, *known):
            for s, d in pairs:
                if s <= self.through and s not in kept:
                    out.setdefault(s, d)
        ids = tuple(sorted(out.items())[-MAX_RETIRED_IDS:])
        return self if ids == self.ids else attrs.evolve(self, ids=ids)


def _retired_ids(v: Any, through: int, kept: tuple[int, ...]) -> tuple[tuple[int, Digest], ...]:
    """A marker's ``ids``, or none when absent or malformed: they serve only as a copy's proof
    (spec/retention.md 3), so a reader never refuses a marker for them, and a copy never takes
    what it cannot parse as proof."""
    if not isinstance(v, list):
        return ()
    out: dict[int, Digest] = {}
    for p in v:
        if not (isinstance(p, list) and len(p) == 2 and type(p[0]) is int
                and 1 <= p[0] <= through and p[0] not in kept and type(p[1]) is bytes
                and len(p[1]) == 32 and p[0] not in out):
            return ()
        out[p[0]] = Digest(p[1])
    return tuple(sorted(out.items()))


@attrs.frozen(slots=True)
class Expiry:
    """``runs/<run>/expiry`` (whole run) or ``runs/<run>/expiry-<seq>`` (one snapshot): an
    expiry set after the fact; ``expires`` None means "never"."""

    run: str
    seq: int | None
    expires: int | None
    set_at: int

    def to_bytes(self) -> bytes:
        return cbor.encode({"run": self.run, "seq": self.seq, "expires": self.expires,
                            "set": self.set_at})

    @classmethod
    def from_bytes(cls, data: bytes, *, what: str) -> Expiry:
        m = _decode_map(data, what)
        if "expires" not in m:
            raise FormatError(f"{what}: missing field 'expires' (null means never)")
        return cls(run=_run(m, what), seq=_seq(m, what),
                   expires=_get(m, "expires", int, what, optional=True, nullable=True),
                   set_at=_get(m, "set", int, what))


@attrs.frozen(slots=True)
class Tombstone:
    """``tombstones/<run>.cbor`` (whole run) or ``tombstones/<run>/<seq>.cbor`` (one snapshot):
    what was erased, when and why. Holds no state data and no chunk digests."""

    run: str
    seq: int | None
    reason: str
    requested: int
    snapshots: tuple[tuple[int, Digest], ...]
    state: str = "erasing"  # "erasing" until every object is gone, then "erased"
    completed: int | None = None
    manifests_deleted: int = 0
    chunks_deleted: int = 0
    bytes_deleted: int = 0
    chunks_kept_shared: int = 0

    def to_bytes(self) -> bytes:
        return cbor.encode({
            "run": self.run, "seq": self.seq, "reason": self.reason,
            "requested": self.requested, "state": self.state, "completed": self.completed,
            "snapshots": [[s, d.raw] for s, d in sorted(self.snapshots)],
            "manifests_deleted": self.manifests_deleted, "chunks_deleted": self.chunks_deleted,
            "bytes_deleted": self.bytes_deleted, "chunks_kept_shared": self.chunks_kept_shared})

    def to_json(self) -> dict[str, Any]:
        return {"run": self.run, "seq": self.seq, "reason": self.reason,
                "requested": self.requested, "state": self.state, "completed": self.completed,
                "snapshots": [{"seq": s, "id": d.text} for s, d in sorted(self.snapshots)],
                "manifests_deleted": self.manifests_deleted,
                "chunks_deleted": self.chunks_deleted, "bytes_deleted": self.bytes_deleted,
                "chunks_kept_shared": self.chunks_kept_shared}

    @classmethod
    def from_bytes(cls, data: bytes, *, what: str) -> Tombstone:
        m = _decode_map(data, what)
        state = _get(m, "state", str, what)
        if state not in ("erasing", "erased"):
            raise FormatError(f"{what}: state must be 'erasing' or 'erased'")
        snaps = _get(m, "snapshots", list, what)
        pairs = []
        for p in snaps:
            if not (isinstance(p, list) and len(p) == 2 and type(p[0]) is int
                    and 1 <= p[0] <= MAX_U64):
                raise FormatError(f"{what}: snapshots must be [seq, id] pairs")
            pairs.append((p[0], _digest(p[1], what)))
        return cls(run=_run(m, what), seq=_seq(m, what),
                   reason=_get(m, "reason", str, what), requested=_get(m, "requested", int, what),
                   snapshots=tuple(pairs), state=state,
                   completed=_get(m, "completed", int, what, optional=True, nullable=True),
                   manifests_deleted=_get(m, "manifests_deleted", int, what),
                   chunks_deleted=_get(m, "chunks_deleted", int, what),
                   bytes_deleted=_get(m, "bytes_deleted", int, what),
                   chunks_kept_shared=_get(m, "chunks_kept_shared", int, what))


#: Readers treat a lease whose ``expires`` lies further than this after its ``acquired`` as
#: damaged, hence expired (spec/retention.md "Maintenance lease"): no lease blocks for longer.
MAX_LEASE_TTL_MS = 3_600_000


@attrs.frozen(slots=True)
class Lease:
    """``leases/maintenance/<generation>``: who runs forget/gc/erase, and until when.

    ``acquired`` is when the holder last wrote it (taken or renewed). ``host``/``pid`` let a
    process on the same host prove the holder gone. ``deletes`` False: the holder promises not
    to delete objects while this version of the lease stands (forget; gc before its sweep).
    ``released``: the holder is done; a released generation blocks nobody and stays as the
    highest one until the next holder takes generation + 1 (so generations only grow)."""

    owner: str
    acquired: int
    expires: int
    host: str | None = None
    pid: int | None = None
    deletes: bool = True
    released: bool = False

    def blocks(self, now: int) -> bool:
        """True while this lease excludes other maintenance: held, not expired, and not
        damaged (an expiry more than MAX_LEASE_TTL_MS after ``acquired`` is damaged)."""
        return (not self.released and now < self.expires
                and self.expires - self.acquired <= MAX_LEASE_TTL_MS)

    def to_bytes(self) -> bytes:
        m: dict[str, Any] = {"owner": self.owner, "acquired": self.acquired,
                             "expires": self.expires, "deletes": self.deletes,
                             "released": self.released}
        if self.host is not None:
            m["host"] = self.host
        if self.pid is not None:
            m["pid"] = self.pid
        return cbor.encode(m)

    @classmethod
    def from_bytes(cls, data: bytes, *, what: str) -> Lease:
        m = _decode_map(data, what)
        deletes = _get(m, "deletes", bool, what, optional=True)
        released = _get(m, "released", bool, what, optional=True)
        return cls(owner=_get(m, "owner", str, what), acquired=_get(m, "acquired", int, what),
                   expires=_get(m, "expires", int, what),
                   host=_get(m, "host", str, what, optional=True),
                   pid=_get(m, "pid", int, what, optional=True),
                   deletes=True if deletes is None else deletes,
                   released=bool(released))
