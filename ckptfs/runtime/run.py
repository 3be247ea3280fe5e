"""A run: its id, schema, position in its history, and checkpoints at named boundaries."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ckptfs.errors import AppendError, BoundaryError, ConflictError, InvalidArgument
from ckptfs.format.digest import Digest
from ckptfs.format.ledger import Effect, Ledger, LedgerRef, Record
from ckptfs.format.models import Entry, Manifest, Reference, Schema
from ckptfs.format.names import check_boundary, check_label_key
from ckptfs.format.typed import FEATURE as TYPED_FEATURE
from ckptfs.format.values import Blob, Ref, StoredBlob
from ckptfs.format.when import epoch_ms
from ckptfs.runtime import effects as fx
from ckptfs.runtime.aio import Serial, call_effect_fn
from ckptfs.runtime.refs import capture
from ckptfs.runtime.shared_entries import SharedEntries
from ckptfs.store.blobs import stored_blob
from ckptfs.store.entries import EntryWriter
from ckptfs.store.lifecycle import default_expiry, set_run_expiry
from ckptfs.store.repository import Snapshot

if TYPE_CHECKING:
    from ckptfs.runtime.store import Store

#: Boundaries the runtime itself uses; callers may add their own names.
STANDARD_BOUNDARIES = ("start", "step", "before_effect", "after_effect", "approval", "final")


def expiry_ms(expires_at: Any) -> int | None:
    """Accept a Unix time in seconds, an aware datetime, or a timedelta from now (the rule of
    ``ckptfs.format.when``, shared with ``Ref``); InvalidArgument otherwise."""
    return epoch_ms(expires_at)


def _names(changed: Iterable[str]) -> frozenset[str]:
    if isinstance(changed, str):
        raise TypeError("changed takes a list of entry names, not one string "
                        f"(changed=[{changed!r}])")
    return frozenset(changed)


def _effect_kwargs(name: str, kwargs: Mapping[str, Any], fn_kwargs: Mapping[str, Any] | None,
                   pass_key: str | None) -> dict[str, Any]:
    """The keywords ``fn`` gets (``kwargs`` and ``fn_kwargs``), checked with ``pass_key``."""
    call = dict(kwargs)
    for k, v in (fn_kwargs or {}).items():
        if k in call:
            raise TypeError(f"effect {name!r}: keyword {k!r} given both in fn_kwargs and "
                            "as a keyword argument; give it once")
        call[k] = v
    if pass_key is not None and (not isinstance(pass_key, str) or pass_key in call):
        raise TypeError(f"effect {name!r}: pass_key={pass_key!r} must be a keyword name "
                        "that fn takes and no other argument already uses "
                        "(the idempotency key is passed under it)")
    return call


def check_labels(labels: Mapping[str, str] | None) -> dict[str, str]:
    out = {}
    for k, v in (labels or {}).items():
        check_label_key(k)
        if not isinstance(v, str):
            raise TypeError(f"label {k!r} must be a str, not {type(v).__name__}")
        out[k] = v
    return out


class Run:
    """A live run. Checkpoints commit at ``seq + 1``; losing that race fences this object."""

    def __init__(self, store: Store, run_id: str, schema: Schema, *, head: Snapshot | None,
                 resumed_from: Digest | None, attempt: int, state: dict[str, Any],
                 writer: EntryWriter, expires: int | None = None,
                 extra: Mapping[str, Any] | None = None, fork_of: Snapshot | None = None,
                 ledger: Ledger | None = None, ledger_writer: EntryWriter | None = None,
                 new_run: bool = False) -> None:
        self.store = store
        self.id = run_id
        self.schema = schema
        self.snapshot = head
        self.state = state
        self.attempt = attempt
        self._resumed_from = resumed_from
        self._writer = writer
        self._fenced: str | None = None
        self._open_effect: str | None = None
        #: who this handle's effect intents name as their owner (spec/ledger.md "Leases")
        self.owner = fx.process_owner()
        self.run_expires = expires
        #: a new run records its run-wide expiry (``start_run(expires_at=)``) at its first commit
        self._record_run_expiry = new_run and expires is not None
        #: for a fork: the snapshot (of another run) that the first commit names as parent
        self.fork_of = fork_of
        #: manifest fields that the next commit carries once (e.g. migration provenance)
        self._next_extra: dict[str, Any] = dict(extra or {})
        self._ledger = ledger or Ledger()
        #: entry -> (the caller's object, its stored form, its length when a list) as last
        #: encoded by the codecs: an O(change) commit reuses it for entries it need not walk
        self._encoded: dict[str, tuple[Any, Any, int]] = {}
        #: the ledger's own writer: appending a record writes only the new record's bytes
        self._ledger_writer = ledger_writer or EntryWriter(writer.objects, writer.params)
        #: the writer of entries marked shared (None: not needed yet; False: a plaintext store)
        self._shared: SharedEntries | bool | None = None
        #: the async API's worker thread for this run's storage work (ckptfs.runtime.aio)
        self._serial = Serial(run_id)

    @property
    def seq(self) -> int:
        return self.snapshot.seq if self.snapshot else 0

    @property
    def resumed_from(self) -> str | None:
        """The snapshot this process resumed from (also recorded in its first commit)."""
        return self._resumed_from.text if self._resumed_from else None

    def checkpoint(self, state: Mapping[str, Any], boundary: str = "step", *,
                   labels: Mapping[str, str] | None = None, expires_at: Any = None,
                   entry_labels: Mapping[str, Mapping[str, str]] | None = None,
                   changed: Iterable[str] | None = None,
                   shared: Iterable[str] | None = None) -> Snapshot:
        """Durably commit ``state`` as the run's next snapshot, at a named boundary.

        ``shared`` (encrypted stores): names of entries that hold **no personal data** (a
        system prompt, tool schemas), stored in the store-wide ``shared`` key scope so that
        every run carrying the same value stores it once. No erasure reaches them: never name
        an entry that holds anything about a person. Name them at every checkpoint (an entry
        left out is stored in the run's own scope). On a plaintext store it changes nothing
        (every entry deduplicates across runs there).

        Without ``changed`` every entry is encoded to learn what changed (exact; O(state)).
        With ``changed`` (the names of the entries the caller changed since the last commit)
        the commit costs time proportional to the change. The library checks what it can see
        in O(change), and any entry that fails a check is encoded in full, so no visible
        change is lost:

        * an entry not named in ``changed`` is reused only when it is the *same object*
          (``is``) as in the last committed state and, for a list, has the same length;
        * a named list that is the same object, no shorter, and still holds the last committed
          item (the same object) at its old last position is taken as *appended to*: only the
          items after the old length are encoded; any other named entry is encoded in full.

        What it cannot see: a change made *in place* inside something already committed (an
        undeclared dict whose keys were edited, an item of a list that was committed and then
        mutated or replaced in its slot). Such a change would not be stored. Avoid it by
        naming every entry you touched in ``changed``, by treating committed list items as
        immutable (append new items; to edit an old one, pass a new list object), or by
        leaving ``changed`` out for that step (the exact full path). ``Run.audit()`` re-encodes
        committed items and raises StateMismatch when one differs from what was stored."""
        if self._open_effect is not None:
            raise BoundaryError(
                f"run {self.id!r}: cannot checkpoint at {boundary!r} while effect "
                f"{self._open_effect!r} is in progress; snapshots are only taken at boundaries")
        if not isinstance(state, Mapping):
            raise InvalidArgument(
                f"run {self.id!r}: checkpoint takes the state as a mapping of entry names to "
                f"values (a dict), not a {type(state).__name__}: e.g. run.checkpoint("
                "{'messages': [...]}); each name is an entry, read back by name")
        return self._commit(state, boundary, labels=labels, expires_at=expires_at,
                            entry_labels=entry_labels,
                            changed=None if changed is None else _names(changed),
                            shared=None if shared is None else _names(shared))

    def append(self, name: str, *items: Any, boundary: str = "step",
               labels: Mapping[str, str] | None = None, expires_at: Any = None,
               entry_labels: Mapping[str, Mapping[str, str]] | None = None) -> Snapshot:
        """Commit the last committed state with the list entry ``name`` grown by ``items``
        (other entries unchanged), in time proportional to the items' size.

        The list is extended *in place*: ``run.state[name]`` is the list object of the last
        checkpoint, so a caller holding that list sees the items appear (its state and the
        stored one stay equal). If the commit fails, the items are removed again. Entries
        the caller changed in place since the last commit are not seen (see ``checkpoint``'s
        ``changed``); use ``checkpoint(state, changed=[...])`` to commit those too.
        AppendError when the run has no entry ``name`` or it is not a list."""
        if self._open_effect is not None:
            raise BoundaryError(
                f"run {self.id!r}: cannot checkpoint at {boundary!r} while effect "
                f"{self._open_effect!r} is in progress; snapshots are only taken at boundaries")
        if name not in self.state:
            raise AppendError(
                f"run {self.id!r}: cannot append to entry {name!r}: the last committed state "
                f"has no such entry (it has {sorted(self.state)!r}). Commit it first with "
                f"run.checkpoint({{..., {name!r}: [...]}}).")
        lst = self.state[name]
        if type(lst) is not list:
            raise AppendError(
                f"run {self.id!r}: cannot append to entry {name!r}: it holds a "
                f"{type(lst).__name__}, not a list. Use run.checkpoint(state, "
                f"changed=[{name!r}]) to commit a changed value of another type.")
        n = len(lst)
        lst.extend(items)
        try:
            return self._commit(self.state, boundary, labels=labels, expires_at=expires_at,
                                entry_labels=entry_labels, changed=frozenset((name,)))
        except BaseException:
            del lst[n:]
            raise

    def audit(self, names: Iterable[str] | None = None, *, window: int = 1000) -> int:
        """Check that the committed entries still equal what the caller holds: re-encode a
        rotating window of ``window`` items of each list entry (every other entry whole) and
        compare with what the last commit stored. StateMismatch names the first difference
        (a change made in place that ``checkpoint(changed=)``/``append`` could not see; commit
        with ``checkpoint(state)`` to store it). Returns the number of items compared."""
        return self._writer.audit(self.state, names, window=window, run=self.id)

    # -- the effect ledger (ckptfs.runtime.effects holds the rules) ----------------------------
    @property
    def ledger(self) -> Ledger:
        """Every ledger record this run has committed, and their fold by key."""
        return self._ledger

    def effects(self) -> list[Effect]:
        """The run's effects and approvals, one per key, in the order they were first issued."""
        return list(self._ledger.effects.values())

    def pending_approvals(self) -> list[Effect]:
        """Approval requests that wait for a human's ``approve``/``reject``."""
        return [e for e in self._ledger.effects.values() if e.pending]

    def effect(self, name: str, fn: Callable[..., Any], *args: Any, key: str,
               reconcile: Callable[[Effect], Any] | None = None,
               timeout: float = fx.DEFAULT_TIMEOUT, wait: bool | float = False,
               pass_key: str | None = None, fn_kwargs: Mapping[str, Any] | None = None,
               **kwargs: Any) -> Any:
        """Perform ``fn(*args, **kwargs)`` at most once per ``key`` across crashes and resumes:
        the intent is committed before the call and the result after (see fx.perform).

        ``timeout`` (seconds, default 60) is the intent's lease: until it runs out no other
        process reconciles or re-issues the effect; a call that takes longer may be repeated
        by another process (its own outcome is then not recorded: EffectSuperseded). When
        another process holds the lease, EffectInProgress is raised, or with ``wait=True``
        (or seconds) this call waits for that outcome or for the lease to run out.

        ``key``, ``reconcile``, ``timeout``, ``wait``, ``pass_key`` and ``fn_kwargs`` are not
        passed to ``fn``. ``pass_key="idempotency_key"`` passes the key to ``fn`` as that
        keyword (for APIs that take one, Stripe-style); ``fn_kwargs`` are keywords for ``fn``
        that may have any name, ``key`` included. Both count in the arguments a reused key
        must match, except the passed key itself."""
        call = _effect_kwargs(name, kwargs, fn_kwargs, pass_key)
        return fx.perform(self, name, fn, args, call, key=key, reconcile=reconcile,
                          timeout=timeout, wait=wait, pass_key=pass_key)

    def begin_effect(self, name: str, *args: Any, key: str,
                     timeout: float = fx.DEFAULT_TIMEOUT, **kwargs: Any) -> Record:
        """Commit the intent of an effect whose call the caller makes itself, and return it;
        ``end_effect(intent, ...)`` commits the outcome. For a framework that runs its tools
        itself and reports their start and end (a step store's ``record_tool_effect``), where
        ``effect`` cannot wrap the call. The same ledger records and rules as ``effect``: the
        intent (``args``/``kwargs`` digested, ``timeout`` its lease) is committed before the
        call, a process that stops before ``end_effect`` leaves the key in doubt, and a key
        already in the ledger is never begun again (EffectFailed, EffectInProgress,
        EffectInDoubt, or EffectMismatch for one that completed or names another effect).
        Unlike ``effect`` the run is not held at a boundary in between: the caller may
        checkpoint while the call runs."""
        return fx.begin(self, name, args, kwargs, key=key, timeout=timeout)

    def end_effect(self, intent: Record, *, result: Any = None,
                   failed: str | BaseException | None = None) -> Any:
        """Commit the outcome of a call begun with ``begin_effect``: ``result``, or with
        ``failed`` (an exception or its text) a failure. Returns ``result``. If another
        process committed on top of the intent meanwhile the outcome goes on its head, as
        ``effect``'s does; EffectSuperseded when the key was re-issued or settled there."""
        return fx.end(self, intent, result=result, failed=failed)

    # -- the async API (ckptfs.runtime.aio): the same calls, storage work off the loop ---------
    async def acheckpoint(self, state: Mapping[str, Any], boundary: str = "step", *,
                          labels: Mapping[str, str] | None = None, expires_at: Any = None,
                          entry_labels: Mapping[str, Mapping[str, str]] | None = None,
                          changed: Iterable[str] | None = None,
                          shared: Iterable[str] | None = None) -> Snapshot:
        """``checkpoint`` for asyncio code: encoding and the commit run in this run's worker
        thread, after every earlier ``acheckpoint``/``aappend``/``aeffect`` commit of the run
        (the order they were awaited), so the event loop keeps running. Same guarantees:
        a lost race fences the run (ConflictError). Leave ``state`` alone until it returns."""
        return await self._serial.call(self.checkpoint, state, boundary, labels=labels,
                                       expires_at=expires_at, entry_labels=entry_labels,
                                       changed=changed, shared=shared)

    async def aappend(self, name: str, *items: Any, boundary: str = "step",
                      labels: Mapping[str, str] | None = None, expires_at: Any = None,
                      entry_labels: Mapping[str, Mapping[str, str]] | None = None) -> Snapshot:
        """``append`` for asyncio code, in this run's worker thread and order (``acheckpoint``)."""
        return await self._serial.call(self.append, name, *items, boundary=boundary,
                                       labels=labels, expires_at=expires_at,
                                       entry_labels=entry_labels)

    async def aeffect(self, name: str, fn: Callable[..., Any], *args: Any, key: str,
                      reconcile: Callable[[Effect], Any] | None = None,
                      timeout: float = fx.DEFAULT_TIMEOUT, wait: bool | float = False,
                      pass_key: str | None = None, fn_kwargs: Mapping[str, Any] | None = None,
                      **kwargs: Any) -> Any:
        """``effect`` for asyncio code: ``fn`` may be a coroutine function (awaited on the
        loop) or a plain one (called in a worker thread); the intent and outcome commits run
        in this run's worker thread. Exactly the rules of ``effect``: intent committed before
        the call, outcome after, a recorded outcome returned without calling, a cancelled
        call left in doubt (as a call interrupted by a BaseException). ``reconcile`` is a
        plain function (run in the worker thread). Effects of one run do not overlap: a
        second ``aeffect`` of this run waits until the first has ended."""
        call = _effect_kwargs(name, kwargs, fn_kwargs, pass_key)
        async with self._serial.effect_lock():
            got = await self._serial.call(
                fx.issue, self, name, args, call, key=key, reconcile=reconcile, timeout=timeout,
                wait=wait, on_cancel=self._release_issued)
            if isinstance(got, fx.Known):
                return got.value
            try:
                try:
                    result = await call_effect_fn(
                        fn, *args, **call, **({pass_key: key} if pass_key else {}))
                except Exception as e:  # a BaseException (cancelled) leaves it in doubt
                    await self._serial.call(fx.record_outcome, self, got, "failed", error=e)
                    raise
                return await self._serial.call(fx.record_outcome, self, got, "completed",
                                               result=result)
            finally:
                fx.release(self, got)

    def _release_issued(self, got: fx.Known | Record) -> None:
        """``aeffect`` was cancelled while its intent was committed: the effect is in doubt."""
        if isinstance(got, Record):
            fx.release(self, got)

    def settle_effect(self, key: str, *, result: Any = fx.NOT_DONE,
                      failed: str | BaseException | None = None) -> Effect:
        """Record by hand how an in-doubt effect ended (after checking the outside world)."""
        return fx.settle(self, key, result=result, failed=failed)

    def wait_for_approval(self, request: Any, *, key: str, name: str = "approval") -> Any:
        """The decision on ``request``; if none yet, record it, checkpoint at ``approval`` and
        raise ApprovalPending (see fx.wait_for_approval)."""
        return fx.wait_for_approval(self, request, key=key, name=name)

    def approve(self, key: str, decision: Any = True) -> Effect:
        """Approve a pending request (recorded in the ledger; it is never asked again)."""
        return fx.decide(self, key, approved=True, decision=decision)

    def reject(self, key: str, reason: Any = None) -> Effect:
        """Reject a pending request (recorded in the ledger; it is never asked again)."""
        return fx.decide(self, key, approved=False, decision=reason)

    def _ledger_cbor(self, chunks: list[tuple[Digest, bytes | memoryview]]
                     ) -> dict[str, Any] | None:
        """The ledger field of the next manifest (null while empty); adds the chunks that only
        the new records need to ``chunks``."""
        if not self._ledger.records:
            return None
        e = self._ledger_writer.encode_state({"ledger": self._ledger.to_cbor()})["ledger"]
        assert not isinstance(e, Reference)
        chunks.extend(self._ledger_writer.pending)
        return LedgerRef.of(len(self._ledger), e).to_cbor()

    def _commit(self, state: Mapping[str, Any] | None, boundary: str, *,
                labels: Mapping[str, str] | None = None, expires_at: Any = None,
                entry_labels: Mapping[str, Mapping[str, str]] | None = None,
                chunks: list[tuple[Digest, bytes | memoryview]] | None = None,
                changed: frozenset[str] | None = None,
                shared: frozenset[str] | None = None) -> Snapshot:
        """Commit ``state`` (None: the last snapshot's entries unchanged, for ledger commits),
        writing ``chunks`` too."""
        if self._fenced:
            raise ConflictError(self._fenced)
        check_boundary(boundary)
        labels = check_labels(labels)
        for name, entry_label in (entry_labels or {}).items():
            if state is None or name not in state:
                raise KeyError(f"entry_labels names {name!r}, which is not an entry of this state")
            check_labels(entry_label)
        chunks = list(chunks or [])
        # what the parent (this run's head) names and locates is located, not written again,
        # however it comes back (a streamed blob, a value or ledger cut afresh): spec/v2.md 5.2
        self._writer.reuse = self._ledger_writer.reuse = self.store.repo.reusable(self.snapshot)
        prepared: dict[str, Any] | None = None
        entries: Mapping[str, Entry]
        required: tuple[str, ...] = ()
        if state is not None or self.snapshot is None:
            prepared = {k: capture(v) if isinstance(v, Ref) and v.capture else v
                        for k, v in (self.state if state is None else state).items()}
            encoded, typed, proven = self._typed(prepared, changed)
            # a value refused here (not plain data, too large) leaves the writer's memory as it
            # was: the O(change) path checks new items before it grows anything
            entries = self._encode(encoded, entry_labels, changed, proven, shared)
            chunks.extend(self._writer.pending)
            required = (TYPED_FEATURE,) if typed else ()
        else:
            entries = self.snapshot.manifest.entries
            required = self.snapshot.manifest.required
        created = self.store.now()
        expires = expiry_ms(expires_at)
        if expires is None:
            expires = self.run_expires
        if expires is None:
            expires = default_expiry(self.store.repo.config.settings, created)
        manifest = Manifest(
            run=self.id, seq=self.seq + 1, boundary=boundary, created=created,
            writer=self.store.writer_name, schema=self.schema, entries=entries,
            parent=(self.snapshot.digest if self.snapshot
                    else self.fork_of.digest if self.fork_of else None),
            resumed_from=self._resumed_from if self._pending_resume() else None,
            attempt=self.attempt, ledger=self._ledger_cbor(chunks), labels=labels,
            expires=expires, required=required, extra=self._next_extra)
        # retention hook (spec/retention.md "Grace rule"): chunks named but neither written here
        # nor named by this run's previous snapshot (a fork's parent's, a blob stored elsewhere)
        # are written again; none in the usual commit, and then no request is made
        chunks += self.store.repo.objects.unprotected_chunks(
            manifest, self.snapshot.manifest if self.snapshot else None, chunks,
            [c for r in self._ledger.records if r.result_content is not None
             for c in r.result_content.chunks] if self.snapshot is None else ())
        try:
            # v2 records locate every chunk the snapshot needs, the ledger's results included
            snap = self.store.repo.commit(manifest, chunks, results=[
                c for r in self._ledger.records if r.result_content is not None
                for c in r.result_content.chunks])
        except ConflictError as e:
            self._fenced = str(e)
            self._writer.forget(changed or ())
            raise
        except BaseException:
            # the writer's memory of these entries is ahead of the store: the next commit
            # encodes them in full (exact, and it writes their chunks again)
            self._writer.forget(changed or ())
            raise
        self.snapshot = snap
        self._next_extra = {}
        if self._record_run_expiry:
            set_run_expiry(self.store.storage, self.id, self.run_expires)
            self._record_run_expiry = False
        if prepared is not None:
            # blobs become stored blobs: the run's state can be checkpointed again (by an
            # effect, say) without re-reading a file or a consumed file object
            self.state = {k: stored_blob(self.store.repo.objects, entries[k], where=f"entry {k!r}")  # type: ignore[arg-type]
                          if isinstance(v, Blob) else v for k, v in prepared.items()}
        return snap

    def _encode(self, encoded: Mapping[str, Any],
                entry_labels: Mapping[str, Mapping[str, str]] | None,
                changed: frozenset[str] | None, proven: Mapping[str, tuple[bytes, int]],
                shared: frozenset[str] | None) -> Mapping[str, Entry]:
        """The entries of the encoded state: those named ``shared`` through the shared
        scope's writer on an encrypted store (ckptfs.runtime.shared_entries), the rest here."""
        if shared:
            missing = sorted(shared - encoded.keys())
            if missing:
                raise KeyError(f"shared names {missing[0]!r}, which is not an entry of this "
                               "state")
            if self._shared is None:
                from ckptfs.runtime.shared_entries import shared_store

                st = shared_store(self.store)
                self._shared = False if st is None else SharedEntries(
                    st, self.store.repo.objects)
        if not shared or not isinstance(self._shared, SharedEntries):
            return self._writer.encode_state(encoded, entry_labels, changed=changed,
                                             proven=proven)
        mine = self._shared.encode({k: v for k, v in encoded.items() if k in shared},
                                   entry_labels, self._writer.reuse)
        rest = self._writer.encode_state({k: v for k, v in encoded.items() if k not in shared},
                                         entry_labels, changed=changed, proven=proven)
        return {k: mine[k] if k in mine else rest[k] for k in encoded}

    def _typed(self, state: Mapping[str, Any], changed: frozenset[str] | None = None
               ) -> tuple[dict[str, Any], bool, dict[str, tuple[bytes, int]]]:
        """``state`` with values of registered types in their stored, tagged form (the store's
        ckptfs.Codecs), whether there were any (the manifest then requires the feature), and
        the fast form of the list entries the writer proved plain data without a walk in
        Python (``EntryWriter.proven_plain``: what the exact path costs for a grown list).

        With ``changed`` (an O(change) commit) an entry the caller did not name, still the same
        object as last time, reuses last time's encoding, and a named list that is the same
        object grown at its end has only its new items looked at: no walk of the whole state."""
        codecs = self.store.codecs
        out: dict[str, Any] = {}
        typed = False
        cache = self._encoded
        proven: dict[str, tuple[bytes, int]] = {}
        for k, v in state.items():
            if isinstance(v, (Blob, Ref, StoredBlob)) or not isinstance(k, str):
                out[k] = v
                continue
            hit = cache.get(k)
            if changed is not None and hit is not None and hit[0] is v:
                if k not in changed:
                    out[k] = hit[1]
                    typed = typed or hit[1] is not v
                    continue
                if type(v) is list and hit[1] is v and len(v) >= hit[2] and all(
                        codecs.encode(x, what=f"state[{k!r}][{i}]") is x
                        for i, x in enumerate(v[hit[2]:], hit[2])):
                    out[k] = v  # grown at its end by plain items: still its own encoding
                    cache[k] = (v, v, len(v))
                    continue
            fast = self._writer.proven_plain(k, v) if type(v) is list else None
            if fast is not None:
                out[k] = v  # plain data: its own stored form
                proven[k] = fast
            else:
                out[k] = codecs.encode(v, what=f"state[{k!r}]")
            cache[k] = (v, out[k], len(v) if type(v) is list else 0)
            typed = typed or out[k] is not v
        for k in [k for k in cache if k not in state]:
            del cache[k]
        return out, typed, proven

    def _pending_resume(self) -> bool:
        return (self._resumed_from is not None and self.snapshot is not None
                and self.snapshot.digest == self._resumed_from)

    def __repr__(self) -> str:
        return f"<Run {self.id!r} seq={self.seq} attempt={self.attempt} schema={self.schema}>"
