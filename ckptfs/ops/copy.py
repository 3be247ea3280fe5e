"""Copy runs from one store to another, incrementally, between any two backends.

Order is what keeps the destination valid at every moment: for each snapshot, in sequence
order, first the chunks the destination lacks, then the manifest, then the run record, created
only if absent. Several snapshots of a run share the uploads (``_RunCopy``): their chunks go up
together, then their manifests, then their records one at a time in order. A record therefore never names anything that is not already there, and a run in
the destination is always a prefix of the run in the source. Interrupted at any point, the copy
is resumed by running it again: records already present are skipped, chunks already present
are not sent again. Every chunk and manifest is verified against its digest before it is
written; stored bytes are copied as they are (no recompression).

Before a run's records, its retention objects (expiry overrides, retired markers, tombstones)
are carried by ``copy_retention``: expired snapshots are not sent, forgotten and erased ones
never come back, and an erasure in the source is repeated in the destination. A copy is a
backup: the source's forgets are repeated only with ``mirror=True`` (and then never by deleting
a record of a format v2 destination). ``dry_run=True`` reports what a copy would do and
writes nothing (``copy_plan``).

A copy is a writer in the destination and keeps its grace rule (spec/retention.md "Grace
rule"): a chunk the destination already holds is relied on only if it was modified less than
``REUSE_WINDOW_S`` ago (its age from one ``scan`` of the destination's chunks/, measured when
the chunk is needed); an older one is written again (local: touched; object stores: put), so
a concurrent ``gc`` there cannot sweep it before the record that references it lands.

Chunk boundaries are the writer's choice (readers only concatenate), so a destination whose
config pins other chunker parameters still receives valid snapshots; they keep the source's
chunks, and later writes to the destination cut with its own parameters.
"""

from __future__ import annotations

import functools
import itertools
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, ThreadPoolExecutor

import attrs

from ckptfs import observe
from ckptfs.errors import (
    CkptfsError,
    ConflictError,
    CorruptSnapshot,
)
from ckptfs.format import framing
from ckptfs.format.digest import Digest
from ckptfs.format.models import (
    ChunkRef,
    Manifest,
    RunRecord,
)
from ckptfs.format.names import CHUNKS, chunk_path, record_path, snapshot_path
from ckptfs.ops.chunks import snapshot_chunks
from ckptfs.ops.copy_history import diverged
from ckptfs.ops.copy_plan import ensure_config, plan_copy, select_runs
from ckptfs.ops.copy_v2 import RunCopyV2, SharedLooks, source_manifest
from ckptfs.ops.copy_retention import LifeReport, RunLife, tombstoned_runs
from ckptfs.store.ledgers import LedgerScanner
from ckptfs.store.objects import REUSE_WINDOW_S, KnownChunks, ledger_results
from ckptfs.store.repository import Repository, Snapshot


#: ``progress(done, total, note)``: snapshots handled so far of all to consider.
Progress = Callable[[int, int, str], None]
_BATCH_ITEMS = 256
_BATCH_BYTES = 16 * 1024 * 1024
#: chunk bytes to send before a group of snapshots commits: bounds the time between relying on
#: a chunk the destination holds and the record that references it (grace rule)
_GROUP_BYTES = 64 * 1024 * 1024
#: runs copied side by side into a v2 destination on an object store (``_copy_parallel``)
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


class _ChunkIndex:
    """Which chunks the destination holds and when each was last modified: one ``scan`` of
    its chunks/ (object stores: one paginated listing, not a request per folder or chunk),
    then kept up to date with what this copy writes."""

    def __init__(self, src: Repository, dst: Repository) -> None:
        self.dst = dst
        self._mtimes: dict[str, float | None] | None = None
        #: chunks this copy has already counted (present or copied), trusted for a while only
        self.seen = KnownChunks()
        #: the source's ledgers, read once along each run
        self.ledgers = LedgerScanner(src.objects)
        #: the runs the destination holds tombstones of (one listing), set by ``copy_runs``
        self.dst_stones: set[str] | None = None
        #: repeat the source's forgets (``copy_runs(mirror=True)``)
        self.mirror = False

    def _load(self) -> dict[str, float | None]:
        if self._mtimes is None:
            self._mtimes = {p: st.mtime for p, st in self.dst.storage.scan(CHUNKS).items()}
        return self._mtimes

    def has(self, d: Digest) -> bool:
        return chunk_path(d) in self._load()

    def fresh(self, d: Digest) -> bool:
        """True when the destination's chunk was modified recently enough to rely on without
        writing it again (grace rule); False when it is older, its age unknown, or it is gone.
        The age is the listed modification time's, measured now."""
        t = self._load().get(chunk_path(d))
        return t is not None and time.time() - t < REUSE_WINDOW_S

    def wrote(self, ds: Iterable[Digest], since: float) -> None:
        """Chunks written (or refreshed) by this copy from time ``since`` on."""
        mtimes = self._load()
        for d in ds:
            mtimes[chunk_path(d)] = since

    def reset(self) -> None:
        """Forget the listing: chunks were deleted without grace (an erase in the destination)."""
        self._mtimes = None
        self.seen.clear()


def copy_runs(src: Repository, dst: Repository, *, runs: Iterable[str] | None = None,
              progress: Progress | None = None, now: int | None = None,
              workers: int | None = None, mirror: bool = False,
              dry_run: bool = False) -> CopyReport:
    """Copy ``runs`` (default: every run) of ``src`` into ``dst``; see the module docstring.
    ``now`` (ms) decides which snapshots have expired (default: the clock). ``workers``: runs
    copied at once into a v2 destination (default: ``COPY_WORKERS`` on an object store, whose
    requests are round trips; 1 elsewhere, where one run at a time keeps writes in order).
    ``mirror``: repeat the source's forgets in the destination (by default a copy is a backup
    that keeps its own history; erasures always propagate). ``dry_run``: change nothing and
    report what the copy would do (``copy_plan.plan_copy``)."""
    run_ids = select_runs(src, runs)
    if dry_run:
        return plan_copy(src, dst, run_ids, mirror=mirror, now=now, report=CopyReport())
    t0_ns = observe.now_ns()
    report = CopyReport(mirror=mirror)
    now = int(time.time() * 1000) if now is None else now
    report.config_created = ensure_config(src, dst)
    total = sum(len(src.seqs(r)) for r in run_ids)
    done = [0]

    def tick(run_id: str, n: int) -> None:
        done[0] += n
        if progress and n:
            progress(done[0], total, f"{run_id}  {report.bytes_copied} B copied")

    index = _ChunkIndex(src, dst)
    index.mirror = mirror
    # one listing of the destination's tombstones, not a read per run (an erase there after
    # it is the erase's to reconcile with writers: spec/retention.md 4.2, 5)
    index.dst_stones = tombstoned_runs(dst.storage)
    if workers is None:
        workers = COPY_WORKERS if dst.config.version >= 2 and dst.storage.lists_after else 1
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="ckptfs-copy-read") as reader:
        if workers > 1 and dst.config.version >= 2 and len(run_ids) > 1:
            _copy_parallel(src, dst, run_ids, now, report, index, reader, tick, workers)
        else:
            for run_id in run_ids:
                _copy_run(src, dst, run_id, now, report, index, reader, tick)
    observe.maintenance("copy", t0_ns, runs=report.runs, snapshots=report.snapshots_copied,
                        bytes_copied=report.bytes_copied, conflicts=len(report.conflicts))
    return report


def _copy_run(src: Repository, dst: Repository, run_id: str, now: int, report: CopyReport,
              index: _ChunkIndex, reader: Executor, tick: Callable[[str, int], None],
              looks: SharedLooks | None = None) -> None:
    """One run: its retention objects, then its snapshots in seq order (module docstring)."""
    report.runs += 1
    life = RunLife(src, dst, run_id, now, report.life, index.dst_stones, mirror=index.mirror)
    erasures = len(report.life.erased)
    try:
        seqs = life.carry()
    except ConflictError as e:  # another history: nothing of the run was touched
        report.conflicts.append(str(e))
        tick(run_id, len(life.src_seqs))
        return
    if len(report.life.erased) != erasures:
        index.reset()  # the erase deleted chunks without grace
    tick(run_id, len(life.src_seqs) - len(seqs))
    report.snapshots_skipped += len(life.src_seqs) - len(seqs)
    run: _RunCopy | RunCopyV2
    if dst.config.version >= 2:
        run = RunCopyV2(src, dst, run_id, report, life,
                        functools.partial(tick, run_id), index.ledgers, looks=looks,
                        carry=looks is not None)  # side by side (_copy_parallel)
    else:
        run = _RunCopy(src, dst, run_id, index, report, life, reader,
                       functools.partial(tick, run_id))
    try:
        run.copy(seqs)
    except ConflictError as e:
        report.conflicts.append(str(e))
        tick(run_id, len(seqs) - run.handled)
    life.finish()


def _copy_parallel(src: Repository, dst: Repository, run_ids: list[str], now: int,
                   report: CopyReport, index: _ChunkIndex, reader: Executor,
                   tick: Callable[[str, int], None], workers: int) -> None:
    """Runs copied side by side into a v2 destination on an object store (spec/retention.md
    section 9 orders the records of one run, not those of different runs): each run is one
    job with its own report (merged in run order) and its own ledger reader; a job's records
    stay in seq order. Their round trips (listings, packs, records) overlap: on a bucket each
    is a request whose latency, not bandwidth, bounds a run copied alone. The first error of
    a run (in run order) is raised once the runs already started have ended; runs not yet
    started then are not copied."""
    lock = threading.Lock()

    def locked_tick(run_id: str, n: int) -> None:
        with lock:
            tick(run_id, n)

    looks = SharedLooks()  # one first look for all the runs, and after-looks reused by all

    def job(run_id: str, sub: CopyReport) -> None:
        own = _ChunkIndex(src, dst)  # its own LedgerScanner (one run's); v2 lists no chunks
        own.dst_stones, own.mirror = index.dst_stones, index.mirror
        _copy_run(src, dst, run_id, now, sub, own, reader, locked_tick, looks)

    subs = [CopyReport() for _ in run_ids]
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


@attrs.frozen
class _Pending:
    """A snapshot read and verified from the source, its record not yet in the destination."""

    seq: int
    where: str
    rec_bytes: bytes
    rec: RunRecord
    m_stored: bytes
    manifest: Manifest
    #: chunks to write: those the destination lacks, then those it holds but too old to rely on
    send: list[ChunkRef]
    new: frozenset[Digest]


class _RunCopy:
    """One run's snapshots, ascending, in groups: the chunks of a group's snapshots go up
    together (the next batch read and verified from the source while one uploads), then their
    manifests, then their records one at a time in seq order. A record is only created once
    everything its snapshot needs is in the destination; a group ends at ``_GROUP_BYTES``."""

    def __init__(self, src: Repository, dst: Repository, run_id: str, index: _ChunkIndex,
                 report: CopyReport, life: RunLife, reader: Executor,
                 tick: Callable[[int], None]) -> None:
        self.src, self.dst, self.run_id, self.index = src, dst, run_id, index
        self.report, self.life, self.reader, self.tick = report, life, reader, tick
        self.have = set(life.dst_seqs)
        self.group: list[_Pending] = []
        #: source seqs handled (committed, present or skipped), for progress after a conflict
        self.handled = 0

    def copy(self, seqs: list[int]) -> None:
        try:
            for seq in seqs:
                p = self._prepare(seq)
                if p is None:
                    self._handled(1)
                    continue
                self.group.append(p)
                if sum(c.size for q in self.group for c in q.send) >= _GROUP_BYTES:
                    self._flush()
        except (ConflictError, CorruptSnapshot):
            self._flush()  # what came before the divergence or the damage is still copied
            raise
        self._flush()

    def _handled(self, n: int) -> None:
        self.handled += n
        self.tick(n)

    def _prepare(self, seq: int) -> _Pending | None:
        """Check a snapshot against the destination; None when there is nothing to send (its
        record is there, or it expired), else what to send, verified so far as the manifest."""
        src, run_id, index, report, life = self.src, self.run_id, self.index, self.report, self.life
        rec_bytes, rec = life.history.record(seq)
        where = f"run {run_id!r} seq {seq} (snapshot {rec.snapshot.short})"
        if seq in self.have:
            if life.history.dst_id(seq) != rec.snapshot:
                raise diverged(src, self.dst, run_id, seq)
            life.admit(seq, lambda: src.snapshot_at(run_id, seq).manifest.expires, present=True)
            report.snapshots_present += 1
            return None
        m_stored, m_data = _verified_manifest(src, rec, where)
        if rec.manifest is not None:  # a v2 source record: the v1 destination gets a v1 one
            rec_bytes = attrs.evolve(rec, manifest=None).to_bytes()
        manifest = Manifest.from_bytes(m_data, what=where)
        if manifest.run != run_id or manifest.seq != seq:  # as the reader checks (_recorded)
            raise CorruptSnapshot(
                f"{src.url}: {where}: the record points at a manifest of run "
                f"{manifest.run!r} seq {manifest.seq}, not its own; the record was edited or "
                "copied from elsewhere, and is not copied. Run 'ckptfs verify' on the source.")
        if not life.admit(seq, lambda: manifest.expires, present=False):
            report.snapshots_skipped += 1  # expired: retired in the destination, never sent
            return None
        needed, stale = [], []
        for _, c in snapshot_chunks(src, Snapshot(rec.snapshot, manifest), ledgers=index.ledgers):
            if c.digest in index.seen:
                continue
            index.seen.add(c.digest)
            if not index.has(c.digest):
                needed.append(c)
            elif index.fresh(c.digest):
                report.chunks_present += 1
            else:  # present but old: written again so that gc's grace period covers it
                stale.append(c)
        report.chunks_present += len(stale)
        return _Pending(seq, where, rec_bytes, rec, m_stored, manifest, needed + stale,
                        frozenset(c.digest for c in needed))

    def _flush(self) -> None:
        """Send the group's chunks, then manifests, then records. If a source chunk turns out
        missing or corrupt, the snapshots before it whose chunks were all sent still commit."""
        group, self.group = self.group, []
        if not group:
            return
        items = [(p, c) for p in group for c in p.send]
        ends = list(itertools.accumulate(len(p.send) for p in group))
        sent = 0
        batches = list(_batches(items))
        ahead = self.reader.submit(_fetch, self.src, batches[0]) if batches else None
        for k, batch in enumerate(batches):
            assert ahead is not None
            stored, damage = ahead.result()
            ahead = self.reader.submit(_fetch, self.src, batches[k + 1]) \
                if k + 1 < len(batches) and damage is None else None
            batch = batch[:len(stored)]  # what was verified before any damage
            since = time.time()
            written = [(chunk_path(c.digest), data) for (_, c), data in zip(batch, stored)]
            # the writers' side of the sweep handshake (spec/retention.md "Sweeps and writers"):
            # look at the lease before writing, keep what was written until the records exist
            self.dst.objects.sweeps.before_write(written)
            self.dst.storage.write_many(written)  # an existing chunk is refreshed, not duplicated
            self.index.wrote((c.digest for _, c in batch), since)
            for (p, c), data in zip(batch, stored):
                if c.digest in p.new:
                    self.report.chunks_copied += 1
                    self.report.bytes_copied += len(data)
            sent += len(batch)
            if damage is not None:
                self._commit([p for p, end in zip(group, ends) if end <= sent])
                raise damage
        self._commit(group)

    def _commit(self, group: list[_Pending]) -> None:
        """Manifests (their chunks are all in the destination), then records in seq order; after
        each record, the handshake with a gc or erase that may have swept meanwhile."""
        manifests = [(snapshot_path(p.rec.snapshot), p.m_stored) for p in group]
        self.dst.objects.sweeps.before_write(manifests)
        self.dst.storage.write_many(manifests)
        for p in group:
            self.report.bytes_copied += len(p.m_stored)
            self.life.ready(p.seq)  # markers for the expired seqs below this one, first
            try:
                self.dst.storage.create(record_path(self.run_id, p.seq), p.rec_bytes)
            except FileExistsError:
                if self.dst.record(self.run_id, p.seq).snapshot != p.rec.snapshot:
                    raise diverged(self.src, self.dst, self.run_id, p.seq) from None
                self.report.snapshots_present += 1
            else:
                self._after_record(p)
                self.report.snapshots_copied += 1
            self._handled(1)

    def _after_record(self, p: _Pending) -> None:
        """Wait for a sweep that may have run during this commit and write back what it took
        (the bytes this copy sent are held); if it took what the copy relied on without sending
        (a chunk present in the destination), the record is withdrawn: ConflictError."""
        objects = self.dst.objects
        try:
            objects.sweeps.after_record(
                p.manifest, lambda: ledger_results(objects, p.rec.snapshot, p.manifest))
        except ConflictError as e:
            raise ConflictError(
                f"copy of run {self.run_id!r} into {self.dst.url} stopped at seq {p.seq}: {e} "
                f"The {self.report.snapshots_copied} snapshot(s) copied before it stand; run the "
                "same copy again to continue (it sends what the sweep took).") from e


def _fetch(src: Repository, batch: list[tuple[_Pending, ChunkRef]]
           ) -> tuple[list[bytes], CorruptSnapshot | None]:
    """Stored bytes of a batch of chunks from the source, each checked against its digest:
    those before the first missing or damaged one, and the error that one gives (or None)."""
    if src.objects.layout >= 2:  # a v2 source: through its reader, framed for v1
        out2: list[bytes] = []
        for p, c in batch:
            try:
                out2.append(framing.frame(src.objects.get_chunk(c, where=p.where)))
            except CkptfsError as e:
                return out2, CorruptSnapshot(f"{src.url}: {e}")
        return out2, None
    got = src.storage.read_many([chunk_path(c.digest) for _, c in batch])
    out: list[bytes] = []
    for (p, c), stored in zip(batch, got):
        if stored is None:
            return out, CorruptSnapshot(
                f"{src.url}: {p.where}: chunk {c.digest} is missing from the source; run "
                "'ckptfs verify' on it. Nothing of this snapshot was committed to the "
                "destination.")
        data = framing.unframe(stored, c.size, what=f"{p.where}: chunk {c.digest}")
        if Digest.of(data) != c.digest:
            return out, CorruptSnapshot(
                f"{src.url}: {p.where}: chunk {c.digest} does not match its digest; run "
                "'ckptfs verify --read-data' on the source")
        out.append(stored)
    return out, None


def _verified_manifest(src: Repository, rec: RunRecord, where: str) -> tuple[bytes, bytes]:
    """The manifest's stored bytes and content, checked against the snapshot id."""
    if rec.manifest is not None:  # a v2 source: framed afresh for a v1 destination
        data = source_manifest(src, rec, where)
        return framing.frame(data), data
    try:
        stored = src.storage.read(snapshot_path(rec.snapshot))
    except FileNotFoundError:
        raise CorruptSnapshot(f"{src.url}: {where}: manifest {snapshot_path(rec.snapshot)} is "
                              "missing from the source; run 'ckptfs verify' on it") from None
    data = framing.unframe(stored, rec.size, what=f"{where} manifest")
    if Digest.of(data) != rec.snapshot:
        raise CorruptSnapshot(f"{src.url}: {where}: manifest does not match the snapshot id")
    return stored, data


def _batches(items: list[tuple[_Pending, ChunkRef]]) -> Iterable[list[tuple[_Pending, ChunkRef]]]:
    batch: list[tuple[_Pending, ChunkRef]] = []
    size = 0
    for item in items:
        batch.append(item)
        size += item[1].size
        if len(batch) >= _BATCH_ITEMS or size >= _BATCH_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch
