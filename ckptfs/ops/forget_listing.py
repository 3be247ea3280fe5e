"""Forget decided from the run listings (format v2, spec/v2.md 9.1): read only what is kept.

A policy of ``keep_last`` and ``keep_unfinished_heads`` judges a snapshot by its seq alone
(and the head by its boundary): one listing of each run decides it. On an object store
reading every record's header costs a request per snapshot (issue 15: 500 GETs to forget 500
snapshots), so here only the records forget *keeps* are read (the last ``keep_last`` and the
head, for their ids and the head's boundary, and to refuse a run whose kept records are
damaged, as the full plan does). A forgotten snapshot's id is then not known (its
``Decision.id`` is None) and the bytes gc would free are not counted (None): ``dry_run``
reads every record and counts them. A damaged record that is forgotten is forgotten like
any other (``ckptfs verify`` reports damage; forgetting it loses nothing readable).
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from ckptfs.errors import CkptfsError
from ckptfs.format.digest import Digest
from ckptfs.ops.runscan import list_run, read_records
from ckptfs.ops.usage import SnapInfo
from ckptfs.store.repository import Repository

#: the id unread snapshots carry inside ``decide`` (replaced by None in the decisions)
_UNREAD = Digest.of(b"")


def by_seq(policy: object) -> bool:
    """True when ``policy`` (a ``retention.Policy``) judges by seqs and the head's boundary
    only: no rule that needs each snapshot's creation time or labels."""
    return (getattr(policy, "keep_within_ms") is None and not getattr(policy, "keep_labels")
            and not getattr(policy, "keep_periods"))


@attrs.frozen
class SeqPlan:
    """What the listings and the kept records show: the snapshots to judge (unread ones as
    placeholders), which were not read, and the problems met."""

    snaps: list[SnapInfo]
    unread: frozenset[tuple[str, int]]
    bad_runs: frozenset[str]
    problems: list[str]


def plan_by_seq(repo: Repository, keep_last: int | None,
                runs: Iterable[str] | None = None) -> SeqPlan:
    """One listing per run; the headers of the last ``keep_last`` visible records and of the
    head only (read together, overlapped)."""
    snaps: list[SnapInfo] = []
    unread: set[tuple[str, int]] = set()
    bad: set[str] = set()
    problems: list[str] = []
    for run_id in (list(runs) if runs is not None else repo.run_ids()):
        listing = list_run(repo.storage, run_id)
        seqs = listing.visible
        if not seqs:
            continue
        need = set(seqs[-keep_last:]) if keep_last else set()
        need.add(seqs[-1])  # the head: kept with any other snapshot, judged by its boundary
        got = {r.seq: r for r in read_records(repo, run_id, [(s, listing.records[s])
                                                             for s in sorted(need)])}
        for s in seqs:
            r = got.get(s)
            if r is None:
                snaps.append(SnapInfo(run_id, s, _UNREAD, 0, "", {}, None, frozenset(), 0, ()))
                unread.add((run_id, s))
                continue
            try:
                if r.error is not None:
                    raise r.error
                assert r.record is not None
                snap = repo._recorded(r.record)  # the manifest is in the record: no request
            except CkptfsError as e:
                problems.append(f"{run_id}@{s}: {e}")
                bad.add(run_id)
                continue
            m = snap.manifest
            snaps.append(SnapInfo(run_id, s, snap.digest, m.created, m.boundary,
                                  dict(m.labels), None, frozenset(), 0, ()))
    return SeqPlan(snaps, frozenset(unread), frozenset(bad), problems)
