"""Reading and writing content-addressed objects: chunks and manifests, verified on read."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from ckptfs.errors import CorruptObject, CorruptSnapshot, MissingObject
from ckptfs.format import framing
from ckptfs.format.digest import Digest
from ckptfs.format.models import MAX_CHUNK_SIZE, MAX_MANIFEST_SIZE, Captured, ChunkRef, Manifest
from ckptfs.format.manifest_bytes import ManifestEncoder
from ckptfs.format.record_bytes import LocatorRows
from ckptfs.format.names import chunk_path, snapshot_path
from ckptfs.storage.base import Storage
from ckptfs.format.containers import LOCATOR_PREFIX, Location, frame_bodies
from ckptfs.format.models import RunRecord
from ckptfs.format.containers import RecordRef
from ckptfs.store.containers import (
    PACK_TARGET,
    RECORD_BULK_MAX,
    ChunkReader,
    Locations,
    locatable,
    pack_bodies,
    random_order,
    record_bulk_max,
)
from ckptfs.store.chunk_sets import named_raws, unprotected
from ckptfs.store.new_store import check_writable
from ckptfs.store.records import build_record_raw
from ckptfs.store.sweeps import SweepGuard, named_chunks

#: How long a writer trusts that a chunk it wrote (or restored) still exists without writing it
#: again. Must stay well under the store's GC grace period (spec/retention.md "Grace rule").
REUSE_WINDOW_S = 600.0


class KnownChunks:
    """Digests a writer may skip uploading, each trusted for ``window`` seconds only: after
    that the chunk is written again (which refreshes it), so GC's grace period covers it.

    Chunks this writer wrote (``add``/``update``) are told apart from chunks it only restored
    (``seed``): a restored chunk is protected only while the snapshot it came from is the run's
    head, so a commit that names one anywhere else writes it again (spec/retention.md "Grace
    rule"; ckptfs.store.sweeps.unprotected)."""

    def __init__(self, window: float = REUSE_WINDOW_S) -> None:
        self.window = window
        self._seen: dict[Digest, float] = {}
        self._wrote: dict[Digest, float] = {}

    def __contains__(self, d: object) -> bool:
        t = self._seen.get(d)  # type: ignore[call-overload]
        return t is not None and time.monotonic() - t < self.window

    def wrote(self, d: Digest) -> bool:
        """True when this writer itself wrote ``d`` less than ``window`` seconds ago."""
        t = self._wrote.get(d)
        return t is not None and time.monotonic() - t < self.window

    def add(self, d: Digest) -> None:
        self._seen[d] = self._wrote[d] = time.monotonic()

    def update(self, ds: Iterable[Digest]) -> None:
        now = time.monotonic()
        for d in ds:
            self._seen[d] = self._wrote[d] = now

    def seed(self, ds: Iterable[Digest]) -> None:
        """Chunks restored (read and verified), not written: skipped by the entry writer, but
        written again by a commit whose parent snapshot does not name them."""
        now = time.monotonic()
        for d in ds:
            self._seen[d] = now

    def adopt(self, other: KnownChunks, ds: Iterable[Digest]) -> list[Digest]:
        """Take over, with the time they were written, the chunks of ``ds`` that the writer
        ``other`` wrote within its window (an encrypted store's shared scope writes a run's
        shared entries: the run's commit locates them where ``other`` wrote them)."""
        now = time.monotonic()
        got = []
        for d in ds:
            t = other._wrote.get(d)
            if t is not None and now - t < other.window:
                self._seen[d] = self._wrote[d] = max(t, self._wrote.get(d, t))
                got.append(d)
        return got

    def discard(self, ds: Iterable[Digest]) -> None:
        for d in ds:
            self._seen.pop(d, None)
            self._wrote.pop(d, None)

    def clear(self) -> None:
        """Trust nothing (after chunks were deleted without a grace period, as erase does)."""
        self._seen.clear()
        self._wrote.clear()

    def __len__(self) -> int:
        return len(self._seen)


class ObjectStore:
    """Chunks and manifests over a storage backend. Remembers which chunks it knows exist."""

    def __init__(self, storage: Storage, read_layout: Callable[[], object] | None = None) -> None:
        self.storage = storage
        #: reads the store config (which sets ``layout``) the first time the layout is needed
        self._read_layout = read_layout
        self._layout: int | None = None
        self.known = KnownChunks()
        #: the writer's side of the collector handshake (spec/retention.md "Sweeps and writers")
        self.sweeps = SweepGuard(storage)
        #: v2: where chunk bodies were seen (hints, verified on read)
        self.locations = Locations()
        self.reader = ChunkReader(storage, self.locations)
        self.sweeps.missing = self._unlocatable
        self.sweeps.on_swept = self.known.clear  # what it wrote before a sweep: written again
        #: the name packs carry as their writer
        self.writer = "ckptfs"
        #: canonical manifest bytes from the previous commit's cached entry encodings
        self.manifest_bytes = ManifestEncoder()
        #: v2: the encoded locator rows of the records this writer built (ckptfs.format.record_bytes)
        self.locator_rows = LocatorRows()
        #: the locators (by raw digest) of the last record ``prepare_v2`` built
        self.last_table: dict[bytes, Location] = {}
        #: the header (canonical CBOR) of the record ``prepare_v2`` built last
        self.last_header = b""

    @property
    def layout(self) -> int:
        """The store layout (1: loose objects; 2: containers), from the store config: read on
        first use, so that a Snapshot another Store read is never looked for as loose v1 objects
        in a v2 store (a store without a config yet counts as v2: the layout it will get)."""
        if self._layout is None and self._read_layout is not None:
            self._read_layout()
        return 2 if self._layout is None else self._layout

    @layout.setter
    def layout(self, version: int) -> None:
        self._layout = version

    def _unlocatable(self, digests: list[Digest]) -> list[Digest]:
        """The digests no container, forward or loose object holds."""
        return locatable(self.storage, self.locations, digests, fixed=self.last_table)

    # -- v2 ----------------------------------------------------------------------------------
    def prepare_v2(self, manifest: Manifest, chunks: Sequence[tuple[Digest, bytes | memoryview]],
                   results: Iterable[ChunkRef], *, nonce: bytes, settings: Mapping[str, Any],
                   parent: RecordRef | None = None, compress: bool = False,
                   base: tuple[int, bytes] | None = None
                   ) -> tuple[Digest, bytes, list[tuple[str, bytes]], dict[Digest, Location]]:
        """A v2 commit of ``manifest``: its id, the record's bytes, the packs to write before
        it (bulk beyond ``record_bulk_max``), and where the record's own bodies will be.

        Complete locators (spec/v2.md 3.5, 5.2): every chunk the snapshot needs that the record
        does not carry is located from ``parent``'s record (its table, remembered) or from a
        container this writer wrote within the reuse window, never from another record this
        process read. A chunk it cannot locate so is read (verified) and carried as a body: a
        record never has a hole (a read that fails fails the commit). ``compress``: the store
        requires ``compressed-headers`` (the record's header is then a zstd frame); ``base``:
        ``(seq, header)`` of the parent record, to store the header against (form 0x04, a
        store that requires ``delta-headers``)."""
        data = self.manifest_bytes.to_bytes(manifest)
        if len(data) > MAX_MANIFEST_SIZE:
            raise CorruptObject(f"manifest would be {len(data)} bytes, over {MAX_MANIFEST_SIZE}")
        d = Digest.of(data)
        self.sweeps.before_write()  # the first write of this writer looks at the lease first
        framed = frame_bodies((c, b) for c, b in chunks if c not in self.known)
        # every chunk it names that this record does not carry is located (raw digests:
        # hashed and looked up in C, ckptfs.store.chunk_sets)
        named = named_raws(manifest, self.manifest_bytes.chunk_lists)
        results = list(results)
        extra = {r.digest.raw for r in results}
        located = named | extra if extra else named
        if framed:
            located = located - {c.raw for c, _, _ in framed}
        where, holes = self._relied(located, parent)
        if holes:  # not locatable by the rule: carried (read and verified first)
            refs = _refs_of(manifest, results, holes)
            got = self.get_chunks(refs, where=f"run {manifest.run!r} seq {manifest.seq} "
                                  "(a chunk its parent does not locate)")
            framed += frame_bodies((r.digest, b) for r, b in zip(refs, got))
        bulk = record_bulk_max(settings)
        packs: list[tuple[str, bytes]] = []
        if sum(len(b) for _, _, b in framed) > bulk:
            packs, placed = pack_bodies(framed, target=int(settings.get("pack_target",
                                                                        PACK_TARGET)),
                                        writer=self.writer,
                                        shuffle=random_order(self.storage))
            self.locations.add(placed)
            where.update({c.raw: loc for c, loc in placed.items()})
            framed = []
        rec = RunRecord(run=manifest.run, seq=manifest.seq, snapshot=d, size=len(data),
                        created=manifest.created, nonce=nonce)
        rec_bytes, placed_own, self.last_header = build_record_raw(
            rec, data, framed, where, self.locator_rows, compress=compress, base=base)
        #: the table the record will have, for ``Repository.commit`` to remember once created
        self.last_table = where
        return d, rec_bytes, packs, placed_own

    def _relied(self, located: AbstractSet[bytes], parent: RecordRef | None
                ) -> tuple[dict[bytes, Location], set[bytes]]:
        """Where each chunk of ``located`` is by the rule of ``prepare_v2``, and those with no
        such place (the holes)."""
        locs = self.locations
        t = locs.table(parent)
        where: dict[bytes, Location] = {}
        rest = located
        if t is not None:
            ex, other = t
            where = {raw: ex[raw] for raw in located & ex.keys()}
            rest = located - ex.keys()
            if rest:
                for raw in list(rest):
                    loc = other.get(raw) or other.get(raw[:LOCATOR_PREFIX])
                    if loc is not None:
                        where[raw] = loc
                rest = rest - where.keys()
        holes: set[bytes] = set()
        for raw in rest:
            dg = Digest(raw)
            loc = locs.own.get(raw) if self.known.wrote(dg) else None
            if loc is None:
                holes.add(raw)
            else:
                where[raw] = loc
        return where, holes

    # -- chunks ------------------------------------------------------------------------------
    def put_chunks(self, chunks: Iterable[tuple[Digest, bytes | memoryview]]) -> int:
        """Store chunks not already known to exist, durably now; returns the number written.
        As packs (spec/v2.md), located for the commit that will name them; never into a version
        1 store (UpgradeRequired: a commit there is refused as well)."""
        chunks = list(chunks)
        if not chunks:  # nothing to write: a reader's call (a migrated ledger kept in memory)
            return 0
        check_writable(self.layout, self.storage.url)
        framed = frame_bodies((c, b) for c, b in chunks if c not in self.known)
        if framed:
            packs, placed = pack_bodies(framed, target=PACK_TARGET, writer=self.writer,
                                        shuffle=random_order(self.storage))
            self.storage.write_many(packs)
            self.locations.add(placed)
        self.known.update(d for d, _ in chunks)
        return len(framed)

    def unprotected_chunks(self, manifest: Manifest, parent: Manifest | None,
                           given: Sequence[tuple[Digest, bytes | memoryview]],
                           results: Iterable[ChunkRef] = ()
                           ) -> list[tuple[Digest, bytes | memoryview]]:
        """The chunks a commit of ``manifest`` must write again although it does not hold them
        (spec/retention.md "Grace rule"), read (verified) from the store: those it names that
        are neither in ``given`` nor named by ``parent`` (its run's previous snapshot) nor
        written by this writer within the reuse window. ``results``: chunks of ledger results
        inherited from another run (a fork). Usually none: then no request at all."""
        need = unprotected(manifest, parent, (d for d, _ in given), self.known.wrote,
                           self.manifest_bytes.chunk_lists)
        extra = {c.digest: c.size for c in results}
        need += [(d, n) for d, n in extra.items() if d not in {x for x, _ in need}
                 and d not in {g for g, _ in given} and not self.known.wrote(d)]
        if not need:
            return []
        refs = [ChunkRef(d, n) for d, n in need]
        where = f"run {manifest.run!r} seq {manifest.seq} (reused)"
        self.known.discard(d for d, _ in need)  # so that the commit writes them
        if sum(n for _, n in need) > RECORD_BULK_MAX:
            # more than a record carries by default: written now, a window at a time (a fork
            # of a run holding a 10 GiB blob must not hold it in memory), into packs of this
            # writer, which the commit locates (spec/v2.md 5.2)
            from ckptfs.store.blobs import write_again  # blobs builds on this module

            self.sweeps.before_write()  # the first write of this writer looks first
            write_again(self, refs, where=where)
            return []
        data = self.get_chunks(refs, where=where)
        return [(r.digest, b) for r, b in zip(refs, data)]

    def get_chunk(self, ref: ChunkRef, *, where: str) -> bytes:
        """One chunk's content, verified against its size and digest."""
        if self.layout >= 2:
            return self.reader.read([ref], where=where)[0]
        try:
            stored: bytes | None = self.storage.read(chunk_path(ref.digest))
        except FileNotFoundError:
            stored = None
        return check_chunk(ref, stored, where=where)

    def get_chunks(self, refs: Sequence[ChunkRef], *, where: str) -> list[bytes]:
        """Several chunks' contents, read in one batch (concurrently on object stores)."""
        if self.layout >= 2:
            return self.reader.read(refs, where=where)
        got = self.storage.read_many([chunk_path(r.digest) for r in refs])
        return [check_chunk(r, stored, where=where) for r, stored in zip(refs, got)]

    # -- manifests ---------------------------------------------------------------------------
    def get_manifest(self, d: Digest, size: int | None = None) -> Manifest:
        path = snapshot_path(d)
        what = f"snapshot {d}"
        try:
            stored = self.storage.read(path)
        except FileNotFoundError:
            raise MissingObject(f"{what}: manifest file {path} is missing") from None
        if size is None:
            size = _declared_size(stored, what)
        try:
            data = framing.unframe(stored, size, what=f"{what} manifest")
        except CorruptObject as e:
            raise CorruptSnapshot(str(e)) from e
        if Digest.of(data) != d:
            raise CorruptSnapshot(f"{what}: manifest bytes do not match the snapshot id")
        return Manifest.from_bytes(data, what=what)


def _refs_of(manifest: Manifest, results: Iterable[ChunkRef], raws: set[bytes]
             ) -> list[ChunkRef]:
    """The chunk refs (digest and size) of ``raws`` among what ``manifest`` and ``results``
    name."""
    sizes = {c.digest.raw: c.size for c in results}
    sizes.update({k.raw: n for k, n in named_chunks(manifest).items()})
    return [ChunkRef(Digest(r), sizes[r]) for r in sorted(raws)]


def ledger_results(objects: ObjectStore, d: Digest, manifest: Manifest) -> list[Captured]:
    """The large results a committed manifest's ledger names (reads the ledger's chunks)."""
    from ckptfs.store.ledgers import LedgerScanner  # ledgers reads snapshots: above this module
    from ckptfs.store.repository import Snapshot

    return [c for _, c in LedgerScanner(objects).results(Snapshot(d, manifest))]


def check_chunk(ref: ChunkRef, stored: bytes | None, *, where: str) -> bytes:
    """Unframe a chunk file's bytes (None: the file is absent) and verify them against ``ref``."""
    if stored is None:
        raise MissingObject(
            f"{where}: chunk {ref.digest} is missing from the store ({chunk_path(ref.digest)}); "
            "the snapshot cannot be restored. Run 'ckptfs verify' to list every affected snapshot.")
    try:
        data = framing.unframe(stored, ref.size, what=f"{where}: chunk {ref.digest}")
    except CorruptObject as e:
        raise CorruptSnapshot(str(e)) from e
    if Digest.of(data) != ref.digest:
        raise CorruptSnapshot(
            f"{where}: chunk {ref.digest} does not match its digest (bytes flipped on disk?)")
    return data


def _declared_size(stored: bytes, what: str) -> int:
    """Size of a framed object when no record names it: zstd frames carry it, raw is explicit."""
    import zstandard

    if not stored:
        raise CorruptSnapshot(f"{what}: manifest file is empty (truncated)")
    if stored[0] == framing.CODEC_RAW:
        return len(stored) - 1
    if stored[0] == framing.CODEC_ZSTD:
        try:
            n = int(zstandard.frame_content_size(stored[1:]))
        except zstandard.ZstdError as e:
            raise CorruptSnapshot(f"{what}: manifest zstd header damaged ({e})") from e
        if 0 <= n <= MAX_MANIFEST_SIZE:
            return n
        raise CorruptSnapshot(f"{what}: manifest declares an impossible size ({n})")
    raise CorruptSnapshot(f"{what}: unknown codec byte 0x{stored[0]:02x}")


__all__ = ["ObjectStore", "MAX_CHUNK_SIZE"]
