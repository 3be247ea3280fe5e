"""Finding a run's head (spec/v2.md section 4 "Finding the head"; format.md 9 for version 1).

Version 2 stores on backends that list from a key start from the run's head hint: a bounded
number of requests whatever the history's length. Otherwise, and whenever the hint cannot
tell, one listing of the run. A hint is never trusted: the record it names must exist and be
visible, and everything above it is listed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import attrs

from ckptfs.errors import FormatError, MissingObject, NotFound
from ckptfs.format.lifecycle import Retired
from ckptfs.format.models import RunRecord
from ckptfs.format.names import EXPIRY, parse_seq_name, run_dir
from ckptfs.store.lifecycle import read_retired, record_names_of
from ckptfs.store.records import read_hint, retired_in, seqs_after

if TYPE_CHECKING:
    from ckptfs.store.repository import Repository


@attrs.frozen
class HeadLook:
    """What finding a run's head learned: the head record (None: the run has none), the run's
    retired marker as read then, and which expiry overrides of the run exist when the listing
    showed them (their names relative to the run's folder; None when unknown).

    A look is a moment's reading, like the requests it saves: the operation that found the
    head may use it for its own checks (erased, fenced, expired) instead of asking again, and
    must not keep it beyond that operation."""

    record: RunRecord | None
    retired: Retired | None
    expiry_names: frozenset[str] | None = None


def find_head(repo: Repository, run_id: str) -> RunRecord | None:
    """The record with the highest visible sequence number of ``run_id``, or None."""
    return look_for_head(repo, run_id).record


def look_for_head(repo: Repository, run_id: str) -> HeadLook:
    """``find_head``, with the retired marker and expiry overrides it saw on the way. A
    damaged head record raises its error with what to do (``ckptfs repair``)."""
    try:
        return _look(repo, run_id)
    except (FormatError, MissingObject) as e:
        from ckptfs.store.resolve import damaged_head  # resolve imports this module

        raise damaged_head(repo, run_id, e) from e


def _look(repo: Repository, run_id: str) -> HeadLook:
    if repo.config.version >= 2:
        found = head_from_hint(repo, run_id)
        if found is not None:
            return found
    listing = record_names_of(repo.storage, repo.storage.listing(run_dir(run_id)))
    retired = read_retired(repo.storage, run_id) if listing else None
    if retired is None:  # the greatest record name is the head: look from the end
        top = next((n for n in sorted(listing, reverse=True) if parse_seq_name(n)), None)
        return HeadLook(None if top is None else repo.record(run_id, int(top)), None)
    names = [n for n in listing if parse_seq_name(n)]
    visible = [s for s in map(int, names) if retired.visible(s)]  # strays are not heads
    return HeadLook(repo.record(run_id, max(visible)) if visible else None, retired)


def head_from_hint(repo: Repository, run_id: str) -> HeadLook | None:
    """The head found forward from the hint; None when this backend or this hint cannot tell
    (the caller lists the run). The listing after the hint holds every retired marker and
    expiry override of the run (they sort after the record names): the marker is read from
    it without listing ``retired/`` again (spec/v2.md 4)."""
    storage = repo.storage
    hint = read_hint(storage, run_id)
    h = hint.seq if hint is not None else 0
    after = seqs_after(storage, run_id, h)
    if after is None:
        return None
    above, other = after
    throughs = retired_in(other)
    retired = read_retired(storage, run_id, throughs) if throughs else None
    expiry = frozenset(n for n in other if n == EXPIRY or n.startswith(EXPIRY + "-"))
    found = _visible_top(repo, run_id, above, h, retired)
    if found is None:
        return None
    return HeadLook(found or None, retired, expiry)


def _visible_top(repo: Repository, run_id: str, above: list[int], h: int,
                 retired: Retired | None) -> RunRecord | Literal[False] | None:
    """The highest visible record among ``above``, else the hint's own record ``h``; False
    when the run has no records at all; None when the hint is ahead (list the run)."""
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
