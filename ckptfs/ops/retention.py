"""Retention policies (restic's ``forget``): decide which snapshots to keep, forget the rest.

A snapshot is kept when any rule keeps it. A run's head is kept whenever any other snapshot
of the run is kept (a head goes only with its whole run; that is no fence: a writer holding the
head may go on at head + 1, spec/retention.md "Forget rule"). Forgetting deletes run records
only; ``gc`` later reclaims the manifests and chunks nobody uses.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Iterable, Mapping, Sequence

import attrs

from ckptfs import observe
from ckptfs.errors import CkptfsError
from ckptfs.format.digest import Digest
from ckptfs.ops.lease import MaintenanceLease
from ckptfs.ops.usage import SnapInfo, build_index
from ckptfs.store import header_bases
from ckptfs.store.lifecycle import retire
from ckptfs.store.records import snapshot_ids
from ckptfs.store.repository import Repository

_DURATION = re.compile(r"([0-9]+)([smhdwy])")  # ASCII digits only (\d takes any script's)
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000,
            "y": 365 * 86_400_000}


def parse_duration(text: str) -> int:
    """``90s``, ``15m``, ``36h``, ``7d``, ``2w``, ``1y`` or combinations like ``1d12h`` -> ms."""
    t = text.strip()
    if t.isascii() and t.isdigit():
        return int(t) * 1000
    parts = _DURATION.findall(t)
    if not parts or "".join(n + u for n, u in parts) != t:
        raise ValueError(f"bad duration {text!r}: use e.g. 90s, 15m, 36h, 7d, 2w, 1y, 1d12h")
    return sum(int(n) * _UNIT_MS[u] for n, u in parts)


@attrs.frozen
class Policy:
    """What to keep. An empty policy keeps everything (forget refuses to run with one)."""

    keep_last: int | None = None
    keep_within_ms: int | None = None
    keep_labels: tuple[tuple[str, str], ...] = ()
    keep_unfinished_heads: bool = False
    #: restic's --keep-hourly/daily/weekly/monthly/yearly: for each of the last N periods (UTC
    #: hours, days, ISO weeks, months, years) that have snapshots, the newest one of that period
    keep_periods: tuple[tuple[str, int], ...] = ()

    @property
    def empty(self) -> bool:
        return (self.keep_last is None and self.keep_within_ms is None and not self.keep_labels
                and not self.keep_unfinished_heads and not self.keep_periods)


@attrs.frozen
class Decision:
    """The verdict on one snapshot and why."""

    run: str
    seq: int
    #: None when the snapshot's record was not read: forget decided by seq from the run
    #: listing and forgot it (spec/v2.md 9.1)
    id: Digest | None
    keep: bool
    reasons: tuple[str, ...]


def _period(kind: str, created_ms: int) -> tuple[int, ...]:
    """The UTC period of a creation time: ``hourly``, ``daily``, ``weekly`` (ISO week),
    ``monthly`` or ``yearly``."""
    import datetime

    t = datetime.datetime.fromtimestamp(created_ms / 1000, tz=datetime.timezone.utc)
    if kind == "hourly":
        return (t.year, t.month, t.day, t.hour)
    if kind == "daily":
        return (t.year, t.month, t.day)
    if kind == "weekly":
        iso = t.isocalendar()
        return (iso[0], iso[1])
    if kind == "monthly":
        return (t.year, t.month)
    if kind == "yearly":
        return (t.year,)
    raise ValueError(f"unknown period {kind!r}: hourly, daily, weekly, monthly or yearly")


PERIODS = ("hourly", "daily", "weekly", "monthly", "yearly")


def _keep_periods(hist: Sequence[SnapInfo], kind: str, n: int,
                  reasons: dict[int, list[str]]) -> None:
    """Keep the newest snapshot of each of the last ``n`` periods that have one (restic)."""
    seen: list[tuple[int, ...]] = []
    for s in sorted(hist, key=lambda s: (s.created, s.seq), reverse=True):
        p = _period(kind, s.created)
        if p in seen:
            continue
        if len(seen) >= n:
            break
        seen.append(p)
        reasons[s.seq].append(f"{kind} {len(seen)}/{n}")


def decide(snaps: Sequence[SnapInfo], policy: Policy, now: int) -> list[Decision]:
    """Apply ``policy`` to retained snapshots (any order); pure, for synthetic histories too."""
    by_run: dict[str, list[SnapInfo]] = {}
    for s in snaps:
        by_run.setdefault(s.run, []).append(s)
    out: list[Decision] = []
    for run_id in sorted(by_run):
        hist = sorted(by_run[run_id], key=lambda s: s.seq)
        head = hist[-1]
        reasons: dict[int, list[str]] = {s.seq: [] for s in hist}
        if policy.keep_last:
            for s in hist[-policy.keep_last:]:
                reasons[s.seq].append(f"last {policy.keep_last}")
        for s in hist:
            if policy.keep_within_ms is not None and s.created >= now - policy.keep_within_ms:
                reasons[s.seq].append("within")
            for k, v in policy.keep_labels:
                if s.labels.get(k) == v:
                    reasons[s.seq].append(f"label {k}={v}")
        for kind, n in policy.keep_periods:
            _keep_periods(hist, kind, n, reasons)
        if policy.keep_unfinished_heads and head.boundary != "final":
            reasons[head.seq].append("unfinished head")
        if any(reasons.values()) and not reasons[head.seq]:
            reasons[head.seq].append("head (goes only with its whole run)")
        out += [Decision(s.run, s.seq, s.id, bool(reasons[s.seq]), tuple(reasons[s.seq]))
                for s in hist]
    return out


@attrs.define
class ForgetReport:
    """What forget removed (or, with dry_run, would remove) and the bytes gc would then free."""

    dry_run: bool
    decisions: list[Decision]
    #: None: not counted (a forget decided from the listings reads no record it forgets;
    #: ``dry_run`` reads them all and counts)
    bytes_freed: int | None
    chunks_freed: int | None
    runs_removed: list[str]
    problems: list[str]

    @property
    def forgotten(self) -> list[Decision]:
        return [d for d in self.decisions if not d.keep]

    def to_json(self) -> dict[str, object]:
        return {"dry_run": self.dry_run, "bytes_freed": self.bytes_freed,
                "chunks_freed": self.chunks_freed, "runs_removed": self.runs_removed,
                "forget": [{"run": d.run, "seq": d.seq, "id": _text(d.id)}
                           for d in self.forgotten],
                "keep": [{"run": d.run, "seq": d.seq, "id": _text(d.id),
                          "reasons": list(d.reasons)} for d in self.decisions if d.keep],
                "problems": self.problems}


def _text(d: Digest | None) -> str | None:
    return None if d is None else d.text


def forget(repo: Repository, policy: Policy, *, runs: Iterable[str] | None = None,
           dry_run: bool = False, now: int | None = None) -> ForgetReport:
    """Forget every retained snapshot ``policy`` does not keep; ``dry_run`` changes nothing."""
    if policy.empty:
        raise ValueError("no keep rule given: forget would remove every snapshot. Pass at "
                         "least one of keep_last, keep_within, keep_labels, keep_unfinished_heads")
    repo.check_writable()  # a version 1 store is upgraded first (dry runs included)
    now = int(time.time() * 1000) if now is None else now
    from ckptfs.ops.forget_listing import by_seq

    def plan() -> ForgetReport:
        if by_seq(policy) and not dry_run:
            return _plan_by_seq(repo, policy, runs, now)
        idx = build_index(repo, runs)
        bad_runs = {p.split("@", 1)[0] for p in idx.problems}
        decisions = _keep_bases(repo, [d for d in decide(idx.snaps, policy, now)
                                       if d.run not in bad_runs])
        gone_ids = {(d.run, d.seq) for d in decisions if not d.keep}
        freed, nchunks = idx.freed_by(s for s in idx.snaps if (s.run, s.seq) in gone_ids)
        removed = sorted({d.run for d in decisions} - {d.run for d in decisions if d.keep})
        return ForgetReport(dry_run, decisions, freed, nchunks, removed, idx.problems)

    if dry_run:
        return plan()
    t0_ns = observe.now_ns()
    with MaintenanceLease(repo.storage, deletes=False, config=repo.config) as lease:  # records only
        report = plan()
        report.problems += _retire_all(repo, lease, _group(report.forgotten), now)
    observe.maintenance("forget", t0_ns, snapshots=len(report.forgotten),
                        runs_removed=len(report.runs_removed), problems=len(report.problems))
    return report


def _plan_by_seq(repo: Repository, policy: Policy, runs: Iterable[str] | None,
                 now: int) -> ForgetReport:
    """The plan from the run listings (``ops.forget_listing``): the records it forgets are not
    read, so their ids and the bytes gc would free are not known (None)."""
    from ckptfs.ops.forget_listing import plan_by_seq

    p = plan_by_seq(repo, policy.keep_last, runs)
    decisions = []
    for d in decide(p.snaps, policy, now):
        if d.run in p.bad_runs:
            continue
        if (d.run, d.seq) in p.unread:
            if d.keep:  # cannot happen: every seq a by-seq policy keeps was read
                raise CkptfsError(f"forget: {d.run}@{d.seq} kept but not read (a bug)")
            d = attrs.evolve(d, id=None)
        decisions.append(d)
    decisions = _keep_bases(repo, decisions)
    removed = sorted({d.run for d in decisions} - {d.run for d in decisions if d.keep})
    return ForgetReport(False, decisions, None, None, removed, p.problems)


#: the reason a snapshot the policy would forget is kept (spec/v2.md 9.1)
BASE_REASON = "base of a kept record (delta-headers)"


def _keep_bases(repo: Repository, decisions: list[Decision]) -> list[Decision]:
    """``decisions`` with every snapshot whose record a kept record of its run needs as a
    header base kept (spec/v2.md 9.1, store feature ``delta-headers``; ``retire`` keeps them
    whatever it is told, this makes the report say so)."""
    if not header_bases.allowed(repo.storage):
        return decisions
    runs: dict[str, tuple[list[int], set[int]]] = {}
    for d in decisions:
        keep, drop = runs.setdefault(d.run, ([], set()))
        if d.keep:
            keep.append(d.seq)
        else:
            drop.add(d.seq)
    held = {(run_id, s) for run_id, (keep, drop) in runs.items() if keep and drop
            for s in header_bases.held_bases(repo.storage, run_id, keep, drop)}
    return [attrs.evolve(d, keep=True, reasons=(BASE_REASON,)) if (d.run, d.seq) in held else d
            for d in decisions]


def forget_snapshots(repo: Repository, drop: Mapping[str, Iterable[int]], *,
                     now: int | None = None) -> None:
    """Forget exactly the snapshots ``drop`` names ({run: seqs}), under the maintenance lease
    (for callers that decide themselves, like the LangGraph saver). A run's head may go only
    with its whole run; a problem raises CkptfsError after the other runs are done."""
    if not any(drop.values()):
        return
    repo.check_writable()
    now = int(time.time() * 1000) if now is None else now
    t0_ns = observe.now_ns()
    with MaintenanceLease(repo.storage, deletes=False, config=repo.config) as lease:  # records only
        problems = _retire_all(repo, lease, {r: set(s) for r, s in drop.items()}, now)
    observe.maintenance("forget", t0_ns, snapshots=sum(len(set(s)) for s in drop.values()),
                        problems=len(problems))
    if problems:
        raise CkptfsError("forget: " + "; ".join(problems))


def _retire_all(repo: Repository, lease: MaintenanceLease, drop: Mapping[str, set[int]],
                now: int) -> list[str]:
    """Retire each run's ``drop`` seqs (their records become strays); the problems met."""
    problems = []
    for run_id, seqs in drop.items():
        lease.check()
        try:
            retire(repo.storage, run_id, repo.seqs(run_id), seqs, now,
                   functools.partial(snapshot_ids, repo.storage, run_id))
        except (CkptfsError, ValueError) as e:
            problems.append(f"{run_id}: {e}")
    return problems


def _group(ds: Iterable[Decision]) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for d in ds:
        out.setdefault(d.run, set()).add(d.seq)
    return out
