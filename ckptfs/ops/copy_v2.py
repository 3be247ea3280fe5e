"""Copy into a format v2 destination, from a store of either layout (spec/v2.md "Copy").

Each source snapshot, in seq order, becomes one v2 record in the destination carrying the
manifest's exact bytes (the snapshot id never changes) and the bodies of every chunk the
destination is not known to hold; bulk beyond the record limit goes to packs written before
the record. A chunk counts as held when this copy wrote it, or when a record of the same run
in the destination (read at the start: its head) locates it. Records are created only if
absent, so an interrupted copy is resumed by running it again; what a crash leaves (packs
without a record) is garbage that gc removes after the grace period.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from ckptfs.errors import ConflictError, CorruptSnapshot, MissingObject
from ckptfs.format import framing
from ckptfs.format.containers import MAX_RECORD_BODIES, RecordRef, frame_bodies
from ckptfs.format.digest import Digest
from ckptfs.format.models import ChunkRef, Manifest, RunRecord
from ckptfs.format.names import record_path, snapshot_path
from ckptfs.ops.chunks import snapshot_chunks
from ckptfs.ops.copy_history import diverged
from ckptfs.ops.copy_retention import RunLife
from ckptfs.store.containers import PACK_TARGET, RECORD_BULK_MAX, pack_bodies
from ckptfs.store.ledgers import LedgerScanner
from ckptfs.store.objects import ledger_results
from ckptfs.store.records import build_record
from ckptfs.store.repository import Repository, Snapshot

#: the report type of ckptfs.ops.copy (not imported: that module imports this one)
Report = object

#: a batch: snapshots prepared before their bulk is written (one overlapped write of packs)
BATCH_BYTES = 64 * 1024 * 1024
BATCH_SNAPSHOTS = 64
#: a snapshot whose new bodies reach this many bytes sends them to the batch's packs (written
#: together, overlapped) rather than in its own record (written alone, in seq order)
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


class RunCopyV2:
    """One run's snapshots into a v2 destination, one record per snapshot."""

    def __init__(self, src: Repository, dst: Repository, run_id: str, report: object,
                 life: RunLife, tick: Callable[[int], None], ledgers: LedgerScanner) -> None:
        self.src, self.dst, self.run_id, self.report = src, dst, run_id, report
        self.life, self.tick, self.ledgers = life, tick, ledgers
        self.have = set(life.dst_seqs)
        self.handled = 0
        if self.have:  # what the destination's head locates needs no copy
            try:
                dst.record(run_id, max(self.have))
            except Exception:  # noqa: BLE001 - then every chunk is sent again
                pass

    def copy(self, seqs: list[int]) -> None:
        """In batches: every snapshot of a batch is prepared (its new bodies framed), the
        bulk of the whole batch is written as packs in one overlapped ``write_many``, then
        the records are created one by one, in seq order, each locating its bodies in those
        packs. A crash leaves packs without records (garbage for gc) and a prefix of the
        records: running the copy again resumes after the last record."""
        i = 0
        while i < len(seqs):
            batch: list[_Prepared | None] = []
            bulk = 0
            while i < len(seqs) and (not batch or (bulk < BATCH_BYTES
                                                   and len(batch) < BATCH_SNAPSHOTS)):
                p = self._prepare(seqs[i], {d for q in batch if q is not None
                                            for d, _, _ in q.bulk})
                i += 1
                batch.append(p)
                bulk += 0 if p is None else sum(len(b) for _, _, b in p.bulk)
            self._write_bulk([p for p in batch if p is not None])
            for p in batch:
                if p is not None:
                    self._commit(p)
                self.handled += 1
                self.tick(1)

    def _prepare(self, seq: int, pending: set[Digest]) -> _Prepared | None:
        """Read and frame what snapshot ``seq`` needs; None when there is nothing to create
        (present in the destination, or expired and skipped). ``pending``: bodies an earlier
        snapshot of this batch will write (not framed twice)."""
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
        need = [c for d, c in refs.items() if loc.get(d) is None and d not in pending]
        report.chunks_present += len(refs) - len(need)  # type: ignore[attr-defined]
        try:
            contents = src.objects.get_chunks(need, where=f"{src.url}: {where}")
        except MissingObject as e:
            raise CorruptSnapshot(f"{e} Nothing of this snapshot was committed to the "
                                  "destination.") from e
        framed = frame_bodies((c.digest, b) for c, b in zip(need, contents))
        size = sum(len(b) for _, _, b in framed)
        settings = dst.config.settings
        bulk: list[tuple[Digest, int, bytes]] = []
        if size > min(MAX_RECORD_BODIES, int(settings.get("record_bulk_max", RECORD_BULK_MAX))
                      ) or size >= PACK_MIN:
            bulk, framed = framed, []  # to the batch's packs, written before any record
        return _Prepared(seq, rec, data, manifest, refs, framed, bulk, len(need))

    def _write_bulk(self, batch: list[_Prepared]) -> None:
        """The packs of a batch's bulk, durable (overlapped writes) before its records."""
        bodies = [b for p in batch for b in p.bulk]
        if not bodies:
            return
        dst = self.dst
        packs, placed = pack_bodies(bodies, target=int(dst.config.settings.get(
            "pack_target", PACK_TARGET)), writer=dst.objects.writer)
        dst.objects.sweeps.before_write([])
        dst.storage.write_many(packs)
        dst.objects.locations.add(placed)
        self.report.bytes_copied += sum(len(b) for _, b in packs)  # type: ignore[attr-defined]

    def _commit(self, p: _Prepared) -> None:
        """Create the record of a prepared snapshot (its bulk is in packs already)."""
        src, dst, run_id, report = self.src, self.dst, self.run_id, self.report
        seq, rec, data, manifest = p.seq, p.rec, p.data, p.manifest
        loc = dst.objects.locations
        framed = list(p.framed)
        own = {d for d, _, _ in framed}
        lost = [c for d, c in p.refs.items() if d not in own and loc.get(d) is None]
        if lost:  # left to an earlier record of the batch that was not created: carry them
            got = src.objects.get_chunks(lost, where=f"{src.url}: run {run_id!r} seq {seq}")
            framed += frame_bodies((c.digest, b) for c, b in zip(lost, got))
            own |= {c.digest for c in lost}
        where_of = {d: x for d in p.refs if d not in own and (x := loc.get(d)) is not None}
        new = RunRecord(run=run_id, seq=seq, snapshot=rec.snapshot, size=len(data),
                        created=rec.created, nonce=dst.nonce())
        rec_bytes, placed_own = build_record(new, data, framed, where_of)
        dst.objects.sweeps.before_write([])
        self.life.ready(seq)
        try:
            dst.storage.commit([], record_path(run_id, seq), rec_bytes)
        except FileExistsError:
            if dst.record(run_id, seq).snapshot != rec.snapshot:
                raise diverged(src, dst, run_id, seq) from None
            report.snapshots_present += 1  # type: ignore[attr-defined]
            return
        loc.add(placed_own)
        report.chunks_copied += p.copied  # type: ignore[attr-defined]
        report.bytes_copied += len(rec_bytes)  # type: ignore[attr-defined]
        objects = dst.objects
        try:
            objects.sweeps.after_record(
                manifest, lambda: ledger_results(objects, rec.snapshot, manifest))
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
    copied: int
