"""The commit protocol of a Repository (its ``Commits`` base): write a snapshot's objects and
create its run record only if absent, then the checks after the record (retired ranges, the
retention hook) and the run's head hint. Kept apart from the lookups of ``repository`` (config,
runs, records, snapshots), which only read.

Commit order (spec/v2.md "Commit protocol"): packs (bulk only), then the run record, which
carries the manifest and the new chunk bodies, created only if absent. Until the record exists
nothing of a commit is visible; a second writer racing for the same sequence number gets
ConflictError.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterable

from ckptfs import observe
from ckptfs.errors import CkptfsError, ConflictError, CorruptObject, OutcomeUnknown
from ckptfs.format.containers import HeadHint, RecordRef
from ckptfs.format.digest import Digest
from ckptfs.format.models import (
    COMPRESSED_HEADERS,
    DELTA_HEADERS,
    NONCE_SIZE,
    ChunkRef,
    Manifest,
    RunRecord,
    StoreConfig,
)
from ckptfs.format.names import head_hint_path, record_path
from ckptfs.storage.base import Storage
from ckptfs.store import header_bases
from ckptfs.store.chunk_sets import NO_PARENT, ParentChunks, named_raws
from ckptfs.store.lifecycle import retired_throughs
from ckptfs.store.objects import ObjectStore, ledger_results
from ckptfs.store.snapshot import Snapshot
from ckptfs.store.sweeps import Seen


def now_ms() -> int:
    return int(time.time() * 1000)


#: a writer on a backend that lists from a key refreshes its run's head hint every this many
#: commits (spec/v2.md: readers check forward from it, so a stale hint costs nothing but a
#: longer listing)
HINT_EVERY = 16
#: in a store that requires ``delta-headers``, a record's header is stored against its
#: parent's (form 0x04) unless the parent's chain already holds this many such records: then
#: it is stored whole, so a reader follows at most this many records (spec/v2.md 3.1.2 allows
#: 64). Fewer: faster head reads; more: smaller stores
DELTA_CHAIN = 16
def random_nonce() -> bytes:
    """A run record's nonce (spec 8.1): fresh random bytes for every record a writer creates."""
    return secrets.token_bytes(NONCE_SIZE)


class Commits:
    """The commit primitives of Repository (which provides these attributes and lookups)."""

    storage: Storage
    objects: ObjectStore
    nonce: Callable[[], bytes]
    ids: dict[Digest, tuple[str, int]]
    _hinted: set[str]
    _headers: dict[str, tuple[int, bytes, int]]
    _retired: dict[str, tuple[int, list[int]]]
    retired_reused: int
    _window_error: CorruptObject | None

    def check_writable(self) -> StoreConfig:
        raise NotImplementedError

    def record(self, run_id: str, seq: int) -> RunRecord:
        raise NotImplementedError

    def commit(self, manifest: Manifest,
               chunks: list[tuple[Digest, bytes | memoryview]] | None = None,
               results: Iterable[ChunkRef] = ()) -> Snapshot:
        """Write ``chunks`` and the manifest, then create the run record only if absent.
        ``results``: chunks the ledger's results name (the record locates them too). Reported
        (``ckptfs.observe``): run, seq, boundary, bytes and chunks written, outcome, time."""
        t0 = observe.now_ns()
        outcome = "error"
        try:
            snap = self._commit(manifest, chunks, results)
            outcome = "ok"
            return snap
        except ConflictError:
            outcome = "conflict"
            raise
        except OutcomeUnknown:
            outcome = "unknown"
            raise
        finally:
            observe.emit(observe.Event("commit", {
                "run": manifest.run, "seq": manifest.seq, "boundary": manifest.boundary,
                "bytes": sum(len(b) for _, b in chunks or ()), "chunks": len(chunks or ()),
                "outcome": outcome}, t0, observe.now_ns()))

    def _commit(self, manifest: Manifest, chunks: list[tuple[Digest, bytes | memoryview]] | None,
                results: Iterable[ChunkRef]) -> Snapshot:
        cfg = self.check_writable()  # a commit needs a version 2 store
        if self._window_error is not None:
            raise self._window_error
        results = list(results)
        if chunks:  # only what the snapshot names is carried (format.md 10: an appended piece
            # merged away in the same commit is no body; spec/v2.md 5.2.1)
            needed = named_raws(manifest, self.objects.manifest_bytes.chunk_lists) | {
                r.digest.raw for r in results}
            chunks = [(c, b) for c, b in chunks if c.raw in needed]
        # the nonce makes this record's bytes ours alone: after a lost answer the storage
        # layer reads the record back and takes identical bytes as proof that it landed
        base = self._header_base(manifest, cfg)
        d, rec_bytes, objects, own = self.objects.prepare_v2(
            manifest, chunks or [], results, nonce=self.nonce(), settings=cfg.settings,
            parent=self._parent_record(manifest),
            compress=COMPRESSED_HEADERS in cfg.required,
            base=None if base is None else (base[0], base[1]))
        try:
            self.storage.commit(objects, record_path(manifest.run, manifest.seq), rec_bytes)
            self.objects.known.update(c for c, _ in chunks or [])
        except FileExistsError:
            raise ConflictError(
                f"run {manifest.run!r}: sequence number {manifest.seq} was committed by another "
                "writer first (the run was resumed twice, or two processes share it). This "
                "commit did not happen; resume again from the new head to continue."
            ) from None
        except OutcomeUnknown as e:
            raise OutcomeUnknown(
                f"run {manifest.run!r}: whether snapshot {manifest.seq} was committed is unknown "
                f"(the store failed while answering, and then while being read back: {e}). Do "
                "not continue from this run handle: resume the run once the store is reachable; "
                f"its head is {manifest.seq} if the commit landed.") from e
        self.objects.locations.wrote_record(RecordRef(manifest.run, manifest.seq),
                                            {c.raw: x for c, x in own.items()},
                                            self.objects.last_table)
        if DELTA_HEADERS in cfg.required:
            self._headers[manifest.run] = (manifest.seq, self.objects.last_header,
                                           0 if base is None else base[2] + 1)
            header_bases.remember(self.storage, manifest.run, manifest.seq,
                                  self.objects.last_header)
        self.ids[d] = (manifest.run, manifest.seq)
        try:
            # the lease first (spec/v2.md 5.4: a retired-range listing is reused only while no
            # maintenance can have acted since a quiet look that preceded it)
            seen = self.objects.sweeps.look_after()
            self._check_not_retired(manifest.run, manifest.seq, seen)
            # retention hook (spec/retention.md "Sweeps and writers", ckptfs.store.sweeps): if
            # a gc/erase sweep may have run during this commit, wait for it and restore what
            # it took
            self.objects.sweeps.after_record(
                manifest, lambda: ledger_results(self.objects, d, manifest), seen)
        except ConflictError:  # withdrawn: its bodies are gone with it
            self.objects.locations.forget([RecordRef(manifest.run, manifest.seq)])
            self._headers.pop(manifest.run, None)
            header_bases.forget(self.storage, manifest.run)
            self.objects.known.discard(own)
            self.ids.pop(d, None)
            raise
        self._maybe_hint(manifest, d)
        return Snapshot(d, manifest)

    def _header_base(self, manifest: Manifest, cfg: StoreConfig
                     ) -> tuple[int, bytes, int] | None:
        """The record to store this commit's header against (spec/v2.md 3.1.2): only in a
        store that requires ``delta-headers``, only the parent's record when this process
        committed it (the previous seq of the same run: its header is at hand), and only while
        the chain stays under DELTA_CHAIN. None: the header is stored whole."""
        if DELTA_HEADERS not in cfg.required or manifest.parent is None:
            return None
        last = self._headers.get(manifest.run)
        if last is None or last[0] != manifest.seq - 1 \
                or self.ids.get(manifest.parent) != (manifest.run, manifest.seq - 1):
            return None
        return last if last[2] + 1 < DELTA_CHAIN else None

    def _parent_record(self, manifest: Manifest) -> RecordRef | None:
        """v2: the record of ``manifest``'s parent, its table remembered (read once if this
        process does not remember it); None when the parent is unknown here or unreadable
        (then every chunk the commit does not carry or did not write itself is carried:
        spec/v2.md 5.2)."""
        if manifest.parent is None:
            return None
        at = self.ids.get(manifest.parent)
        return None if at is None else self._located(RecordRef(*at), manifest.parent)

    def _located(self, ref: RecordRef, snapshot: Digest) -> RecordRef | None:
        """``ref``, the record of ``snapshot``, once its table is remembered (read once if
        need be); None when it cannot be read or commits another snapshot."""
        if self.objects.locations.table(ref) is None:
            try:
                if self.record(ref.run, ref.seq).snapshot != snapshot:
                    return None
            except CkptfsError:
                return None
        return ref if self.objects.locations.table(ref) is not None else None

    def reusable(self, parent: Snapshot | None) -> ParentChunks:
        """The chunks the next commit of ``parent``'s run (at ``parent.seq + 1``) may locate
        instead of writing because ``parent`` names them (spec/v2.md 5.2): writers skip them
        while they cut (a streamed blob, a value) and ``prepare_v2`` takes their locators from
        the parent's record, as it does for every chunk the parent names. ``NO_PARENT``
        (nothing) when the parent's record cannot be read: then the commit writes what it
        cuts, which is never wrong, only larger."""
        if parent is None:
            return NO_PARENT
        named = named_raws(parent.manifest, self.objects.manifest_bytes.chunk_lists)
        ref = self._located(RecordRef(parent.run, parent.seq), parent.digest)
        table = self.objects.locations.table(ref)
        return NO_PARENT if table is None else ParentChunks(named, table)

    def _maybe_hint(self, manifest: Manifest, d: Digest) -> None:
        """Write the run's head hint where it saves requests (backends that list from a key)
        every HINT_EVERY commits and on a run's first commit in this process; a failure is
        ignored (the hint is advisory, spec/v2.md)."""
        if not self._lists_after():
            return
        first = manifest.run not in self._hinted
        if not first and manifest.seq % HINT_EVERY:
            return
        self._hinted.add(manifest.run)
        try:
            self.storage.hint(head_hint_path(manifest.run),
                              HeadHint(manifest.run, manifest.seq, d, now_ms()).to_bytes())
        except (OSError, CkptfsError):
            pass

    def _lists_after(self) -> bool:
        return self.storage.lists_after

    def _check_not_retired(self, run_id: str, seq: int, seen: Seen | None = None) -> None:
        """After creating a record: if ``seq`` lies in a retired range (it was forgotten, or the
        run was fenced), the record landed in a gap; withdraw it (spec/retention.md "Fences").
        The run's retired markers are listed again unless a listing taken after a quiet look
        of the same lease generation as ``seen`` (the look taken after this record) is known:
        no maintenance changed them since (spec/v2.md section 5.4)."""
        cached = self._retired.get(run_id) if self.objects.sweeps.window_ms > 0 else None
        if seen is not None and seen.quiet and cached is not None and cached[0] == seen.gen:
            throughs = cached[1]
            self.retired_reused += 1
        else:
            throughs = retired_throughs(self.storage, run_id)
            if seen is not None and seen.quiet:
                self._retired[run_id] = (seen.gen, throughs)
            else:
                self._retired.pop(run_id, None)
        if throughs and seq <= throughs[-1]:
            self.storage.delete(record_path(run_id, seq))
            raise ConflictError(
                f"run {run_id!r}: sequence number {seq} was retired (a snapshot there was "
                "forgotten, or the run was erased or fenced); this commit did not happen. Resume "
                "the run's head, or fork into a new run.")
