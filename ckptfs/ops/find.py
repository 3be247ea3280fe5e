"""Find snapshots by label and entry name across runs (issue 35 item 5): ``ckptfs find``.

By default only each run's head is looked at: one listing of ``runs/`` for the run ids, then
per run (only those ``run_glob`` keeps: the filter costs no request) its head search, which on
a version 2 store on S3 is the head hint, one listing forward from it and the head record
(whose header carries the manifest): about 3 requests per run, whatever its length (measured
in tests/test_restore_find.py). With ``all_snapshots`` every retained snapshot is looked at:
per run one listing and one ranged read of each record's header (overlapped, in batches), and
on a version 1 store one read more per snapshot for its manifest. Matching is on manifests
only: no entry content is read.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterator, Sequence

import attrs

from ckptfs.errors import CkptfsError
from ckptfs.format.models import Manifest
from ckptfs.ops.runscan import list_run, read_records
from ckptfs.store.repository import Repository, Snapshot


@attrs.frozen
class Query:
    """``labels``: (key, value) pairs a snapshot label must have each (value None: the key
    with any value), on the snapshot or on one of its entries; ``entries``: globs an entry
    name must match (one entry for each glob); ``run_glob``: globs of run ids (any)."""

    labels: tuple[tuple[str, str | None], ...] = ()
    entries: tuple[str, ...] = ()
    run_globs: tuple[str, ...] = ()

    def run_ok(self, run_id: str) -> bool:
        return not self.run_globs or any(fnmatch.fnmatchcase(run_id, g) for g in self.run_globs)

    def matches(self, m: Manifest) -> tuple[list[str], dict[str, str]] | None:
        """The entry names that matched and the labels that did (None: no match)."""
        names = sorted(m.entries)
        hit_entries: set[str] = set()
        for g in self.entries:
            found = [n for n in names if fnmatch.fnmatchcase(n, g)]
            if not found:
                return None
            hit_entries.update(found)
        hit_labels: dict[str, str] = {}
        for k, v in self.labels:
            if k in m.labels and (v is None or m.labels[k] == v):
                hit_labels[k] = m.labels[k]
                continue
            where = [n for n, e in m.entries.items()
                     if k in e.labels and (v is None or e.labels[k] == v)]
            if not where:
                return None
            hit_labels[f"{where[0]}:{k}"] = m.entries[where[0]].labels[k]
            hit_entries.update(where)
        return sorted(hit_entries), hit_labels


@attrs.frozen
class Found:
    snapshot: Snapshot
    entries: list[str]
    labels: dict[str, str]

    def to_json(self) -> dict[str, object]:
        m = self.snapshot.manifest
        return {"run": m.run, "seq": m.seq, "snapshot": self.snapshot.id,
                "boundary": m.boundary, "created": m.created, "entries": self.entries,
                "labels": dict(m.labels), "matched_labels": self.labels}


@attrs.define
class FindReport:
    runs: int = 0
    snapshots: int = 0
    found: list[Found] = attrs.field(factory=list)
    problems: list[str] = attrs.field(factory=list)

    def to_json(self) -> dict[str, object]:
        return {"runs": self.runs, "snapshots": self.snapshots,
                "found": [f.to_json() for f in self.found], "problems": self.problems}


def find(repo: Repository, query: Query, *, all_snapshots: bool = False,
         limit: int | None = None, progress: Callable[[str], None] | None = None) -> FindReport:
    """The snapshots ``query`` matches: each run's head, or every retained snapshot. A run or
    record that cannot be read is a problem (named), not the end of the search."""
    report = FindReport()
    for run_id in sorted(repo.run_ids()):
        if not query.run_ok(run_id):
            continue
        report.runs += 1
        if progress:
            progress(run_id)
        for snap in _snapshots(repo, run_id, all_snapshots, report.problems):
            report.snapshots += 1
            hit = query.matches(snap.manifest)
            if hit is not None:
                report.found.append(Found(snap, *hit))
                if limit is not None and len(report.found) >= limit:
                    return report
    return report


def _snapshots(repo: Repository, run_id: str, every: bool,
               problems: list[str]) -> Iterator[Snapshot]:
    """The run's head, or every visible snapshot (nothing kept after the run: a store of
    thousands of runs is searched in the memory of one run's record headers)."""
    if not every:
        try:
            look = repo.head_look(run_id)
            if look.record is not None:
                yield repo._recorded(look.record)
        except CkptfsError as e:
            problems.append(f"{run_id}: {e.category}: {e}")
        return
    try:
        listing = list_run(repo.storage, run_id)
        reads = read_records(repo, run_id, [(q, listing.records.get(q)) for q in listing.visible])
    except CkptfsError as e:
        problems.append(f"{run_id}: {e.category}: {e}")
        return
    for got in reads:
        try:
            if got.error is not None or got.record is None:
                raise got.error or CkptfsError("unreadable")
            yield repo._recorded(got.record)
        except CkptfsError as e:
            problems.append(f"{run_id}@{got.seq}: {e.category}: {e}")


def parse_labels(items: Sequence[str]) -> tuple[tuple[str, str | None], ...]:
    """``K=V`` (that value) or ``K`` (any value) pairs; ValueError for an empty key."""
    out: list[tuple[str, str | None]] = []
    for kv in items:
        k, eq, v = kv.partition("=")
        if not k:
            raise ValueError(f"--label takes K=V or K, not {kv!r}")
        out.append((k, v if eq else None))
    return tuple(out)


__all__ = ["FindReport", "Found", "Query", "find", "parse_labels"]
