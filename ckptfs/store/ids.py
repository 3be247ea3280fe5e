"""Looking up a snapshot by id (spec/v2.md section 7 "Looking up a snapshot by id").

A version 2 store has no object named by the snapshot id: the id is in each run record's
header. A lookup reads the ids this process learned (records it committed or read), else the
head of every record until one names the id: O(records) requests, the documented cost.
Version 1 manifests are objects named by their id and are listed by hex prefix.

Only visible records are snapshots (retention.md 3): a stray's id names none, and a prefix
counts visible records only. A visible record whose header cannot be decoded might be the one
sought, so a lookup that finds nothing else fails closed (``corrupt``), never ``not-found``
on a guess; damage to a stray does not matter (it is no snapshot).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import attrs

from ckptfs.errors import CorruptSnapshot, FormatError, NotFound
from ckptfs.format.containers import is_container
from ckptfs.format.digest import Digest
from ckptfs.format.lifecycle import Retired
from ckptfs.format.names import SNAPSHOTS, record_path
from ckptfs.store.lifecycle import read_retired
from ckptfs.store.listing import object_digest
from ckptfs.store.records import header_snapshot, scan_records

if TYPE_CHECKING:
    from ckptfs.store.repository import Repository


@attrs.define
class Scan:
    """What one scan of record headers met besides ids: visible records it could not decode."""

    damaged: list[str] = attrs.field(factory=list)

    def fail_closed(self, what: str) -> None:
        """``corrupt`` when a visible record could not be decoded (it may be the one sought)."""
        if self.damaged:
            raise CorruptSnapshot(
                f"{what}: the visible record {self.damaged[0]} cannot be decoded, and it may "
                f"be the one sought ({len(self.damaged)} such record(s)); run 'ckptfs verify'")


def record_ids(repo: Repository, scan: Scan | None = None
               ) -> Iterator[tuple[str, int, Digest, bool]]:
    """Every v2 record's (run, seq, snapshot id, visible), from the head of each record file
    (the whole record when its header is longer), each remembered in ``repo.ids``. A visible
    record that cannot be decoded is noted in ``scan`` (a stray's damage is ignored)."""
    retired: dict[str, Retired | None] = {}
    for run_id, seq, first in scan_records(repo.storage, repo.run_ids()):
        if run_id not in retired:
            retired[run_id] = read_retired(repo.storage, run_id)
        marker = retired[run_id]
        visible = marker is None or marker.visible(seq)
        got = header_snapshot(first)
        if got is None and is_container(first):
            try:
                got = repo.record(run_id, seq).snapshot
            except NotFound:
                continue
            except FormatError:
                if visible and scan is not None:
                    scan.damaged.append(record_path(run_id, seq))
                continue
        if got is not None:
            repo.ids[got] = (run_id, seq)
            yield run_id, seq, got, visible


def find_record(repo: Repository, d: Digest, scan: Scan | None = None) -> tuple[str, int] | None:
    """Where snapshot ``d``'s v2 record is: known to this process, else by reading the head of
    every record until one names it (a stray too: the caller then answers as for a stray)."""
    hit = repo.ids.get(d)
    if hit is not None:
        return hit
    return next(((r, s) for r, s, got, _ in record_ids(repo, scan) if got == d), None)


def ids_with_prefix(repo: Repository, prefix: str) -> list[Digest]:
    """Ids of v1 manifest objects and visible v2 records starting with hex ``prefix``, sorted;
    ``corrupt`` when a visible v2 record cannot be decoded (it might match)."""
    fan = prefix[:2]
    found = (object_digest(fan, n) for n in repo.storage.listing(f"{SNAPSHOTS}/{fan}").files
             if n.startswith(prefix))  # names that are no object's are ignored (3.1)
    out = {d for d in found if d is not None and _committed(repo, d)}
    if repo.config.version >= 2:
        scan = Scan()
        out |= {got for _, _, got, visible in record_ids(repo, scan)
                if visible and got.hex.startswith(prefix)}
        scan.fail_closed(f"snapshot prefix {prefix!r}")
    return sorted(out)


def _committed(repo: Repository, d: Digest) -> bool:
    """Whether the v1 manifest object ``d`` is a visible snapshot (its record points at it and
    is retained): an uncommitted or forgotten manifest is no candidate for a prefix."""
    try:
        repo.snapshot(d)
    except NotFound:
        return False
    return True
