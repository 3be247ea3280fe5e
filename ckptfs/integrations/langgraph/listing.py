"""How CkptfsSaver learns a run's visible sequence numbers without listing its whole history
on every user turn (issue 14): a whole listing once, then only what lies above the known head.

A run's visible records below its head change only through its retired markers (forget and
prune write one before deleting anything, erase writes a fence first; spec/retention.md), and a
new record is only ever created above the head. So a saver that knows the run up to ``top``
and the markers as they were is up to date when the markers are unchanged and nothing lies
above ``top``: one listing after ``top`` on a backend that lists from a key (it returns the
markers too, whose names sort after every record's), else a probe of the next record names
and a listing of the (usually absent) retired folder. Changed markers mean a whole listing.

A run that has no retired markers holds every record from 1 to its head (each commit takes
the next sequence number), so a first look needs no listing of the history either on a
version 2 store with a head hint: the hint and one listing after it (``ckptfs.store.heads``).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from ckptfs.format.lifecycle import Retired
from ckptfs.format.names import SEQ_WIDTH, record_path, run_dir
from ckptfs.store.lifecycle import read_retired, record_names_of, retired_throughs
from ckptfs.store.records import read_hint, retired_in, seqs_after
from ckptfs.store.repository import Repository

#: on a backend that cannot list from a key, at most this many next records are probed one by
#: one; more (another writer ran far ahead) and the run is listed whole
PROBES = 32
#: the name of record 1
_FIRST = "1".rjust(SEQ_WIDTH, "0")


@attrs.frozen
class Marks:
    """A run's retired markers as a saver last saw them: their ``through`` values and the
    authoritative (highest) one's content (a marker is replaced in place when a run is
    forgotten again at the same ``through``, so names alone would not tell)."""

    throughs: tuple[int, ...] = ()
    top: Retired | None = None


def read_marks(repo: Repository, run_id: str, throughs: list[int] | None = None) -> Marks:
    """The run's markers now (``throughs``: their names when the caller listed them)."""
    names = retired_throughs(repo.storage, run_id) if throughs is None else sorted(throughs)
    return Marks(tuple(names), read_retired(repo.storage, run_id, names) if names else None)


def whole(repo: Repository, run_id: str) -> tuple[list[int], Marks]:
    """Every visible sequence number, ascending, from one listing of the run, and the markers
    read before it (a forget that lands in between changes them: the next look lists again)."""
    marks = read_marks(repo, run_id)
    repo.load_config()  # a store this reader cannot read fails before anything else
    seqs = record_seqs(record_names_of(repo.storage, repo.storage.listing(run_dir(run_id))))
    if marks.top is not None:
        seqs = [s for s in seqs if marks.top.visible(s)]
    return seqs, marks


def record_seqs(names: Sequence[str]) -> list[int]:
    """The sequence numbers (>= 1) of the record names among ``names``, a listing sorted by
    name (fixed-width names sort as their numbers): ``parse_seq_name`` inlined, about twice
    as fast on a run of thousands of records; a run whose records are 1 to n, the usual case,
    is recognised from its first and last names once every name is checked in one pass."""
    cand = [n for n in names if len(n) == SEQ_WIDTH]
    joined = "".join(cand)
    if joined.isascii() and joined.isdigit():  # every candidate is a record name
        # equal-width digit strings sorted and distinct are increasing numbers, so 1 .. n
        # in n names is every number from 1 to n
        if (cand and cand[0] == _FIRST and int(cand[-1]) == len(cand)
                and all(a < b for a, b in zip(cand, cand[1:]))):
            return list(range(1, len(cand) + 1))
        out = [int(n) for n in cand]
    else:
        out = [int(n) for n in cand if n.isascii() and n.isdigit()]
    if out and (out[0] < 1 or out[-1] >= 1 << 64):
        out = [s for s in out if 1 <= s < 1 << 64]
    if any(a >= b for a, b in zip(out, out[1:])):  # a backend that does not sort its listing
        out = sorted(set(out))
    return out


def above(repo: Repository, run_id: str, top: int, known: Marks
          ) -> list[int] | None:
    """The visible sequence numbers above ``top`` when the markers are still ``known``; None
    when they changed (or too many records are new on a backend that probes): list it whole."""
    storage = repo.storage
    after = seqs_after(storage, run_id, top)
    new: list[int] = []
    if after is not None:
        new, other = after
        marks = read_marks(repo, run_id, retired_in(other))
    else:
        s = top + 1
        while storage.exists(record_path(run_id, s)):
            if len(new) >= PROBES:
                return None
            new.append(s)
            s += 1
        marks = read_marks(repo, run_id)
    if marks != known:
        return None
    new.sort()
    return [s for s in new if marks.top is None or marks.top.visible(s)]


def first_look(repo: Repository, run_id: str) -> tuple[list[int], Marks]:
    """The visible sequence numbers of a run this saver has not seen. A run without retired
    markers holds records 1 to its head, none missing: on a version 2 store on a backend that
    lists from a key, its head comes from the head hint and one listing after it (spec/v2.md
    section 4). Runs with markers, other backends (spec/v2.md 4: they list the whole run; a
    probe of names could miss records above a damaged gap) and version 1 stores are listed
    whole. A record below the hint found missing later sends the saver to a whole listing
    (``RunLookup._fresh``)."""
    storage = repo.storage
    cfg = repo.load_config()
    if cfg is not None and cfg.version >= 2 and storage.lists_after:
        hint = read_hint(storage, run_id)
        if hint is not None and hint.seq > 0:
            # the listing after the hint shows the markers too: None when there are any
            new = above(repo, run_id, hint.seq, Marks())
            if new is not None and (new or storage.exists(record_path(run_id, hint.seq))):
                return list(range(1, (new[-1] if new else hint.seq) + 1)), Marks()
    return whole(repo, run_id)
