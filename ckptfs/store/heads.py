"""Finding a run's head (spec/v2.md section 4 "Finding the head"; format.md 9 for version 1).

Version 2 stores on backends that list from a key start from the run's head hint: a bounded
number of requests whatever the history's length. Otherwise, and whenever the hint cannot
tell, one listing of the run. A hint is never trusted: the record it names must exist and be
visible, and everything above it is listed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from ckptfs.errors import NotFound
from ckptfs.format.models import RunRecord
from ckptfs.format.names import parse_seq_name, run_dir
from ckptfs.store.lifecycle import read_retired
from ckptfs.store.records import read_hint, seqs_after

if TYPE_CHECKING:
    from ckptfs.store.repository import Repository


def find_head(repo: Repository, run_id: str) -> RunRecord | None:
    """The record with the highest visible sequence number of ``run_id``, or None."""
    if repo.config.version >= 2:
        found = head_from_hint(repo, run_id)
        if found is not None:
            return found or None
    listing = repo.storage.list(run_dir(run_id))
    retired = read_retired(repo.storage, run_id) if listing else None
    if retired is None:  # the greatest record name is the head: look from the end
        top = next((n for n in sorted(listing, reverse=True) if parse_seq_name(n)), None)
        return None if top is None else repo.record(run_id, int(top))
    names = [n for n in listing if parse_seq_name(n)]
    visible = [s for s in map(int, names) if retired.visible(s)]  # strays are not heads
    return repo.record(run_id, max(visible)) if visible else None


def head_from_hint(repo: Repository, run_id: str) -> RunRecord | Literal[False] | None:
    """The head found forward from the hint; False when the run has no records; None when this
    backend or this hint cannot tell (the caller lists the run)."""
    storage = repo.storage
    hint = read_hint(storage, run_id)
    h = hint.seq if hint is not None else 0
    after = seqs_after(storage, run_id, h)
    if after is None:
        return None
    above, has_retired = after
    retired = read_retired(storage, run_id) if has_retired else None
    for seq in reversed(above):
        if retired is None or retired.visible(seq):
            return repo.record(run_id, seq)
    if h == 0:
        return False  # no records at all
    try:
        rec = repo.record(run_id, h)
    except NotFound:
        return None  # the hint is ahead (its record is gone): list the run
    if retired is not None and not retired.visible(h):
        return None
    return rec
