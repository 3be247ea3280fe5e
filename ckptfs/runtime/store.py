"""The public store: open any fsspec URL, start and resume runs, read snapshots."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from typing import Any

from ckptfs.errors import (
    ConflictError,
    CorruptSnapshot,
    ExpiredError,
    FormatError,
    MissingReference,
    NotFound,
)
from ckptfs.format.cdc import ChunkerParams
from ckptfs.format.ledger import Ledger, LedgerRef
from ckptfs.format.models import Captured, Manifest, Reference, Schema
from ckptfs.format.names import check_run_id
from ckptfs.runtime.refs import check_reference, to_ref
from ckptfs.runtime.run import Run, expiry_ms
from ckptfs.storage import Storage, open_storage
from ckptfs.store.lifecycle import effective_expiry, read_expiry, read_retired
from ckptfs.store.entries import EntryWriter, decode_value, read_content, stored_blob
from ckptfs.store.repository import Repository, Snapshot


def _schema(schema: Schema | tuple[str, int] | None) -> Schema:
    if schema is None:
        return Schema("state", 1)
    if isinstance(schema, Schema):
        return schema
    name, version = schema
    if not isinstance(name, str) or not name or type(version) is not int or version < 0:
        raise ValueError(f"schema must be (name: str, version: int >= 0), got {schema!r}")
    return Schema(name, version)


class Store:
    """A ckptfs store at a URL. Created on first write; reads never create anything."""

    def __init__(self, storage: Storage, *, chunker: ChunkerParams | None = None) -> None:
        from ckptfs import __version__

        self.repo = Repository(storage)
        self.writer_name = f"ckptfs-python/{__version__}"
        self._chunker = chunker

    @property
    def url(self) -> str:
        return self.repo.url

    @property
    def storage(self) -> Storage:
        return self.repo.storage

    def init(self, settings: dict[str, Any] | None = None) -> None:
        """Create the store now (it is otherwise created by the first checkpoint). ``settings``
        go into ckptfs.cbor, e.g. ``{"default_ttl_ms": ..., "gc_grace_ms": ...}``."""
        self.repo.init(self._chunker, settings=settings)

    def _writer(self) -> EntryWriter:
        cfg = self.repo.init(self._chunker)
        return EntryWriter(self.repo.objects, cfg.chunker)

    # -- runs --------------------------------------------------------------------------------
    def start_run(self, run_id: str | None = None, *, schema: Schema | tuple[str, int] | None = None,
                  expires_at: Any = None) -> Run:
        """A new run. Its first checkpoint claims sequence number 1 (a taken id conflicts)."""
        if run_id is None:
            run_id = time.strftime("run-%Y%m%d-%H%M%S-", time.gmtime()) + secrets.token_hex(4)
        check_run_id(run_id)
        writer = self._writer()
        self.repo.check_not_erased(run_id)
        if self.repo.head(run_id) is not None or read_retired(self.storage, run_id) is not None:
            raise ConflictError(f"run {run_id!r} already exists (or existed and was forgotten) "
                                f"in {self.url}; resume it with store.resume(run_id) or choose "
                                "another id")
        return Run(self, run_id, _schema(schema), head=None, resumed_from=None, attempt=1,
                   state={}, writer=writer, expires=expiry_ms(expires_at), new_run=True)

    def resume(self, ref: str, *, lenient_refs: bool = False, schema: Any = None,
               migrations: Any = None, allow_expired: bool = False) -> Run:
        """A run positioned at the snapshot ``ref`` names (a run id means its head)."""
        snap = self.repo.resolve(ref)
        self.repo.check_not_erased(snap.run)
        head = self.repo.head(snap.run)
        if head is None or head.seq != snap.seq:
            raise ConflictError(
                f"snapshot {snap.id} is seq {snap.seq} of run {snap.run!r}, whose head is now "
                f"seq {head.seq if head else '?'}: resuming it would fork history. Resume the "
                "head, or fork the snapshot into a new run (store.fork / 'ckptfs fork').")
        state, writer = self._restore(snap, lenient_refs=lenient_refs, allow_expired=allow_expired,
                                      seed=True)
        ledger, ledger_writer = self._ledger(snap, writer)
        run_expiry = read_expiry(self.storage, snap.run)
        return Run(self, snap.run, snap.manifest.schema, head=snap, resumed_from=snap.digest,
                   attempt=snap.attempt + 1, state=state, writer=writer, ledger=ledger,
                   ledger_writer=ledger_writer, expires=run_expiry.expires if run_expiry else None)

    def fork(self, ref: str, new_run_id: str, *, lenient_refs: bool = False) -> Run:
        """A new run whose first snapshot's parent is ``ref`` (in any run)."""
        snap = self.repo.resolve(ref)
        check_run_id(new_run_id)
        self.repo.check_not_erased(new_run_id)
        if self.repo.head(new_run_id) is not None:
            raise ConflictError(f"run {new_run_id!r} already exists")
        state, writer = self._restore(snap, lenient_refs=lenient_refs, seed=True)
        ledger, ledger_writer = self._ledger(snap, writer)  # a fork inherits what was done
        return Run(self, new_run_id, snap.manifest.schema, head=None, resumed_from=None,
                   attempt=1, state=state, writer=writer, fork_of=snap, ledger=ledger,
                   ledger_writer=ledger_writer, new_run=True)

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
             allow_expired: bool = False) -> dict[str, Any]:
        """The state of a snapshot, every chunk verified. References are checked and marked."""
        snap = ref if isinstance(ref, Snapshot) else self.repo.resolve(ref)
        state, _ = self._restore(snap, lenient_refs=lenient_refs, allow_expired=allow_expired)
        return state

    def ledger(self, ref: str | Snapshot) -> Ledger:
        """The effect ledger of a snapshot (records and their fold), every chunk verified."""
        snap = ref if isinstance(ref, Snapshot) else self.repo.resolve(ref)
        return self._ledger(snap)[0]

    def _ledger(self, snap: Snapshot, seed_from: EntryWriter | None = None
                ) -> tuple[Ledger, EntryWriter | None]:
        """Read and fold a snapshot's ledger; with ``seed_from`` also a writer that appends to it."""
        m = snap.manifest
        writer = EntryWriter(seed_from.objects, seed_from.params) if seed_from else None
        if m.ledger is None:
            return Ledger(), writer
        where = f"snapshot {snap.digest.short} (run {m.run!r} seq {m.seq}) ledger"
        ref = LedgerRef.from_cbor(m.ledger, what=where)
        entry = ref.as_entry()
        content = read_content(self.repo.objects, entry, where=where)
        items = decode_value(entry, content, where=where)
        if len(items) != ref.count:
            raise CorruptSnapshot(f"{where}: holds {len(items)} records, count says {ref.count}")
        try:
            ledger = Ledger.from_cbor(items, what=where)
        except FormatError as e:
            raise CorruptSnapshot(str(e)) from e
        if writer is not None:
            writer.seed("ledger", entry, content, items)
        return ledger, writer

    def _restore(self, snap: Snapshot, *, lenient_refs: bool, allow_expired: bool = False,
                 seed: bool = False) -> tuple[dict[str, Any], EntryWriter]:
        m: Manifest = snap.manifest
        expires = effective_expiry(self.storage, m.run, m.seq, m.expires)
        if not allow_expired and expires is not None and expires <= time.time() * 1000:
            raise ExpiredError(
                f"snapshot {snap.id} (run {m.run!r} seq {m.seq}) expired at "
                f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(expires / 1000))}; it will "
                "not be restored. Change its expiry ('ckptfs expire') if it must live longer.")
        writer = self._writer() if seed else EntryWriter(self.repo.objects, self.repo.config.chunker)
        state: dict[str, Any] = {}
        problems: list[tuple[str, str]] = []
        for name, entry in m.entries.items():
            where = f"snapshot {snap.digest.short} (run {m.run!r} seq {m.seq}) entry {name!r}"
            if isinstance(entry, Reference):
                why = check_reference(entry)
                if why is not None:
                    problems.append((name, why))
                state[name] = to_ref(entry, why)
            elif isinstance(entry, Captured) and entry.kind == "blob":
                state[name] = stored_blob(self.repo.objects, entry, where=where)
            else:
                assert isinstance(entry, Captured)
                content = read_content(self.repo.objects, entry, where=where)
                value = decode_value(entry, content, where=where)
                state[name] = value
                if seed:
                    writer.seed(name, entry, content, value)
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


def open_store(url: str, *, chunker: ChunkerParams | None = None, **storage_options: Any) -> Store:
    """Open the store at ``url`` (any fsspec URL or a local path). Nothing is written until the
    first checkpoint or ``init()``."""
    return Store(open_storage(url, **storage_options), chunker=chunker)


__all__ = ["Store", "open_store", "NotFound"]
