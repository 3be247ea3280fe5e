"""Repair a run whose head record is damaged (issue 35.3; spec/format.md 8.4).

A reader MUST NOT fall back from a damaged head to a lower record (format.md 8.3: a writer
would then reuse a taken sequence number), so one flipped byte in a run's newest record
blocks ``resume`` of the run and of every snapshot of it. In the spirit of restic's
``repair snapshots``, ``repair_run`` commits the run's last good snapshot again, as a new
record above the damaged ones: the same entries, ledger, labels, schema and boundary, its
parent the good snapshot, and the extension key ``repair`` saying which records it set
aside. Nothing is deleted or rewritten: the damaged records stay where they are, as
evidence, and readers that know the key (``verify``, ``log``) report them as repaired.
"""

from __future__ import annotations

import attrs

from ckptfs.errors import ConflictError, CorruptObject, FormatError, MissingObject, NotFound
from ckptfs.format.models import Manifest
from ckptfs.ops.retention import forget_snapshots
from ckptfs.store.objects import ledger_results
from ckptfs.store.repository import Repository, Snapshot, now_ms

#: the manifest extension key a repair record carries (format.md 8.4)
REPAIR_KEY = "repair"
#: errors that mean "this record (or the manifest it carries) is damaged", as opposed to a
#: store that cannot be reached, an erased run or a newer format (those are not repaired)
DAMAGE = (FormatError, CorruptObject, MissingObject)


@attrs.frozen
class Damaged:
    """A record set aside: its seq and what is wrong with it."""

    seq: int
    category: str
    why: str

    def to_json(self) -> dict[str, object]:
        return {"seq": self.seq, "category": self.category, "why": self.why}


@attrs.frozen
class RepairResult:
    """What ``repair_run`` found and did. ``new_seq`` is None when the head was sound."""

    run: str
    damaged: tuple[Damaged, ...]
    good: Snapshot | None
    new_seq: int | None
    new_snapshot: str | None
    dry_run: bool
    #: the damaged records forgotten (``forget``), or that would be (with ``dry_run``)
    forgotten: tuple[int, ...] = ()

    @property
    def needed(self) -> bool:
        return bool(self.damaged)

    def to_json(self) -> dict[str, object]:
        g = self.good
        return {"run": self.run, "dry_run": self.dry_run, "needed": self.needed,
                "damaged": [d.to_json() for d in self.damaged],
                "good": None if g is None else {"seq": g.seq, "snapshot": g.id},
                "new_seq": self.new_seq, "new_snapshot": self.new_snapshot,
                "forgotten": list(self.forgotten)}


def repaired_seqs(m: Manifest) -> tuple[int, ...]:
    """The damaged records a repair manifest names (empty for any other manifest, or for a
    malformed key: the key is informational, readers MUST NOT fail on it)."""
    r = m.extra.get(REPAIR_KEY)
    if not isinstance(r, dict):
        return ()
    d = r.get("damaged")
    if not isinstance(d, list):
        return ()
    return tuple(s for s in d if isinstance(s, int) and not isinstance(s, bool) and s >= 1)


def set_aside(repo: Repository, run_id: str, seqs: list[int]) -> list[int]:
    """The visible records of the run that a repair set aside: damaged, and named in the
    ``repair`` key of a readable manifest of the run (reads every record of the run)."""
    named: set[int] = set()
    unreadable: list[int] = []
    for seq in seqs:
        try:
            named.update(repaired_seqs(repo.snapshot_at(run_id, seq).manifest))
        except DAMAGE:
            unreadable.append(seq)
    return [s for s in unreadable if s in named]


def repair_run(repo: Repository, run_id: str, *, writer: str, dry_run: bool = False,
               forget: bool = False, now: int | None = None) -> RepairResult:
    """Make the last readable snapshot of ``run_id`` its head again, when the head is damaged.

    Reads the run's records from the newest down to the first sound one (each damaged one is
    reported); commits that snapshot's content at the head's seq + 1 unless ``dry_run``.
    Raises NotFound for an unknown run, ErasedError for an erased or fenced one, and
    FormatError when no record of the run can be read (nothing to repair from).

    ``forget``: then forget the damaged records (those found now, or those an earlier repair
    at the head named): they become strays that gc deletes, and gc, which frees no
    container while a visible record cannot be read, frees space again."""
    repo.config
    repo.check_not_erased(run_id)
    seqs = repo.seqs(run_id)
    if not seqs:
        raise NotFound(f"no run {run_id!r} in {repo.url}; 'ckptfs ls {repo.url}' lists the runs")
    damaged: list[Damaged] = []
    good: Snapshot | None = None
    for seq in reversed(seqs):
        try:
            good = repo.snapshot_at(run_id, seq)
            break
        except DAMAGE as e:
            damaged.append(Damaged(seq, e.category, str(e)))
    if not damaged:
        assert good is not None
        earlier = set_aside(repo, run_id, seqs) if forget else []
        if earlier and not dry_run:
            forget_snapshots(repo, {run_id: set(earlier)})
        return RepairResult(run_id, (), good, None, None, dry_run,
                            forgotten=tuple(earlier) if forget else ())
    if good is None:
        raise FormatError(
            f"run {run_id!r}: none of its {len(seqs)} records can be read, so there is no good "
            "snapshot to make its head. Copy the run back from a backup of the store "
            f"('ckptfs copy BACKUP {repo.url} --run {run_id}' into a fresh store), or erase "
            f"it ('ckptfs erase {repo.url} {run_id}').")
    new_seq = seqs[-1] + 1
    if dry_run:
        return RepairResult(run_id, tuple(damaged), good, new_seq, None, True,
                            forgotten=tuple(sorted(d.seq for d in damaged)) if forget else ())
    m = good.manifest
    extra = {k: v for k, v in m.extra.items() if k != REPAIR_KEY}
    extra[REPAIR_KEY] = {"damaged": sorted(d.seq for d in damaged), "from": good.seq}
    manifest = Manifest(
        run=run_id, seq=new_seq, boundary=m.boundary, created=now_ms() if now is None else now, writer=writer,
        schema=m.schema, entries=m.entries, parent=good.digest, resumed_from=None,
        attempt=m.attempt, ledger=m.ledger, labels=m.labels, expires=m.expires,
        required=m.required, extra=extra)
    try:
        results = [c for cap in ledger_results(repo.objects, good.digest, m) for c in cap.chunks]
        # chunks the good snapshot names are located through its record, not written again
        chunks = repo.objects.unprotected_chunks(manifest, m, [], ())
        snap = repo.commit(manifest, chunks, results=results)
    except ConflictError as e:
        raise ConflictError(
            f"run {run_id!r}: a writer committed seq {new_seq} while the repair ran ({e}); run "
            "'ckptfs repair' again to see whether the run still needs it.") from None
    gone: tuple[int, ...] = ()
    if forget:
        gone = tuple(sorted(d.seq for d in damaged))
        forget_snapshots(repo, {run_id: set(gone)})
    return RepairResult(run_id, tuple(damaged), good, new_seq, snap.id, False, forgotten=gone)


__all__ = ["Damaged", "REPAIR_KEY", "RepairResult", "repair_run", "repaired_seqs"]
