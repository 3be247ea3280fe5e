"""The public store: open any fsspec URL, start and resume runs, read snapshots."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import attrs

from ckptfs.errors import (
    ConflictError,
    InvalidArgument,
    MigrationError,
    MissingReference,
    NotFound,
)
from ckptfs.format import cbor
from ckptfs.format.cdc import ChunkerParams
from ckptfs.format.ledger import Ledger
from ckptfs.format.models import Captured, Manifest, Reference, Schema
from ckptfs.format.names import check_run_id
from ckptfs.runtime.codecs import Codecs
from ckptfs.runtime.effects import large_result
from ckptfs.runtime.migrations import Migrations, Step, apply_steps, apply_to_result, as_schema
from ckptfs.runtime import scopes
from ckptfs.runtime.refs import NO_REFS, RefPolicy, check_reference, to_ref
from ckptfs.runtime.run import Run, expiry_ms
from ckptfs.storage import Storage, open_storage
from ckptfs.store.blobs import stored_blob
from ckptfs.store.entries import EntryWriter
from ckptfs.store.entry_reads import decode_value, read_content, read_ledger
from ckptfs.store.lifecycle import read_expiry_shown, read_retired
from ckptfs.store.heads import HeadLook
from ckptfs.store.repository import Repository, Snapshot, now_ms

#: a state schema as the API takes it: a Schema, ``(name, version)`` or ``"name@version"``
SchemaLike = Schema | tuple[str, int] | str


def _schema(schema: SchemaLike | None) -> Schema:
    return Schema("state", 1) if schema is None else as_schema(schema)


def _where(snap: Snapshot) -> str:
    return f"snapshot {snap.id} (run {snap.run!r} seq {snap.seq})"


class Store:
    """A ckptfs store at a URL. Created on first write; reads never create anything."""

    def __init__(self, storage: Storage, *, chunker: ChunkerParams | None = None,
                 clock: Callable[[], int] | None = None, writer: str | None = None,
                 ref_policy: RefPolicy | None = None, codecs: Codecs | None = None) -> None:
        from ckptfs._version import __version__

        if not isinstance(storage, Storage):
            raise InvalidArgument(
                f"Store() takes a ckptfs Storage, not {type(storage).__name__} {storage!r}: "
                "open a store by its URL or path with ckptfs.open_store(url)")
        self.repo = Repository(storage)
        #: the types values may hold beyond plain data (ckptfs.Codecs: the built-ins by default)
        self.codecs = codecs or Codecs()
        #: which references restores may open or request to verify them (none by default: a
        #: store's URIs are its author's choice); resume, fork and read can pass their own
        self.ref_policy = ref_policy or NO_REFS
        self.writer_name = writer or f"ckptfs-python/{__version__}"
        self._chunker = chunker
        #: the time (ms since the epoch) written into manifests, records and the store config;
        #: replaceable for reproducible stores (the conformance suite uses a fixed clock)
        self.now: Callable[[], int] = clock or now_ms

    @property
    def url(self) -> str:
        return self.repo.url

    @property
    def storage(self) -> Storage:
        return self.repo.storage

    def init(self, settings: dict[str, Any] | None = None, *,
             delta_headers: bool = False) -> None:
        """Create the store now (it is otherwise created by the first checkpoint), in format
        version 2 (spec/v2.md). ``settings`` go into ckptfs.cbor, e.g.
        ``{"default_ttl_ms": ..., "gc_grace_ms": ...}``. ``delta_headers``: the store requires
        the feature ``delta-headers`` (spec/v2.md 3.1.2): each commit's record header is
        stored against its parent's, so a step costs what changed, not the whole manifest and
        locator table again (readers before ckptfs 0.4.0 refuse such a store)."""
        self.repo.init(self._chunker, settings=settings, created=self.now(),
                       features=("delta-headers",) if delta_headers else ())

    #: the chunker's gear seed of this Store's writers (an encrypted store's key scope sets it)
    gear_seed = 0
    #: a key scope's own Store (encrypted stores): the Store it was made from
    scope_base: Store | None = None

    def _seeded(self, params: ChunkerParams) -> ChunkerParams:
        return attrs.evolve(params, seed=self.gear_seed) if self.gear_seed else params

    def _writer(self) -> EntryWriter:
        cfg = self.repo.init(self._chunker, created=self.now(), implicit=True)
        return EntryWriter(self.repo.objects, self._seeded(cfg.chunker))

    # -- runs --------------------------------------------------------------------------------
    def start_run(self, run_id: str | None = None, *, schema: SchemaLike | None = None,
                  expires_at: Any = None, subject: str | None = None) -> Run:
        """A new run. Its first checkpoint claims sequence number 1 (a taken id conflicts).
        ``subject`` (encrypted stores): the person the run is about; every run of one subject
        shares its key scope, which ``ckptfs erase --subject`` destroys."""
        if run_id is None:
            run_id = time.strftime("run-%Y%m%d-%H%M%S-", time.gmtime()) + secrets.token_hex(4)
        check_run_id(run_id)
        if subject is not None or scopes.base_view(self) is not None:
            self._writer()  # the store's config exists before its first key scope
            return scopes.new_run_scope(self, run_id, subject).start_run(
                run_id, schema=schema, expires_at=expires_at)
        writer = self._writer()
        self.repo.check_not_erased(run_id)
        if self.repo.head(run_id) is not None or read_retired(self.storage, run_id) is not None:
            raise ConflictError(f"run {run_id!r} already exists (or existed and was forgotten) "
                                f"in {self.url}; resume it with store.resume(run_id) or choose "
                                "another id")
        return Run(self, run_id, _schema(schema), head=None, resumed_from=None, attempt=1,
                   state={}, writer=writer, expires=expiry_ms(expires_at), new_run=True)

    def resume(self, ref: str, *, lenient_refs: bool = False, schema: SchemaLike | None = None,
               migrations: Migrations | None = None, allow_expired: bool = False,
               ref_policy: RefPolicy | None = None) -> Run:
        """A run positioned at the snapshot ``ref`` names (a run id means its head).

        With ``schema`` (the code's current state schema) and ``migrations``, an older snapshot's
        state is migrated step by step in memory and the next commit records ``migrated_from``;
        a newer, differently named or unreachable schema raises SchemaError before anything runs.
        """
        if scopes.base_view(self) is not None:
            return scopes.run_store(self, self.repo.resolve(ref).run).resume(
                ref, lenient_refs=lenient_refs, schema=schema, migrations=migrations,
                allow_expired=allow_expired, ref_policy=ref_policy)
        # retention hook (ckptfs.store.sweeps): look at the maintenance lease before relying on
        # the head's chunks, so that the next commit knows whether a sweep may have taken them
        self.repo.objects.sweeps.before_write()
        snap, look = self.repo.resolve_ref(ref)
        self.repo.check_not_erased(snap.run, look)
        # a run id resolved to its head just now: finding it again costs requests, no safety
        # (the head may move either way before the next commit, which then conflicts)
        head = snap if look is not None else self.repo.head(snap.run)
        if head is None or head.seq != snap.seq:
            raise ConflictError(
                f"snapshot {snap.id} is seq {snap.seq} of run {snap.run!r}, whose head is now "
                f"seq {head.seq if head else '?'}: resuming it would fork history. Resume the "
                "head, or fork the snapshot into a new run (store.fork / 'ckptfs fork').")
        target, chain = self._plan(snap, schema, migrations)
        state, writer = self._restore(snap, lenient_refs=lenient_refs, allow_expired=allow_expired,
                                      seed=True, ref_policy=ref_policy, raw_types=bool(chain),
                                      look=look)
        ledger, ledger_writer = self._ledger(snap, writer)
        state = self._migrate(snap, chain, state)
        ledger = self._migrate_ledger(snap, chain, ledger)
        run_expiry = read_expiry_shown(self.storage, snap.run,
                                       exists=None if look is None else look.expiry_names)
        return Run(self, snap.run, target, head=snap, resumed_from=snap.digest,
                   attempt=snap.attempt + 1, state=state, writer=writer, ledger=ledger,
                   ledger_writer=ledger_writer, expires=run_expiry.expires if run_expiry else None,
                   extra=_provenance(snap, chain))

    def fork(self, ref: str, new_run_id: str, *, lenient_refs: bool = False,
             schema: SchemaLike | None = None, migrations: Migrations | None = None,
             ref_policy: RefPolicy | None = None) -> Run:
        """A new run whose first snapshot's parent is ``ref`` (in any run), migrated like
        ``resume`` when ``schema`` is newer than the snapshot's."""
        snap = self.repo.resolve(ref)
        check_run_id(new_run_id)
        if scopes.base_view(self) is not None:  # a fork lives in its parent's key scope
            return scopes.new_run_scope(self, new_run_id, None, same_as=snap.run).fork(
                ref, new_run_id, lenient_refs=lenient_refs, schema=schema,
                migrations=migrations, ref_policy=ref_policy)
        self.repo.check_not_erased(new_run_id)
        if self.repo.head(new_run_id) is not None:
            raise ConflictError(f"run {new_run_id!r} already exists")
        target, chain = self._plan(snap, schema, migrations)
        state, writer = self._restore(snap, lenient_refs=lenient_refs, seed=True,
                                      ref_policy=ref_policy, raw_types=bool(chain))
        ledger, ledger_writer = self._ledger(snap, writer)  # a fork inherits what was done
        state = self._migrate(snap, chain, state)
        ledger = self._migrate_ledger(snap, chain, ledger)
        return Run(self, new_run_id, target, head=None, resumed_from=None,
                   attempt=1, state=state, writer=writer, fork_of=snap, ledger=ledger,
                   ledger_writer=ledger_writer, new_run=True, extra=_provenance(snap, chain))

    # -- the async API: the same calls in a worker thread (ckptfs.runtime.aio) ---------------
    async def astart_run(self, run_id: str | None = None, *, schema: SchemaLike | None = None,
                         expires_at: Any = None) -> Run:
        """``start_run`` without blocking the event loop (it reads the store)."""
        return await asyncio.to_thread(self.start_run, run_id, schema=schema,
                                       expires_at=expires_at)

    async def aresume(self, ref: str, *, lenient_refs: bool = False,
                      schema: SchemaLike | None = None, migrations: Migrations | None = None,
                      allow_expired: bool = False, ref_policy: RefPolicy | None = None) -> Run:
        """``resume`` without blocking the event loop: the restore reads in a worker thread.
        The Run it returns has the async calls ``acheckpoint``, ``aappend``, ``aeffect``."""
        return await asyncio.to_thread(self.resume, ref, lenient_refs=lenient_refs,
                                       schema=schema, migrations=migrations,
                                       allow_expired=allow_expired, ref_policy=ref_policy)

    async def afork(self, ref: str, new_run_id: str, *, lenient_refs: bool = False,
                    schema: SchemaLike | None = None, migrations: Migrations | None = None,
                    ref_policy: RefPolicy | None = None) -> Run:
        """``fork`` without blocking the event loop."""
        return await asyncio.to_thread(self.fork, ref, new_run_id, lenient_refs=lenient_refs,
                                       schema=schema, migrations=migrations,
                                       ref_policy=ref_policy)

    async def aread(self, ref: str | Snapshot, **kwargs: Any) -> dict[str, Any]:
        """``read`` (same keywords) without blocking the event loop."""
        return await asyncio.to_thread(self.read, ref, **kwargs)

    # -- schema migrations -------------------------------------------------------------------
    def _plan(self, snap: Snapshot, schema: SchemaLike | None,
              migrations: Migrations | None) -> tuple[Schema, list[Step]]:
        """The schema to restore ``snap`` as, and the steps to get there (SchemaError if none)."""
        if schema is None:
            if migrations is not None:
                raise ValueError("migrations= needs schema=(name, version): the schema this "
                                 "code expects, which the state is migrated to")
            return snap.manifest.schema, []
        target = as_schema(schema)
        return target, (migrations or Migrations()).plan(snap.manifest.schema, target,
                                                           what=_where(snap))

    def _migrate(self, snap: Snapshot, chain: list[Step], state: dict[str, Any]) -> dict[str, Any]:
        """Run ``chain`` over ``state``. The steps see typed values as their types, and a type
        name nobody registers any more as a TypedValue (``_restore(raw_types=)``) that they may
        map; what is left of those afterwards is built or refused as the registry says."""
        if not chain:
            return state
        state = apply_steps(chain, state, what=_where(snap))
        return {k: self.codecs.resolve(v, what=f"{_where(snap)} entry {k!r} after migrating")
                for k, v in state.items()}

    def _migrate_ledger(self, snap: Snapshot, chain: list[Step], ledger: Ledger, *,
                        write: bool = True) -> Ledger:
        """The ledger with each completed effect's result passed through the chain's
        ``ledger_results`` hooks (spec/migrations.md); keys, names, arguments and statuses never
        change. With ``write``, a large migrated result gets its chunks written now, for the next
        commit to reference; otherwise it stays in memory. Old snapshots keep the old results."""
        if not any(s.ledger_results for s in chain) or not ledger.records:
            return ledger
        where = f"{_where(snap)} ledger"
        writer = EntryWriter(self.repo.objects, self._seeded(self.repo.config.chunker))
        out = Ledger()
        for r in ledger.records:
            if r.status == "completed" and r.kind == "effect":
                value = r.result
                if r.result_content is not None:
                    content = read_content(self.repo.objects, r.result_content, where=where)
                    value = decode_value(r.result_content, content, where=where)
                value = apply_to_result(chain, r.name, value, what=_where(snap))
                try:
                    cbor.check_plain(value, what=f"migrated result of effect {r.key!r}",
                                     max_depth=cbor.LEDGER_VALUE_DEPTH)
                except TypeError as e:
                    raise MigrationError(f"migrating {_where(snap)}: {e}") from e
                big, chunks = large_result(writer, value) if write else (None, [])
                self.repo.objects.put_chunks(chunks)  # unreferenced until the next commit
                r = attrs.evolve(r, result=None if big else value, result_content=big)
            out = out.append(r, what=where)
        return out

    # -- reading -----------------------------------------------------------------------------
    def runs(self) -> list[str]:
        return self.repo.run_ids()

    def snapshots(self, run_id: str) -> Iterator[Snapshot]:
        return self.repo.snapshots(run_id)

    def head(self, run_id: str) -> Snapshot:
        return self.repo.resolve(check_run_id(run_id))

    def get(self, ref: str) -> Snapshot:
        """Snapshot metadata for a reference (id, prefix, RUN or RUN@SEQ)."""
        return self.repo.resolve(ref)

    def read(self, ref: str | Snapshot, *, lenient_refs: bool = True,
             allow_expired: bool = False, schema: SchemaLike | None = None,
             migrations: Migrations | None = None,
             ref_policy: RefPolicy | None = None, raw_types: bool = False) -> dict[str, Any]:
        """The state of a snapshot, every chunk verified. References are checked where the
        reference policy allows and marked (``Ref.missing``) where they fail or are not checked.

        With ``schema`` and ``migrations`` the state is migrated in memory as ``resume`` would.
        ``raw_types``: a typed value whose type name is not registered comes back as a
        ``ckptfs.TypedValue`` (its stored form) whatever the codecs say, for tools that show
        state without the application's classes.
        """
        snap, look = (ref, None) if isinstance(ref, Snapshot) else self.repo.resolve_ref(ref)
        _, chain = self._plan(snap, schema, migrations)
        state, _ = self._restore(snap, lenient_refs=lenient_refs, allow_expired=allow_expired,
                                 ref_policy=ref_policy, raw_types=raw_types or bool(chain),
                                 look=look)
        return self._migrate(snap, chain, state)

    def ledger(self, ref: str | Snapshot, *, allow_expired: bool = False,
               schema: SchemaLike | None = None, migrations: Migrations | None = None) -> Ledger:
        """The effect ledger of a snapshot (records and their fold), every chunk verified; with
        ``schema`` and ``migrations`` its results migrated in memory as ``resume`` would. An
        expired snapshot's ledger is state data: ExpiredError unless ``allow_expired``."""
        snap = ref if isinstance(ref, Snapshot) else self.repo.resolve(ref)
        if not allow_expired:
            self.repo.check_not_expired(snap)
        _, chain = self._plan(snap, schema, migrations)
        return self._migrate_ledger(snap, chain, self._ledger(snap)[0], write=False)

    def _ledger(self, snap: Snapshot, seed_from: EntryWriter | None = None
                ) -> tuple[Ledger, EntryWriter | None]:
        """Read and fold a snapshot's ledger; with ``seed_from`` also a writer that appends to it."""
        m = snap.manifest
        writer = EntryWriter(seed_from.objects, seed_from.params) if seed_from else None
        if m.ledger is None:
            return Ledger(), writer
        where = f"snapshot {snap.digest.short} (run {m.run!r} seq {m.seq}) ledger"
        self.repo.ensure_located(snap)  # a Snapshot another Store read: learn its locators
        ledger, entry, content, items = read_ledger(self.repo.objects, m.ledger, where=where)
        if writer is not None:
            writer.seed("ledger", entry, content, items)
        return ledger, writer

    def _restore(self, snap: Snapshot, *, lenient_refs: bool, allow_expired: bool = False,
                 seed: bool = False, ref_policy: RefPolicy | None = None,
                 raw_types: bool = False, look: HeadLook | None = None
                 ) -> tuple[dict[str, Any], EntryWriter]:
        """The state of ``snap``; with ``raw_types`` unregistered type names come back as
        TypedValue whatever the registry says (a migration chain will map or refuse them).
        ``look``: the head search that found ``snap`` in this operation (its listing tells
        which expiry overrides exist)."""
        m: Manifest = snap.manifest
        policy = ref_policy or self.ref_policy
        if not allow_expired:
            self.repo.check_not_expired(snap, look=look)
        writer = self._writer() if seed else EntryWriter(self.repo.objects, self._seeded(self.repo.config.chunker))
        self.repo.ensure_located(snap)
        state: dict[str, Any] = {}
        problems: list[tuple[str, str]] = []
        for name, entry in m.entries.items():
            where = f"snapshot {snap.digest.short} (run {m.run!r} seq {m.seq}) entry {name!r}"
            if isinstance(entry, Reference):
                why = check_reference(entry, policy=policy)
                if why is not None:
                    problems.append((name, why))
                state[name] = to_ref(entry, why, policy)
            elif isinstance(entry, Captured) and entry.kind == "blob":
                state[name] = stored_blob(self.repo.objects, entry, where=where)
            else:
                assert isinstance(entry, Captured)
                content = read_content(self.repo.objects, entry, where=where)
                value = decode_value(entry, content, where=where)
                if seed:
                    writer.seed(name, entry, content, value)
                state[name] = self.codecs.decode(value, what=where, content=content,
                                                 unknown="raw" if raw_types else None)
        if problems and not lenient_refs:
            raise MissingReference(problems)
        return state, writer

    def close(self) -> None:
        self.repo.storage.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<ckptfs.Store {self.url}>"


def _provenance(snap: Snapshot, chain: list[Step]) -> dict[str, Any]:
    """Manifest fields for the first commit after a migration (spec/migrations.md)."""
    return {"migrated_from": snap.manifest.schema.to_cbor()} if chain else {}


def open_store(url: str, *, chunker: ChunkerParams | None = None,
               clock: Callable[[], int] | None = None, writer: str | None = None,
               ref_policy: RefPolicy | None = None, codecs: Codecs | None = None,
               storage_options: Mapping[str, Any] | None = None, filesystem: Any = None,
               keyring: Any = None, passphrase: str | None = None, **options: Any) -> Store:
    """Open the store at ``url`` (any fsspec URL or a local path). Nothing is written until the
    first checkpoint or ``init()``. ``clock`` (ms since the epoch) and ``writer`` (the name
    recorded in manifests) exist for reproducible stores. ``ref_policy`` (a RefPolicy) says
    which references restores may open or request to verify them: none by default. ``codecs``
    (a ckptfs.Codecs) says which types state may hold beyond plain data: the built-ins
    (datetime, UUID, Decimal, tuple, set, ...) by default, plus the ones it registers.

    Backend options (``endpoint_url=``, ``anon=``, ...) come as a ``storage_options`` dict, the
    pandas/dask style, or as keyword arguments (not the same key both ways); ``filesystem`` is
    an fsspec filesystem the caller configured already, ``url`` then the path in it.

    ``keyring`` (a folder path or URL, or a Keyring; default: CKPTFS_KEYRING) opens an
    encrypted store (spec/encryption.md), or makes the store created here an encrypted one;
    ``passphrase`` unlocks a keyring that has one."""
    merged = dict(storage_options or {})
    both = sorted(set(merged) & set(options))
    if both:
        raise InvalidArgument(f"{both} given both in storage_options= and as keyword "
                              "arguments; give each option once")
    merged.update(options)
    storage = scopes.keyring_storage(open_storage(url, filesystem=filesystem, **merged), keyring,
                                     passphrase)
    return Store(storage, chunker=chunker, clock=clock,
                 writer=writer, ref_policy=ref_policy, codecs=codecs)


__all__ = ["Store", "open_store", "NotFound"]
