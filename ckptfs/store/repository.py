"""Every lookup of a store over a Storage: config, runs, records, heads, snapshots; and the
store's creation. The commit protocol is ``ckptfs.store.commits`` (``Commits``, a base of
Repository), kept apart because it is the one part that writes records.

Commit order (spec/v2.md "Commit protocol"): packs (bulk only), then the run record, which
carries the manifest and the new chunk bodies, created only if absent. Until the record exists
nothing of a commit is visible; a second writer racing for the same sequence number gets
ConflictError. Version 1 stores are read (loose manifests and chunks) but never changed: a
change asks for ``ckptfs upgrade`` first (UpgradeRequired).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from ckptfs.errors import (
    CkptfsError,
    CorruptObject,
    CorruptSnapshot,
    ErasedError,
    ExpiredError,
    MissingObject,
    NotAStore,
    NotFound,
)
from ckptfs.format.cdc import ChunkerParams
from ckptfs.format.digest import Digest
from ckptfs.format.models import (
    DELTA_HEADERS,
    V2_REQUIRED,
    Manifest,
    RunRecord,
    StoreConfig,
)
from ckptfs.format.names import (
    CONFIG_PATH,
    RUN_ID,
    RUNS,
    parse_seq_name,
    record_path,
    run_dir,
)
from ckptfs.storage.base import Storage
from ckptfs.storage.encrypted_open import check_encryption, new_config_fields
from ckptfs.store.lifecycle import (
    check_record_path as check_record_path,  # re-exported: its old home
    effective_expiry,
    erased_error as erased_error,
    read_retired,
    record_names_of,
    read_tombstone,
)
from ckptfs.store.commits import (  # re-exported: their old home
    HINT_EVERY as HINT_EVERY,
    Commits,
    now_ms as now_ms,
    random_nonce as random_nonce,
)
from ckptfs.store.objects import ObjectStore
from ckptfs.store.sweeps import check_window_ms, named_chunks
from ckptfs.store.heads import HeadLook, look_for_head
from ckptfs.store.snapshot import Snapshot as Snapshot  # re-exported: its old home
from ckptfs.store.ids import Scan, find_record, ids_with_prefix
from ckptfs.store.resolve import resolve_ref
from ckptfs.store.new_store import (
    check_writable,
    initial_settings,
    refuse_foreign,
    refuse_v1_request,
)
from ckptfs.store import header_bases
from ckptfs.store.records import parse_record
from ckptfs.format.containers import RecordRef


class Repository(Commits):
    """One store: config, objects and run logs over a storage backend."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.objects = ObjectStore(storage, read_layout=self.load_config)
        self.objects.reader.reload = self._reload_record
        self._config: StoreConfig | None = None
        #: where record nonces come from; replaceable for reproducible stores (the conformance
        #: generator), never shared between two writers
        self.nonce: Callable[[], bytes] = random_nonce
        #: v2: snapshot ids this process committed or read -> (run, seq) (lookup by id)
        self.ids: dict[Digest, tuple[str, int]] = {}
        self._hinted: set[str] = set()
        #: per run, the last record this process committed: (seq, header, base depth), the
        #: base of the next record's header in a store that requires ``delta-headers``
        self._headers: dict[str, tuple[int, bytes, int]] = {}
        #: run -> (lease generation of the quiet look before the listing, its retired
        #: throughs): reused by later commits while that generation stays the highest
        self._retired: dict[str, tuple[int, list[int]]] = {}
        self.retired_reused = 0
        self._window_error: CorruptObject | None = None

    @property
    def url(self) -> str:
        return self.storage.url

    # -- config ------------------------------------------------------------------------------
    def load_config(self) -> StoreConfig | None:
        """The store config, or None when the URL holds no store yet."""
        if self._config is None:
            try:
                data = self.storage.read(CONFIG_PATH)
            except FileNotFoundError:
                return None
            self._configured(StoreConfig.from_bytes(data))
        return self._config

    def _configured(self, cfg: StoreConfig) -> None:
        """Take ``cfg`` as the store's config: its layout and its check window (a malformed
        window setting stops writers at their commit, not readers: format.md 2)."""
        try:
            self.objects.sweeps.window_ms = check_window_ms(cfg.version, cfg.settings)
            self._window_error = None
        except CorruptObject as e:
            self.objects.sweeps.window_ms, self._window_error = 0, e
        check_encryption(cfg, self.storage)
        header_bases.allow(self.storage, DELTA_HEADERS in cfg.required)
        self._config = cfg
        self.objects.layout = cfg.version

    @property
    def config(self) -> StoreConfig:
        cfg = self.load_config()
        if cfg is None:
            bucket = self.storage.missing_container()
            if bucket is not None:
                raise NotAStore(
                    f"{self.url}: the bucket {bucket!r} does not exist (or this account cannot "
                    f"see it), so there is no store here; fix the URL or the credentials, or "
                    f"create the bucket and a store in it with 'ckptfs init {self.url} "
                    "--create-bucket'")
            raise NotAStore(
                f"{self.url}: no ckptfs store here (no {CONFIG_PATH}); create one with "
                "'ckptfs init URL' or by writing a first checkpoint")
        return cfg

    def init(self, chunker: ChunkerParams | None = None,
             settings: dict[str, Any] | None = None, created: int | None = None,
             *, implicit: bool = False, features: tuple[str, ...] = ()) -> StoreConfig:
        """Create the store config if absent (create-only; format version 2); return the config
        in force.
        ``implicit``: a first checkpoint creates the store, not the caller on purpose; then a
        location that holds anything else is refused (NotAStore), not turned into a store.
        ``features``: required features beyond the default ones (``delta-headers``)."""
        existing = self.load_config()
        if existing is not None:
            return existing
        if implicit:
            refuse_foreign(self.storage)
        refuse_v1_request()
        unknown = sorted(set(features) - {DELTA_HEADERS})
        if unknown:
            raise ValueError(f"init: unknown store feature(s) {unknown}; known: "
                             f"{[DELTA_HEADERS]}")
        required = V2_REQUIRED + tuple(f for f in features if f not in V2_REQUIRED)
        settings = initial_settings(settings)
        enc = new_config_fields(self.storage)  # an encrypted store (spec/encryption.md 3)
        if enc is not None:
            required, settings = required + enc[0], {**settings, **enc[1]}
        cfg = StoreConfig(chunker=chunker or ChunkerParams(),
                          created=now_ms() if created is None else created,
                          settings=settings, required=required)
        try:
            self.storage.create(CONFIG_PATH, cfg.to_bytes())
            self._configured(cfg)
        except FileExistsError:
            self._config = None
            return self.config
        return cfg

    def check_writable(self) -> StoreConfig:
        """The config of a store this process may change; UpgradeRequired on a version 1
        store (read, never changed: ``ckptfs upgrade`` first)."""
        cfg = self.config
        check_writable(cfg.version, self.url)
        return cfg

    # -- runs and records ----------------------------------------------------------------------
    def run_ids(self) -> list[str]:
        self.load_config()  # a store this reader cannot read fails before anything else
        # a run is a folder: a file named like one (an editor's ``x.swp``) is not the
        # store's, ignored like any such name (format.md 3.1)
        return [n for n in self.storage.listing(RUNS).folders
                if RUN_ID.match(n) and not n.endswith(".")]

    def record_seqs(self, run_id: str) -> list[int]:
        """Every sequence number with a record file, ascending, strays included."""
        self.load_config()
        out = []
        for name in record_names_of(self.storage, self.storage.listing(run_dir(run_id))):
            s = parse_seq_name(name)
            if s is not None and s >= 1:
                out.append(s)
        return sorted(out)

    def seqs(self, run_id: str) -> list[int]:
        """Sequence numbers of committed, retained snapshots, ascending (there may be gaps where
        snapshots were forgotten; records in a retired range that were not kept are ignored)."""
        out = self.record_seqs(run_id)
        retired = read_retired(self.storage, run_id) if out else None
        return [s for s in out if retired.visible(s)] if retired else out

    def erased(self, run_id: str, seq: int | None = None) -> ErasedError | None:
        """The error to raise when the run (or one of its snapshots) was erased, else None."""
        stone = read_tombstone(self.storage, run_id, seq)
        return None if stone is None else erased_error(stone)

    def check_not_erased(self, run_id: str, look: HeadLook | None = None) -> None:
        """Raise ErasedError when the run was erased or fenced by a partial erase. ``look``:
        the head search this operation just made, whose retired marker is used instead of
        reading it again (one listing and one read fewer on an object store)."""
        err = self.erased(run_id)
        if err is not None:
            raise err
        retired = look.retired if look is not None else read_retired(self.storage, run_id)
        if retired is not None and retired.fenced:
            raise ErasedError(f"run {run_id!r} is fenced (it or snapshots of it were erased): "
                              "no writer may commit to it again. Fork a retained snapshot into a "
                              "new run to continue.")

    def record(self, run_id: str, seq: int) -> RunRecord:
        path = record_path(run_id, seq)
        what = f"run record {path}"
        self.load_config()
        try:
            data = self.storage.read(path)
        except FileNotFoundError:
            raise (self.erased(run_id, seq) or self.erased(run_id) or NotFound(
                f"run {run_id!r} has no snapshot with sequence number {seq}")) from None
        rec, container = parse_record(data, what=what, storage=self.storage, run_id=run_id)
        check_record_path(rec, run_id, seq, what)
        if container is not None:
            self.objects.locations.learn(container, RecordRef(run_id, seq))
            self.ids[rec.snapshot] = (run_id, seq)
        return rec

    def head(self, run_id: str) -> RunRecord | None:
        """The record with the highest visible sequence number (ckptfs.store.heads)."""
        return self.head_look(run_id).record

    def head_look(self, run_id: str) -> HeadLook:
        """``head``, with the run's retired marker and expiry overrides seen on the way."""
        return look_for_head(self, run_id)

    def _reload_record(self, ref: object) -> None:
        """Read record ``ref`` again (its table is then remembered): the reader's last place
        to try before it reports a chunk missing."""
        if isinstance(ref, RecordRef):
            self.record(ref.run, ref.seq)

    # -- snapshots -----------------------------------------------------------------------------
    def snapshot(self, d: Digest, *, size: int | None = None, check_committed: bool = True) -> Snapshot:
        """The committed snapshot with id ``d`` (its record must point at it)."""
        cfg = self.config
        scan = Scan()
        if cfg.version >= 2:
            found = find_record(self, d, scan)
            if found is not None:
                rec = self.record(*found)
                if rec.snapshot == d:
                    if size is not None and size != rec.size:
                        raise CorruptSnapshot(
                            f"snapshot {d}: its record says {rec.size} bytes, {size} expected")
                    if check_committed:
                        self._check_retained(rec.run, rec.seq)
                    return self._recorded(rec)
        try:
            m = self.objects.get_manifest(d, size)
        except MissingObject:
            scan.fail_closed(f"snapshot {d}")  # a damaged visible record may be its record
            raise NotFound(f"no snapshot {d} in {self.url}") from None
        if check_committed:
            try:
                rec = self.record(m.run, m.seq)
            except NotFound:
                raise NotFound(f"snapshot {d} was written but never committed "
                               f"(run {m.run!r} has no record {m.seq}); it is garbage") from None
            if rec.snapshot != d:
                raise NotFound(f"snapshot {d} lost the race for run {m.run!r} seq {m.seq} "
                               f"to {rec.snapshot}; it was never committed")
            self.check_record_size(d, rec)
            self._check_retained(m.run, m.seq)
        return Snapshot(d, m)

    def snapshot_ids(self, prefix: str) -> list[Digest]:
        """Ids of v1 manifest objects and v2 records starting with hex ``prefix``."""
        return ids_with_prefix(self, prefix)

    def check_record_size(self, d: Digest, rec: RunRecord) -> None:
        """By id as by run (format.md 8.1, issue 16): the manifest is as long as its record
        says (read again with that expected size; ``corrupt`` otherwise)."""
        self.objects.get_manifest(d, rec.size)

    def _check_retained(self, run_id: str, seq: int) -> None:
        """ErasedError or NotFound when the record at ``seq`` is a stray in a retired range
        (forgotten or erased, not yet deleted): readers ignore strays."""
        retired = read_retired(self.storage, run_id)
        if retired is not None and not retired.visible(seq):
            raise (self.erased(run_id, seq) or self.erased(run_id) or NotFound(
                f"run {run_id!r} has no retained snapshot with sequence number {seq} (it was "
                "forgotten)"))

    def expiry(self, snap: Snapshot, look: HeadLook | None = None) -> int | None:
        """The snapshot's effective expiry in ms (its override, else its run's, else the
        manifest's; spec/retention.md "Lifetimes"), or None for never. ``look``: a head search
        of this operation whose listing showed which overrides exist (none is read that it
        did not show)."""
        return effective_expiry(self.storage, snap.run, snap.seq, snap.expires,
                                exists=None if look is None else look.expiry_names)

    def check_not_expired(self, snap: Snapshot, *, now: int | None = None,
                          look: HeadLook | None = None) -> None:
        """Raise ExpiredError when ``snap`` has expired: its state must not be restored or shown
        unless the caller explicitly allows expired data."""
        expires = self.expiry(snap, look)
        if expires is not None and expires <= (now_ms() if now is None else now):
            raise ExpiredError(
                f"snapshot {snap.id} (run {snap.run!r} seq {snap.seq}) expired at "
                f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(expires / 1000))}; its state "
                "is not served. Change its expiry ('ckptfs expire') if it must live longer, or "
                "allow expired data explicitly (allow_expired=True; --allow-expired on the "
                "command line) to look at it anyway.")

    def snapshot_at(self, run_id: str, seq: int) -> Snapshot:
        rec = self.record(run_id, seq)
        return self._recorded(rec)

    def ensure_located(self, snap: Snapshot) -> None:
        """v2: learn where ``snap``'s chunks are (its record's bodies and locators) unless this
        process knows already; a Snapshot held across maintenance (whose moves clear what this
        process knew) or built elsewhere reads its record again, once."""
        if self.objects.layout < 2:
            return
        loc = self.objects.locations
        # its chunks are read from its record's places only (spec/v2.md 6, "One outcome"); a
        # version 1 record has none (its chunks are loose objects, the last place of every read)
        loc.focus = RecordRef(snap.run, snap.seq)
        loc.focus_needs = frozenset()
        if loc.table(loc.focus) is None:
            try:
                self.record(snap.run, snap.seq)
            except CkptfsError:
                return  # the reads that follow report what is wrong
        if loc.table(loc.focus) is not None:
            loc.focus_needs = frozenset(d.raw for d in named_chunks(snap.manifest))

    def _recorded(self, rec: RunRecord) -> Snapshot:
        """The snapshot a record commits; its manifest must name the record's run and seq."""
        if rec.manifest is not None:  # v2: the record carries it (checked against the id)
            m = Manifest.from_bytes(rec.manifest, what=f"snapshot {rec.snapshot}")
            snap = Snapshot(rec.snapshot, m)
        else:
            snap = Snapshot(rec.snapshot, self.objects.get_manifest(rec.snapshot, rec.size))
        if snap.run != rec.run or snap.seq != rec.seq:
            raise CorruptSnapshot(
                f"run record {record_path(rec.run, rec.seq)} points at snapshot {rec.snapshot}, "
                f"whose manifest is run {snap.run!r} seq {snap.seq}; the record was edited or "
                "copied from elsewhere. Run 'ckptfs verify'.")
        return snap

    def snapshots(self, run_id: str) -> Iterator[Snapshot]:
        for seq in self.seqs(run_id):
            yield self.snapshot_at(run_id, seq)

    def resolve(self, ref: str) -> Snapshot:
        """A snapshot from ``blake3:<hex>``, a unique hex prefix (>= 6), ``RUN`` (its head) or
        ``RUN@SEQ``."""
        return self.resolve_ref(ref)[0]

    def resolve_ref(self, ref: str) -> tuple[Snapshot, HeadLook | None]:
        """``resolve``, and the head search that found it when it was found as its run's head
        just now (``RUN``, ``RUN@head``; else None): ckptfs.store.resolve."""
        return resolve_ref(self, ref)
