"""Copy runs from one store to another, incrementally, between any two backends.

The destination is a format version 2 store (created with the source's config when it has
none; a version 1 destination is refused: ``ckptfs upgrade`` it first); the source may be of
either version, so a copy turns a version 1 store into a version 2 one. Each run is copied by
``copy_run.RunCopy``: every source snapshot, in seq order, becomes one record in the
destination carrying the manifest's exact bytes (the snapshot id never changes) and locating
every chunk it names; bodies the destination does not hold are sent first. A run in the
destination is therefore always a prefix of the run in the source. Interrupted at any point,
the copy is resumed by running it again: records already present are skipped. Every chunk and
manifest is verified against its digest before it is written.

Before a run's records, its retention objects (expiry overrides, retired markers, tombstones)
are carried by ``copy_retention``: expired snapshots are not sent, forgotten and erased ones
never come back, and an erasure in the source is repeated in the destination. A copy is a
backup: the source's forgets are repeated only with ``mirror=True`` (and then never by deleting
a record). ``dry_run=True`` reports what a copy would do and writes nothing (``copy_plan``).

Chunk boundaries are the writer's choice (readers only concatenate), so a destination whose
config pins other chunker parameters still receives valid snapshots; they keep the source's
chunks, and later writes to the destination cut with its own parameters.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

import attrs

from ckptfs import observe
from ckptfs.errors import ConflictError
from ckptfs.ops.copy_keys import Rekey, check_decrypt, erased_seqs, rekeys
from ckptfs.ops.copy_plan import ensure_config, plan_copy, select_runs
from ckptfs.ops.copy_run import RunCopy, SharedLooks
from ckptfs.ops.copy_retention import LifeReport, RunLife, tombstoned_runs
from ckptfs.store.ledgers import LedgerScanner
from ckptfs.store.repository import Repository


#: ``progress(done, total, note)``: snapshots handled so far of all to consider.
Progress = Callable[[int, int, str], None]
#: runs copied side by side into a destination on an object store (``_copy_parallel``)
COPY_WORKERS = 4


@attrs.define
class CopyReport:
    """What a copy did; ``conflicts`` lists runs whose histories differ and were not copied."""

    runs: int = 0
    snapshots_copied: int = 0
    snapshots_present: int = 0
    chunks_copied: int = 0
    chunks_present: int = 0
    bytes_copied: int = 0
    #: source snapshots not copied: expired, or retired or erased in either store
    snapshots_skipped: int = 0
    config_created: bool = False
    conflicts: list[str] = attrs.field(factory=list)
    life: LifeReport = attrs.field(factory=LifeReport)
    #: the source's forgets were repeated in the destination (``mirror=True``)
    mirror: bool = False
    #: nothing was written: the counts and lists say what a copy would do
    dry_run: bool = False
    #: ``RUN@SEQ`` of the snapshots a copy would send (dry run only; counted in
    #: ``snapshots_copied``)
    would_copy: list[str] = attrs.field(factory=list)

    @property
    def ok(self) -> bool:
        return not self.conflicts

    def to_json(self) -> dict[str, object]:
        out = {"ok": self.ok, **attrs.asdict(self, filter=lambda a, _: a.name != "life")}
        return {**out, **attrs.asdict(self.life)}


@attrs.frozen
class _Shared:
    """What the runs of one copy share: whose forgets to repeat, and the runs the
    destination holds tombstones of (one listing, not a read per run)."""

    mirror: bool
    dst_stones: set[str]
    #: the destination scope of each run, when the copy seals under another keyring
    rekey: Rekey | None = None


def copy_runs(src: Repository, dst: Repository, *, runs: Iterable[str] | None = None,
              progress: Progress | None = None, now: int | None = None,
              workers: int | None = None, mirror: bool = False,
              dry_run: bool = False, decrypt: bool = False) -> CopyReport:
    """Copy ``runs`` (default: every run) of ``src`` into ``dst``; see the module docstring.
    ``now`` (ms) decides which snapshots have expired (default: the clock). ``workers``: runs
    copied at once (default: ``COPY_WORKERS`` on an object store, whose
    requests are round trips; 1 elsewhere, where one run at a time keeps writes in order).
    ``mirror``: repeat the source's forgets in the destination (by default a copy is a backup
    that keeps its own history; erasures always propagate). ``dry_run``: change nothing and
    report what the copy would do (``copy_plan.plan_copy``). Into an encrypted store of
    another keyring, every run is sealed again under a scope of that keyring; out of an
    encrypted store into a plaintext one only with ``decrypt=True`` (``copy_keys``)."""
    check_decrypt(src, dst, decrypt)
    run_ids = select_runs(src, runs, dst)
    if dry_run:
        return plan_copy(src, dst, run_ids, mirror=mirror, now=now, report=CopyReport())
    t0_ns = observe.now_ns()
    report = CopyReport(mirror=mirror)
    now = int(time.time() * 1000) if now is None else now
    report.config_created = ensure_config(src, dst)
    total = sum(len(src.seqs(r)) for r in run_ids)
    done = [0]

    def tick(run_id: str, n: int, copied: int | None = None) -> None:
        done[0] += n
        if progress and n:
            b = report.bytes_copied if copied is None else copied
            progress(done[0], total, f"{run_id}  {b} B copied")

    # one listing of the destination's tombstones, not a read per run (an erase there after
    # it is the erase's to reconcile with writers: spec/retention.md 4.2, 5)
    shared = _Shared(mirror, tombstoned_runs(dst.storage),
                     Rekey(src, dst) if rekeys(src, dst) else None)
    if workers is None:
        workers = COPY_WORKERS if dst.storage.lists_after else 1
    if workers > 1 and len(run_ids) > 1:
        _copy_parallel(src, dst, run_ids, now, report, shared, tick, workers)
    else:
        ledgers = LedgerScanner(src.objects)  # the source's ledgers, read once along each run
        for run_id in run_ids:
            _copy_run(src, dst, run_id, now, report, shared, ledgers, tick)
    observe.maintenance("copy", t0_ns, runs=report.runs, snapshots=report.snapshots_copied,
                        bytes_copied=report.bytes_copied, conflicts=len(report.conflicts))
    return report


def _copy_run(src: Repository, dst: Repository, run_id: str, now: int, report: CopyReport,
              shared: _Shared, ledgers: LedgerScanner, tick: Callable[[str, int], None],
              looks: SharedLooks | None = None) -> None:
    """One run: its retention objects, then its snapshots in seq order (module docstring)."""
    report.runs += 1
    if shared.rekey is not None:
        scoped = shared.rekey.repo_for(run_id)
        if scoped is None:  # its key scope is erased there: nothing of it is copied
            report.snapshots_skipped += erased_seqs(src, run_id)
            return
        dst = scoped
    life = RunLife(src, dst, run_id, now, report.life, shared.dst_stones, mirror=shared.mirror)
    try:
        seqs = life.carry()
    except ConflictError as e:  # another history: nothing of the run was touched
        report.conflicts.append(str(e))
        tick(run_id, len(life.src_seqs))
        return
    tick(run_id, len(life.src_seqs) - len(seqs))
    report.snapshots_skipped += len(life.src_seqs) - len(seqs)
    run = RunCopy(src, dst, run_id, report, life, functools.partial(tick, run_id), ledgers,
                  looks=looks, carry=looks is not None)  # side by side (_copy_parallel)
    try:
        run.copy(seqs)
    except ConflictError as e:
        report.conflicts.append(str(e))
        tick(run_id, len(seqs) - run.handled)
    life.finish()


def _copy_parallel(src: Repository, dst: Repository, run_ids: list[str], now: int,
                   report: CopyReport, shared: _Shared,
                   tick: Callable[[str, int, int | None], None], workers: int) -> None:
    """Runs copied side by side into a destination on an object store (spec/retention.md
    section 9 orders the records of one run, not those of different runs): each run is one
    job with its own report (merged in run order) and its own ledger reader; a job's records
    stay in seq order. Their round trips (listings, packs, records) overlap: on a bucket each
    is a request whose latency, not bandwidth, bounds a run copied alone. The first error of
    a run (in run order) is raised once the runs already started have ended; runs not yet
    started then are not copied."""
    lock = threading.Lock()

    def locked_tick(run_id: str, n: int) -> None:
        with lock:  # the runs' reports are merged at the end: the bytes so far are theirs
            tick(run_id, n, report.bytes_copied + sum(s.bytes_copied for s in subs))

    looks = SharedLooks()  # one first look for all the runs, and after-looks reused by all
    subs = [CopyReport() for _ in run_ids]

    def job(run_id: str, sub: CopyReport) -> None:
        # its own LedgerScanner (one run's)
        _copy_run(src, dst, run_id, now, sub, shared, LedgerScanner(src.objects), locked_tick,
                  looks)

    failed: BaseException | None = None
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ckptfs-copy-run") as pool:
        futures = [pool.submit(job, r, sub) for r, sub in zip(run_ids, subs)]
        for f in futures:
            try:
                f.result()
            except BaseException as e:  # noqa: BLE001 - raised below, after the others end
                if failed is None:
                    failed = e
                    for g in futures:
                        g.cancel()
    for sub, f in zip(subs, futures):
        if not f.cancelled():
            _merge(report, sub)
    if failed is not None:
        raise failed


def _merge(into: CopyReport, sub: CopyReport) -> None:
    """Add one run's report to the copy's."""
    for name in ("runs", "snapshots_copied", "snapshots_present", "chunks_copied",
                 "chunks_present", "bytes_copied", "snapshots_skipped"):
        setattr(into, name, getattr(into, name) + getattr(sub, name))
    into.conflicts += sub.conflicts
    into.life.controls_written += sub.life.controls_written
    into.life.erased += sub.life.erased
    into.life.forgotten += sub.life.forgotten
