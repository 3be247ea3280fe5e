"""Copy one run into a destination (format v2), from a store of either version (spec/v2.md
"Copy"): the per-run part of ``ckptfs.ops.copy``.

Each source snapshot, in seq order, becomes one v2 record in the destination carrying the
manifest's exact bytes (the snapshot id never changes) and locating the bodies of every chunk
it names; bodies the destination is not known to hold are sent. A chunk counts as held when
this copy wrote it, or when a record of the same run in the destination (read at the start:
its head) locates it. Bulk goes to packs: source packs the destination holds none of are
moved whole, other bodies are sent as stored (``copy_packs``). Runs copied side by side
(``carry``) put the bodies that fit a record (``record_bulk_max``) in it, as a commit does:
their record chains overlap, so packs would only add requests. The snapshots go in a pipeline
of batches of about one pack (``RunCopy.copy``): a batch's packs are durable before any of
its records is created, and the records are created one at a time in seq order. Records are
created only if absent, so an interrupted copy is resumed by running it again; what a crash
leaves (packs without a record) is garbage that gc removes after the grace period.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import attrs

from ckptfs.errors import ConflictError, CorruptSnapshot, MissingObject
from ckptfs.format import framing
from ckptfs.format.containers import Location, RecordRef, frame_bodies
from ckptfs.format.digest import Digest
from ckptfs.format.models import COMPRESSED_HEADERS, ChunkRef, Manifest, RunRecord
from ckptfs.format.names import record_path, snapshot_path
from ckptfs.ops.chunks import snapshot_chunks
from ckptfs.ops.copy_history import diverged
from ckptfs.ops.copy_packs import SourceBodies
from ckptfs.ops.copy_retention import RunLife
from ckptfs.store.containers import PACK_TARGET, pack_bodies, random_order, record_bulk_max
from ckptfs.store.ledgers import LedgerScanner
from ckptfs.store.objects import ledger_results
from ckptfs.store.records import build_record
from ckptfs.store.repository import Repository, Snapshot
from ckptfs.store.sweeps import Seen, SweepGuard

#: the report type of ckptfs.ops.copy (not imported: that module imports this one)
Report = object

#: a batch: snapshots prepared before their bulk is written (about one pack, spec ``pack_target``)
BATCH_SNAPSHOTS = 64
#: a snapshot whose new bodies reach this many bytes sends them to the batch's packs (written
#: together, overlapped) rather than in its own record (written alone, in seq order), when its
#: run is copied alone (``RunCopy.carry``: side by side, records carry what fits them)
PACK_MIN = 1024 * 1024


def source_manifest(src: Repository, rec: RunRecord, where: str) -> bytes:
    """The manifest's bytes a source record commits, checked against the snapshot id."""
    if rec.manifest is not None:
        return rec.manifest  # parse_record checked it against the id
    try:
        stored = src.storage.read(snapshot_path(rec.snapshot))
    except FileNotFoundError:
        raise CorruptSnapshot(f"{src.url}: {where}: manifest {snapshot_path(rec.snapshot)} is "
                              "missing from the source; run 'ckptfs verify' on it") from None
    data = framing.unframe(stored, rec.size, what=f"{where} manifest")
    if Digest.of(data) != rec.snapshot:
        raise CorruptSnapshot(f"{src.url}: {where}: manifest does not match the snapshot id")
    return data


class SharedLooks:
    """The looks at the destination's lease that runs copied side by side share (their
    writer state is per thread): the first look, taken before any of them writes or relies
    on anything (a look earlier than needed is only more cautious), and the freshest look
    taken after a record, which any of them may reuse within the check window (spec/v2.md
    5.4: reuse depends on when the look was sent, not on who sent it). The look a record is
    judged against (``before``) stays the one that preceded its own batch (``RunCopy``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._first: Seen | None = None
        self.latest: Seen | None = None
        #: held while one run prepares a batch: preparing is CPU work (reading, verifying,
        #: packing) that threads share anyway, so one batch ready at a time puts the first
        #: pack on the wire a batch's time after the start, not all runs' batches' time
        self.preparing = threading.Lock()
        #: every chunk this copy has counted (copied or already there), so that a chunk that
        #: several snapshots share counts once: a first copy into an empty destination says
        #: nothing is "already there" (issue 35 item 6)
        self._counted: set[Digest] = set()

    def count_new(self, ds: Iterable[Digest]) -> int:
        """How many of ``ds`` this copy has not counted yet (they are counted now)."""
        with self._lock:
            new = [d for d in ds if d not in self._counted]
            self._counted.update(new)
            return len(new)

    def first(self, sweeps: SweepGuard) -> None:
        """Give this thread's writer state the first look (taken now by the first caller)."""
        with self._lock:
            if sweeps.seen is None:
                if self._first is None:
                    sweeps.before_write()
                    self._first = sweeps.seen
                else:
                    sweeps.seen = self._first
            if self.latest is None:
                self.latest = sweeps.seen

    def after(self, sweeps: SweepGuard) -> Seen:
        """The look after a record: the freshest one if still reusable, else a new LIST."""
        with self._lock:
            mine, theirs = sweeps.seen, self.latest
            if theirs is not None and (mine is None or theirs.at > mine.at):
                sweeps.seen = theirs
            got = sweeps.look_after()
            if self.latest is None or got.at >= self.latest.at:
                self.latest = got
            return got


class RunCopy:
    """One run's snapshots into the destination, one record per snapshot, in a pipeline of
    batches (``copy``)."""

    def __init__(self, src: Repository, dst: Repository, run_id: str, report: object,
                 life: RunLife, tick: Callable[[int], None], ledgers: LedgerScanner,
                 bodies: SourceBodies | None = None, looks: SharedLooks | None = None,
                 carry: bool = False) -> None:
        self.src, self.dst, self.run_id, self.report = src, dst, run_id, report
        self.life, self.tick, self.ledgers = life, tick, ledgers
        # an encrypted destination's packs take their bodies in random order: a plaintext
        # source's packs are not moved whole into it (encrypted ones are: shuffled already)
        self.bodies = SourceBodies(src, move=random_order(src.storage)
                                   or not random_order(dst.storage)) if bodies is None else bodies
        self.looks = SharedLooks() if looks is None else looks
        #: records carry every body that fits them (``record_bulk_max``), as a commit does
        #: (spec/v2.md 5.1), instead of sending bodies of ``PACK_MIN`` or more to packs: set
        #: when runs are copied side by side, whose record chains keep several PUTs in flight
        #: anyway. Then the bytes travel in the records, and the packs' requests (and the
        #: client's pass that joins bodies into packs) are saved: on moto, 48 records of 2 MB
        #: cost less server CPU than 8 packs of 12 MB plus 48 records of a few hundred bytes
        self.carry = carry
        self.have = set(life.dst_seqs)
        self.handled = 0
        self.before: Seen | None = None
        #: a snapshot prepared that did not fit its batch, and the look before it
        self._carry: tuple[_Prepared, Seen | None] | None = None
        #: digests this copy sends in containers not yet confirmed written (packs in flight,
        #: records not yet created): not sent twice; a record that finds one of them not
        #: located when it commits carries it itself (``_commit``)
        self.pending: set[Digest] = set()
        self.target = int(dst.config.settings.get("pack_target", PACK_TARGET))
        #: the destination records whose tables this copy may locate chunks from (spec/v2.md
        #: 5.2, complete locators): the run's head there, read at the start, and the record
        #: this copy created last; never another record the destination's process read
        self.bases: list[RecordRef] = []
        self.head = False
        if self.have:  # what the destination's head locates needs no copy
            try:
                dst.record(run_id, max(self.have))
                self.bases.append(RecordRef(run_id, max(self.have)))
                self.head = True
            except Exception:  # noqa: BLE001 - then every chunk is sent again
                pass

    def _relied(self, d: Digest) -> Location | None:
        """Where a record of this copy may locate ``d``: a base record's table, else a
        container this copy wrote."""
        loc = self.dst.objects.locations
        for base in reversed(self.bases):
            x = loc.relied(d.raw, base, wrote=False)
            if x is not None:
                return x
        return loc.own.get(d.raw) if d in self.pending else None

    def copy(self, seqs: list[int]) -> None:
        """A pipeline of batches of about one pack each: while the packs of batch k are
        written (one background thread), batch k+1 is read, verified and packed; then, once
        batch k's packs are durable, its records are created one by one in seq order while
        batch k+1's packs go up. A record is only created after every pack it locates into
        returned, and after the records before it (spec/v2.md 5.1, spec/retention.md 9). A
        source snapshot found damaged or diverged stops the run after the snapshots before
        it are committed. A crash leaves packs without records (garbage for gc) and a prefix
        of the records: running the copy again resumes after the last record."""
        todo = iter(seqs)
        queue: collections.deque[_Batch] = collections.deque()

        def ready() -> bool:  # the oldest batch's records can be created without waiting
            w = queue[0].written
            return w is None or w.done()

        # the first look at the lease precedes everything this copy relies on or writes
        self.looks.first(self.dst.objects.sweeps)
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="ckptfs-copy-packs") as up:
            try:
                while True:
                    with self.looks.preparing:
                        items, error, more = self._next_batch(todo)
                    if items:
                        queue.append(self._send(items, up))
                    # a batch whose packs are written (or that has none) is finished at once;
                    # else one batch stays in flight while the next one is prepared
                    while queue and (len(queue) > (1 if more and error is None else 0)
                                     or ready()):
                        self._finish(queue.popleft())
                    if error is not None:
                        raise error
                    if not more:
                        return
            except BaseException:
                for b in queue:  # let packs in flight end; their records are never created
                    if b.written is not None:
                        b.written.cancel()
                raise

    def _next_batch(self, todo: Iterator[int]
                    ) -> tuple[list[_Prepared | int], BaseException | None, bool]:
        """Snapshots prepared until the bodies they send fill a pack (or ``BATCH_SNAPSHOTS``):
        prepared ones, and the seqs with nothing to send (present or skipped); the error a
        snapshot raised (the batch ends before it); whether seqs remain. A snapshot whose
        bodies would take the batch over ``pack_target`` starts the next batch (one pack per
        batch, not a full one and a small one). Bodies bound for records count too: a batch
        holds its bodies in memory until its records are created, so it is bounded by bytes,
        not only by snapshots. Records carrying their bodies (``carry``) fill no pack: their
        batch ends at ``PACK_MIN``, so that a run's first record goes out after one snapshot
        is read, not after a pack's worth of them."""
        items: list[_Prepared | int] = []
        bulk = 0
        full = PACK_MIN if self.carry else self.target
        self.before = self.dst.objects.sweeps.seen  # precedes what this batch relies on
        if self._carry is not None:
            (p0, self.before), self._carry = self._carry, None
            items.append(p0)
            bulk = p0.held_size
        for seq in todo:
            try:
                p = self._prepare(seq)
            except (ConflictError, CorruptSnapshot) as e:
                return items, e, False
            if p is not None and bulk and bulk + p.held_size > full:
                self._carry = (p, self.dst.objects.sweeps.seen)
                return items, None, True
            items.append(seq if p is None else p)
            bulk += 0 if p is None else p.held_size
            if bulk >= full or len(items) >= BATCH_SNAPSHOTS:
                return items, None, True
        return items, None, self._carry is not None

    def _send(self, items: list[_Prepared | int], up: ThreadPoolExecutor) -> _Batch:
        """Pack a batch's bulk and start writing it (with the source packs moved whole)."""
        prepared = [p for p in items if not isinstance(p, int)]
        bodies = [b for p in prepared for b in p.bulk]
        packs, placed = pack_bodies(bodies, target=self.target, writer=self.dst.objects.writer,
                                    shuffle=random_order(self.dst.storage)) \
            if bodies else ([], {})
        for p in prepared:
            packs += p.moved
            placed.update(p.placed)
        written: Future[None] | None = None
        if packs:
            self.dst.objects.sweeps.before_write()
            written = up.submit(self.dst.storage.write_many, packs)
        return _Batch(items, written, placed, sum(len(b) for _, b in packs), self.before)

    def _finish(self, batch: _Batch) -> None:
        """Wait for a batch's packs, then create its records in seq order."""
        if batch.written is not None:
            batch.written.result()
        self.dst.objects.locations.add(batch.placed)
        self.report.bytes_copied += batch.size  # type: ignore[attr-defined]
        for p in batch.items:
            if not isinstance(p, int):
                self._commit(p, batch.before)
            self.handled += 1
            self.tick(1)

    def _prepare(self, seq: int) -> _Prepared | None:
        """Read and verify what snapshot ``seq`` needs; None when there is nothing to create
        (present in the destination, or expired and skipped)."""
        src, dst, run_id, report = self.src, self.dst, self.run_id, self.report
        _, rec = self.life.history.record(seq)
        where = f"run {run_id!r} seq {seq} (snapshot {rec.snapshot.short})"
        if seq in self.have:
            if self.life.history.dst_id(seq) != rec.snapshot:
                raise diverged(src, dst, run_id, seq)
            self.life.admit(seq, lambda: src.snapshot_at(run_id, seq).manifest.expires,
                            present=True)
            report.snapshots_present += 1  # type: ignore[attr-defined]
            return None
        data = source_manifest(src, rec, where)
        manifest = Manifest.from_bytes(data, what=where)
        if manifest.run != run_id or manifest.seq != seq:
            raise CorruptSnapshot(
                f"{src.url}: {where}: the record points at a manifest of run "
                f"{manifest.run!r} seq {manifest.seq}, not its own; the record was edited or "
                "copied from elsewhere, and is not copied. Run 'ckptfs verify' on the source.")
        if not self.life.admit(seq, lambda: manifest.expires, present=False):
            report.snapshots_skipped += 1  # type: ignore[attr-defined]
            return None
        snap = Snapshot(rec.snapshot, manifest)
        refs = {c.digest: c for _, c in snapshot_chunks(src, snap, ledgers=self.ledgers)}
        loc = dst.objects.locations

        def held(d: Digest) -> bool:
            return d in self.pending or self._relied(d) is not None

        need = [c for d, c in refs.items() if not held(d)]
        sending = {c.digest for c in need}
        self.looks.count_new(sending)  # counted as copied when their container is written
        # held by the destination before this copy (a chunk this copy sent for an earlier
        # snapshot is not "already there": it was counted when copied)
        report.chunks_present += self.looks.count_new(  # type: ignore[attr-defined]
            d for d in refs if d not in sending)
        try:
            got = self.bodies.gather(need, held, where=f"{src.url}: {where}")
        except MissingObject as e:
            raise CorruptSnapshot(f"{e} Nothing of this snapshot was committed to the "
                                  "destination.") from e
        framed = got.bodies
        size = sum(len(b) for _, _, b in framed)
        bulk: list[tuple[Digest, int, bytes]] = []
        fits = size <= record_bulk_max(dst.config.settings)
        if got.moved or not fits or (size >= PACK_MIN and not self.carry):
            bulk, framed = framed, []  # to the batch's packs, written before any record
        self.pending.update(d for d, _, _ in got.bodies)
        self.pending.update(got.placed)
        return _Prepared(seq, rec, data, manifest, refs, framed, bulk, got.moved, got.placed,
                         len(need))

    def _commit(self, p: _Prepared, before: Seen | None = None) -> None:
        """Create the record of a prepared snapshot (its bulk is in packs already), then the
        sweep handshake judged from ``before``: the look that preceded the preparing of its
        batch (what it relies on in the destination was chosen after it), not a later one."""
        src, dst, run_id, report = self.src, self.dst, self.run_id, self.report
        seq, rec, data, manifest = p.seq, p.rec, p.data, p.manifest
        loc = dst.objects.locations
        framed = list(p.framed)
        own = {d for d, _, _ in framed}
        lost = [c for d, c in p.refs.items() if d not in own and self._relied(d) is None]
        if lost:  # left to an earlier record of the batch that was not created: carry them
            got = src.objects.get_chunks(lost, where=f"{src.url}: run {run_id!r} seq {seq}")
            framed += frame_bodies((c.digest, b) for c, b in zip(lost, got))
            own |= {c.digest for c in lost}
        where_of = {d: x for d in p.refs if d not in own and (x := self._relied(d)) is not None}
        new = RunRecord(run=run_id, seq=seq, snapshot=rec.snapshot, size=len(data),
                        created=rec.created, nonce=dst.nonce())
        rec_bytes, placed_own = build_record(
            new, data, framed, where_of, compress=COMPRESSED_HEADERS in dst.config.required)
        dst.objects.sweeps.before_write()
        self.life.ready(seq)
        try:
            dst.storage.commit([], record_path(run_id, seq), rec_bytes)
        except FileExistsError:
            if dst.record(run_id, seq).snapshot != rec.snapshot:
                raise diverged(src, dst, run_id, seq) from None
            self.bases = [*self.bases[:1 if self.head else 0], RecordRef(run_id, seq)]
            report.snapshots_present += 1  # type: ignore[attr-defined]
            return
        ref = RecordRef(run_id, seq)
        loc.wrote_record(ref, {c.raw: x for c, x in placed_own.items()},
                         {c.raw: x for c, x in where_of.items()})
        self.bases = [*self.bases[:1 if self.head else 0], ref]
        dst.objects.last_table = {c.raw: x for c, x in where_of.items()}
        report.chunks_copied += p.copied  # type: ignore[attr-defined]
        report.bytes_copied += len(rec_bytes)  # type: ignore[attr-defined]
        objects = dst.objects
        after = self.looks.after(objects.sweeps)
        if before is not None:
            objects.sweeps.seen = before
        try:
            objects.sweeps.after_record(
                manifest, lambda: ledger_results(objects, rec.snapshot, manifest), after)
        except ConflictError as e:
            # withdrawn: its bodies went with it (as in Repository.commit); a later record of
            # this copy must carry them again, never point into the deleted record's path
            loc.forget([RecordRef(run_id, seq)])
            raise ConflictError(
                f"copy of run {run_id!r} into {dst.url} stopped at seq {seq}: {e} "
                f"The {report.snapshots_copied} snapshot(s) copied before it stand; run the "  # type: ignore[attr-defined]
                "same copy again to continue.") from e
        report.snapshots_copied += 1  # type: ignore[attr-defined]


@attrs.frozen
class _Prepared:
    """One snapshot ready to commit: its source record and manifest, the chunks it names,
    the bodies its record carries (``framed``) and those bound for the batch's packs."""

    seq: int
    rec: RunRecord
    data: bytes
    manifest: Manifest
    refs: dict[Digest, ChunkRef]
    framed: list[tuple[Digest, int, bytes]]
    bulk: list[tuple[Digest, int, bytes]]
    #: source packs moved whole for this snapshot, and where their bodies land
    moved: list[tuple[str, bytes]]
    placed: dict[Digest, Location]
    copied: int

    @property
    def bulk_size(self) -> int:
        """Bytes this snapshot adds to its batch's packs."""
        return sum(len(b) for _, _, b in self.bulk) + sum(len(d) for _, d in self.moved)

    @property
    def held_size(self) -> int:
        """Bytes this snapshot sends (packs and its record's bodies), held until it commits."""
        return self.bulk_size + sum(len(b) for _, _, b in self.framed)


@attrs.frozen
class _Batch:
    """A batch in the pipeline: its items (prepared snapshots, or seqs with nothing to send),
    the write of its packs (None: it has none), where their bodies are, their bytes."""

    items: list[_Prepared | int]
    written: Future[None] | None
    placed: dict[Digest, Location]
    size: int
    #: the look at the lease taken before the batch was prepared
    before: Seen | None
