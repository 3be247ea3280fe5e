"""Reading and writing the retention layer's control objects: retired ranges (gaps and
fences), expiry overrides and tombstones. Unreadable control objects fail closed. Also what a
reader says of a record that is not its path's, or of an erased run or snapshot."""

from __future__ import annotations

import time

from collections.abc import Callable, Mapping
from typing import Any

from ckptfs.errors import CorruptObject, CorruptSnapshot, ErasedError, FormatError, NonCanonical
from ckptfs.format.digest import Digest
from ckptfs.format.lifecycle import FENCE_ALL, MAX_RETIRED_IDS, Expiry, Retired, Tombstone
from ckptfs.format.models import RunRecord
from ckptfs.format.names import (
    RUN_ID,
    TOMBSTONES,
    expiry_path,
    parse_seq_name,
    retired_dir,
    seq_name,
    tombstone_path,
)
from ckptfs.storage.base import Listing, Storage
from ckptfs.store.header_bases import held_bases


def _refuse(e: FormatError, why: str) -> FormatError:
    """A control object that cannot be parsed: refuse (fail closed), keeping the category of
    format.md 13 (``non-canonical`` for well-formed but non-canonical CBOR, else ``corrupt``)."""
    return (NonCanonical if isinstance(e, NonCanonical) else CorruptObject)(f"{e}; {why}")


def record_names_of(storage: Storage, listing: Listing) -> list[str]:
    """The names of a run's folder (or its ``retired/``) that may be records or markers.
    A real folder (local disk) named like one is damage, not junk (format.md 9.2): it is kept
    in, so that reading it fails with ``storage`` naming the path, where leaving it out would
    roll the run back to an older head. On an object store such a "folder" is only keys below
    a name the store never wrote: not the store's, ignored like any such name (3.1)."""
    return listing.names if storage.folders_are_real else list(listing.files)


def retired_throughs(storage: Storage, run_id: str) -> list[int]:
    """``through`` values of the run's retired markers, ascending (names only: one listing)."""
    names = record_names_of(storage, storage.listing(retired_dir(run_id)))
    return sorted(s for s in map(parse_seq_name, names) if s is not None)


def read_retired(storage: Storage, run_id: str, throughs: list[int] | None = None
                 ) -> Retired | None:
    """The run's authoritative retired marker (the highest), or None. ``throughs``: the
    markers' ``through`` values when the caller listed them already (one listing of the run
    serves maintenance); absent, the retired folder is listed."""
    throughs = retired_throughs(storage, run_id) if throughs is None else sorted(throughs)
    if not throughs:
        return None
    path = f"{retired_dir(run_id)}/{seq_name(throughs[-1])}"
    try:
        data = storage.read(path)
    except FileNotFoundError:  # compacted between list and read: look again
        return read_retired(storage, run_id)
    try:
        r = Retired.from_bytes(data, what=path)
    except FormatError as e:
        raise _refuse(e, "the run's retired range is unknown, so no snapshot of it is served. "
                      "Restore the file from a copy of the store.") from e
    if r.run != run_id or r.through != throughs[-1]:
        raise CorruptObject(f"{path}: names run {r.run!r} through {r.through}, not its own path")
    return r


def write_retired(storage: Storage, marker: Retired) -> None:
    """Publish ``marker`` and drop the lower markers it supersedes."""
    d = retired_dir(marker.run)
    storage.replace(f"{d}/{seq_name(marker.through)}", marker.to_bytes())
    for t in retired_throughs(storage, marker.run):
        if t < marker.through:
            storage.delete(f"{d}/{seq_name(t)}")


def read_expiry(storage: Storage, run_id: str, seq: int | None = None) -> Expiry | None:
    path = expiry_path(run_id, seq)
    try:
        data = storage.read(path)
    except FileNotFoundError:
        return None
    try:
        e = Expiry.from_bytes(data, what=path)
    except FormatError as err:
        raise _refuse(err, "the expiry of this snapshot is unknown, so it is not served. Set "
                      "it again with 'ckptfs expire'.") from err
    if e.run != run_id or e.seq != seq:
        raise CorruptObject(f"{path}: names run {e.run!r} seq {e.seq}, not its own path")
    return e


def read_expiry_shown(storage: Storage, run_id: str, seq: int | None = None, *,
                      exists: frozenset[str] | None = None) -> Expiry | None:
    """``read_expiry``, skipped (None) when a listing of this operation did not show the
    override: ``exists`` holds the override names (relative to the run's folder) it showed;
    None reads it regardless (spec/v2.md 4: readers MAY skip overrides the listing did not
    show)."""
    if exists is not None and expiry_path(run_id, seq).rsplit("/", 1)[1] not in exists:
        return None
    return read_expiry(storage, run_id, seq)


def effective_expiry(storage: Storage, run_id: str, seq: int, manifest_expires: int | None,
                     *, exists: frozenset[str] | None = None) -> int | None:
    """A snapshot's expiry: its own override, else the run's override, else the manifest's.
    ``exists``: as for ``read_expiry_shown``."""
    for s in (seq, None):
        o = read_expiry_shown(storage, run_id, s, exists=exists)
        if o is not None:
            return o.expires
    return manifest_expires


def read_tombstone(storage: Storage, run_id: str, seq: int | None = None) -> Tombstone | None:
    path = tombstone_path(run_id, seq)
    try:
        data = storage.read(path)
    except FileNotFoundError:
        return None
    try:
        return Tombstone.from_bytes(data, what=path)
    except FormatError as e:
        raise _refuse(e, "the tombstone is damaged (the run stays unreadable)") from e


def _is_run_id(name: str) -> bool:
    return bool(RUN_ID.match(name)) and not name.endswith(".")


def tombstoned(storage: Storage) -> list[tuple[str, bool]]:
    """(run, whole) for each entry of ``tombstones/`` (one listing): the whole-run tombstone
    is the file ``<run>.cbor``, the per-snapshot ones are in the folder ``<run>/``. Any other
    name, and a file where a run's folder belongs or a folder where ``<run>.cbor`` belongs
    (an editor's ``x.swp``), is not the store's: ignored (format.md 3.1)."""
    found = storage.listing(TOMBSTONES)
    return sorted([(n[:-5], True) for n in found.files
                   if n.endswith(".cbor") and _is_run_id(n[:-5])]
                  + [(n, False) for n in found.folders if _is_run_id(n)])


def snapshot_tombstones(storage: Storage, run_id: str) -> list[int]:
    """The seqs of the run's per-snapshot tombstones (``tombstones/<run>/<seq>.cbor``, files),
    ascending; from one listing."""
    return sorted(s for s in (parse_seq_name(n[:-5]) for n in
                              storage.listing(f"{TOMBSTONES}/{run_id}").files
                              if n.endswith(".cbor")) if s)


def tombstone_keys(storage: Storage) -> list[tuple[str, int | None]]:
    """(run, seq) of every tombstone in the store, seq None for a whole run; sorted, whole-run
    tombstones first."""
    out: list[tuple[str, int | None]] = []
    for run_id, whole in tombstoned(storage):
        out += [(run_id, None)] if whole else [(run_id, s) for s in
                                               snapshot_tombstones(storage, run_id)]
    return sorted(out, key=lambda k: (k[0], -1 if k[1] is None else k[1]))


def write_expiry(storage: Storage, run_id: str, seq: int | None, expires: int | None,
                 now: int) -> Expiry:
    """Set (replace) the expiry override of a run or one snapshot; None means never."""
    e = Expiry(run=run_id, seq=seq, expires=expires, set_at=now)
    storage.replace(expiry_path(run_id, seq), e.to_bytes())
    return e


def set_run_expiry(storage: Storage, run_id: str, expires: int | None) -> None:
    """Record a new run's run-wide expiry (given at start) so that resumes keep applying it."""
    import time

    write_expiry(storage, run_id, None, expires, int(time.time() * 1000))


def default_expiry(settings: Mapping[str, Any], created: int) -> int | None:
    """The expiry a writer gives a snapshot when none was asked for: the store's default TTL."""
    ttl = settings.get("default_ttl_ms")
    if ttl is None:
        return None
    if type(ttl) is not int or ttl <= 0:
        raise CorruptObject(f"store setting default_ttl_ms must be a positive integer, not {ttl!r}")
    return created + ttl


def retire(storage: Storage, run_id: str, visible: list[int], drop: set[int], now: int,
           ids: Callable[[list[int]], Mapping[int, Digest]]) -> bool:
    """Forget the snapshots ``drop`` of a run whose retained seqs are ``visible``: publish the
    retired marker. The head goes only with the whole run (a writer still holding that head
    may go on at head + 1; nobody can reuse a lower seq). Returns True when the whole run
    went. Only the marker is written: records hold chunk bodies that later snapshots may use,
    so the records are then strays, which gc repacks and deletes (spec/v2.md "Maintenance").
    ``ids`` gives the snapshot ids of seqs (``store.records.snapshot_ids``, or what the caller
    read already); the marker lists them, so that a copy can still prove a backup's records
    to be this run's after they are gone here (spec/retention.md 3)."""
    drop = drop & set(visible)
    if not drop:
        return False
    whole = drop == set(visible)
    if not whole:  # a kept record's header bases stay visible with it (spec/v2.md 9.1)
        drop -= held_bases(storage, run_id, [s for s in visible if s not in drop], drop)
        if not drop:
            return False
    if not whole and max(visible) in drop:
        raise ValueError(f"run {run_id!r}: the head (seq {max(visible)}) can only be forgotten "
                         "together with the whole run")
    old = read_retired(storage, run_id)
    through = max(drop) if old is None else max(max(drop), old.through)
    if old is not None and old.fenced:
        through = FENCE_ALL
    kept = tuple(s for s in visible if s <= through and s not in drop)
    marker = Retired(run=run_id, through=through, kept=kept, created=now)
    new = ids(sorted(drop)[-MAX_RETIRED_IDS:])
    write_retired(storage, marker.with_ids(old.ids if old else (), new.items()))
    return whole


def check_record_path(rec: RunRecord, run_id: str, seq: int, what: str) -> None:
    """A record names the run and seq of its own path (format.md 8.1), else ``corrupt``."""
    if rec.run != run_id or rec.seq != seq:
        raise CorruptSnapshot(f"{what}: names run {rec.run!r} seq {rec.seq}, not its own path")


def erased_error(stone: Tombstone) -> ErasedError:
    """What a reader says of a run or snapshot with this tombstone: erased (when, why), or
    being erased when the erase stopped before its last step (run it again)."""
    run_id, seq = stone.run, stone.seq
    what = f"run {run_id!r}" if seq is None else f"snapshot {seq} of run {run_id!r}"
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stone.requested / 1000))
    if stone.state != "erased":  # the erase stopped before its last step: not finished
        return ErasedError(f"{what} is being erased since {at} (reason: {stone.reason!r}) "
                           "and the erase has not finished; run 'ckptfs erase' on it again "
                           "to finish it")
    return ErasedError(f"{what} was erased at {at} (reason: "
                       f"{stone.reason!r}); only its tombstone remains")
