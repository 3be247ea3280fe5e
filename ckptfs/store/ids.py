"""Looking up a snapshot by id (spec/v2.md section 7 "Looking up a snapshot by id").

A version 2 store has no object named by the snapshot id: the id is in each run record's
header. A lookup reads the ids this process learned (records it committed or read), else the
head of every record until one names the id: O(records) requests, the documented cost.
Version 1 manifests are objects named by their id and are listed by hex prefix.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from ckptfs.errors import FormatError, NotFound
from ckptfs.format.containers import is_container
from ckptfs.format.digest import Digest
from ckptfs.format.names import SNAPSHOTS
from ckptfs.store.listing import object_digest
from ckptfs.store.records import header_snapshot, scan_records

if TYPE_CHECKING:
    from ckptfs.store.repository import Repository


def record_ids(repo: Repository) -> Iterator[tuple[str, int, Digest]]:
    """Every v2 record's (run, seq, snapshot id), from the head of each record file (the whole
    record when its header is longer), each remembered in ``repo.ids``."""
    for run_id, seq, first in scan_records(repo.storage, repo.run_ids()):
        got = header_snapshot(first)
        if got is None and is_container(first):
            try:
                got = repo.record(run_id, seq).snapshot
            except (NotFound, FormatError):
                continue
        if got is not None:
            repo.ids[got] = (run_id, seq)
            yield run_id, seq, got


def find_record(repo: Repository, d: Digest) -> tuple[str, int] | None:
    """Where snapshot ``d``'s v2 record is: known to this process, else by reading the head of
    every record until one names it."""
    hit = repo.ids.get(d)
    if hit is not None:
        return hit
    return next(((r, s) for r, s, got in record_ids(repo) if got == d), None)


def ids_with_prefix(repo: Repository, prefix: str) -> list[Digest]:
    """Ids of v1 manifest objects and v2 records starting with hex ``prefix``, sorted."""
    fan = prefix[:2]
    found = (object_digest(fan, n) for n in repo.storage.listing(f"{SNAPSHOTS}/{fan}").files
             if n.startswith(prefix))  # names that are no object's are ignored (3.1)
    out = {d for d in found if d is not None}
    if repo.config.version >= 2:
        out |= {got for _, _, got in record_ids(repo) if got.hex.startswith(prefix)}
    return sorted(out)
