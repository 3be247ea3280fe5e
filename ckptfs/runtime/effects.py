"""Side effects and approvals through the ledger: a resumed run never performs one twice.

The rule (spec "Effect ledger"): commit the intent (boundary ``before_effect``) before calling
the function, commit its result (``after_effect``) after. On a later call with the same key a
completed effect returns its recorded result, a failed one raises ``EffectFailed``, and an
intent without an outcome is in doubt: ``EffectInDoubt`` unless ``reconcile`` settles it.
Every commit is create-only on the run's next sequence number, so a second process resuming
the same head loses its intent commit (ConflictError) and never calls the function.

Leases (spec "Leases"): an intent names its owner (this process, ``process_owner()``) and a
deadline (``timeout`` after it was made). Until the deadline another process that resumes the
intent neither reconciles nor re-issues it (``EffectInProgress``, or it waits with ``wait=``):
the call may still be under way and may land after any reconciliation asked. The owner whose
call returned records the outcome even when another process committed on top meanwhile (it
re-reads the head and appends there) unless the effect was re-issued or settled after the
deadline; then it raises ``EffectSuperseded`` and records nothing that contradicts the ledger.

This module holds the ledger protocol (issue, record, settle, approvals); the owner names,
the calls in flight in this process and the lease arguments are ``effect_owners``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from ckptfs import observe
from ckptfs.errors import (
    ApprovalPending,
    BoundaryError,
    ConflictError,
    EffectFailed,
    EffectInDoubt,
    EffectInProgress,
    EffectMismatch,
    EffectSuperseded,
    NotFound,
)
from ckptfs.format import cbor
from ckptfs.format.digest import Digest
from ckptfs.format.ledger import (
    INLINE_RESULT_MAX,
    MAX_ERROR_TEXT,
    MAX_KEY,
    Effect,
    Kind,
    Record,
    Via,
    args_digest,
)
from ckptfs.format.models import Captured
from ckptfs.runtime.effect_owners import (  # re-exported: their old home
    DEFAULT_TIMEOUT as DEFAULT_TIMEOUT,
    MAX_TIMEOUT as MAX_TIMEOUT,
    call_ended,
    call_started,
    held_elsewhere as held_elsewhere,
    lease_ms as lease_ms,
    owner_gone as owner_gone,
    process_owner as process_owner,
    set_process_owner as set_process_owner,
    wait_seconds,
)
from ckptfs.store.entries import EntryWriter
from ckptfs.store.entry_reads import decode_value, read_content
from ckptfs.store.repository import Snapshot

if TYPE_CHECKING:
    from ckptfs.runtime.run import Run


class _NotDone:
    """The type of ``NOT_DONE``."""

    def __repr__(self) -> str:
        return "ckptfs.NOT_DONE"


#: what ``reconcile`` returns when the outside world never saw the effect: it is issued again
NOT_DONE = _NotDone()
#: how often the owner re-bases its outcome record when other processes keep committing
MAX_REBASES = 100


# -- performing an effect ----------------------------------------------------------------------
def perform(run: Run, name: str, fn: Callable[..., Any], args: tuple[Any, ...],
            kwargs: Mapping[str, Any], *, key: str,
            reconcile: Callable[[Effect], Any] | None = None,
            timeout: float = DEFAULT_TIMEOUT, wait: bool | float = False,
            pass_key: str | None = None) -> Any:
    """``run.effect``: the recorded outcome for ``key``, or call ``fn`` between two commits
    (with the key as keyword ``pass_key`` when given; it is not among the digested args)."""
    got = issue(run, name, args, kwargs, key=key, reconcile=reconcile, timeout=timeout,
                wait=wait)
    if isinstance(got, Known):
        return got.value
    try:
        try:
            result = fn(*args, **kwargs, **({pass_key: key} if pass_key else {}))
        except Exception as e:  # BaseException (SIGINT, exit) leaves the effect in doubt
            record_outcome(run, got, "failed", error=e)
            raise
        return record_outcome(run, got, "completed", result=result)
    finally:
        release(run, got)


@attrs.frozen
class Known:
    """What ``issue`` found: the key's outcome is known (recorded, waited for, reconciled),
    and the function is not called."""

    value: Any


def issue(run: Run, name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any], *,
          key: str, reconcile: Callable[[Effect], Any] | None = None,
          timeout: float = DEFAULT_TIMEOUT, wait: bool | float = False) -> Known | Record:
    """The first half of ``perform``: the known outcome for ``key``, or the committed intent
    of a call that the caller now makes, then records (``record_outcome``) and in every case
    ends with ``release``. Split so that ``Run.aeffect`` awaits the call on its event loop
    and runs only the commits in a worker thread, under exactly the same rules."""
    lease = lease_ms(timeout)
    patience = wait_seconds(wait)
    digest = args_digest(args, kwargs)
    known = _known(run, key, "effect", name, digest)
    if known is not None and held_elsewhere(run, known):
        settled = _wait_for(run, known, patience)
        if settled is not None:  # the owner recorded the outcome at a newer head
            if settled.status == "failed":
                raise EffectFailed(settled)
            return Known(result_of(run, settled))
    if known is not None:
        if known.status == "completed":
            return Known(result_of(run, known))
        if known.status == "failed":
            raise EffectFailed(known)
        observe.instant("effect.in_doubt", run=run.id, key=known.key, name=known.name,
                        attempt=run.attempt, reconcile=reconcile is not None)
        if reconcile is None:
            raise EffectInDoubt(known)
        found = reconcile(known)
        if found is not NOT_DONE:
            _append(run, *_settle(known, run, "completed", via="reconcile", result=found),
                    boundary="after_effect")
            return Known(found)
    _check_closed(run, key)
    at = run.store.now()
    owner, deadline = run.owner, at + lease
    intent = Record(key=key, kind="effect", name=name, args=digest, status="intended",
                    at=at, attempt=run.attempt, owner=owner, deadline=deadline)
    call_started((owner, key, at))
    run._open_effect = key
    try:
        _append(run, intent, boundary="before_effect")
        if run.store.now() >= deadline:  # the commit outlasted the lease: another
            observe.instant("effect.in_doubt", run=run.id, key=key, name=name,
                            attempt=run.attempt, reconcile=False)
            raise EffectInDoubt(run.ledger.effects[key], (  # process may re-issue it now
                f"effect {key!r} ({name}): its intent was committed only after its lease ran "
                f"out ({lease} ms), so the call was not started: another process may already "
                "treat it as in doubt. It is in doubt now: call again with reconcile= (it will "
                "find it not done), and use a longer timeout= for a store this slow."))
    except BaseException:
        release(run, intent)
        raise
    return intent


def begin(run: Run, name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any], *,
          key: str, timeout: float = DEFAULT_TIMEOUT) -> Record:
    """``Run.begin_effect``: commit the intent of a call the caller makes itself and return
    it (``end`` records the outcome). A key already in the ledger is never begun again:
    EffectFailed (it failed), EffectInProgress (its owner may still be calling it),
    EffectInDoubt (its process stopped between intent and outcome) or EffectMismatch (it
    completed, or the key names another effect)."""
    eff = _known(run, key, "effect", name, args_digest(args, kwargs))
    if eff is not None:
        if eff.status == "completed":
            raise EffectMismatch(
                f"effect {key!r} ({eff.name}) completed already (ledger of run {run.id!r}); it "
                "is not begun again. Continue from a history that holds its result.")
        if eff.status == "failed":
            raise EffectFailed(eff)
        if held_elsewhere(run, eff):
            raise EffectInProgress(eff, run.store.now())
        raise EffectInDoubt(eff)
    _check_closed(run, key)
    at = run.store.now()
    intent = Record(key=key, kind="effect", name=name, args=args_digest(args, kwargs),
                    status="intended", at=at, attempt=run.attempt, owner=run.owner,
                    deadline=at + lease_ms(timeout))
    _append(run, intent, boundary="before_effect")
    return intent


def end(run: Run, intent: Record, *, result: Any = None,
        failed: str | BaseException | None = None) -> Any:
    """``Run.end_effect``: commit the outcome of a call begun with ``begin``."""
    if failed is not None:
        record_outcome(run, intent, "failed",
                       error=failed if isinstance(failed, BaseException) else _Failed(failed))
        return None
    return record_outcome(run, intent, "completed", result=result)


class _Failed(Exception):
    """A failure reported as text (``end(failed="...")``): recorded as that text."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def release(run: Run, intent: Record) -> None:
    """The call of ``intent`` has ended (with or without a recorded outcome): the run may
    commit again, and this process no longer counts it as running."""
    run._open_effect = None
    call_ended((intent.owner or "", intent.key, intent.at))


def _wait_for(run: Run, eff: Effect, patience: float) -> Effect | None:
    """Wait (at most ``patience`` seconds) while another process holds ``eff``'s lease. None
    when the lease ran out with this handle still at the run's head (the caller goes on as
    for an in-doubt effect); the settled effect when the owner recorded its outcome at a
    newer head (this handle is then fenced: the run moved on without it). EffectInProgress
    when the wait ends first; ConflictError when the run moved on but left the key open."""
    key = eff.key
    start = time.monotonic()
    give_up = start + patience
    delay = 0.01
    moved = False
    lease_end = math.inf
    while True:
        now = run.store.now()
        if not held_elsewhere(run, eff):
            if moved:
                _fence(run, f"run {run.id!r}: other processes committed while this handle "
                            f"waited for effect {key!r}; resume the run and call it again")
                raise ConflictError(run._fenced or "")
            return None
        t = time.monotonic()
        to_deadline = ((eff.deadline or now) - now) / 1000
        lease_end = min(lease_end, t + to_deadline + 1.0)  # a store clock that stands still
        if t >= give_up or t >= lease_end:                  # cannot hold us forever
            raise EffectInProgress(eff, now)
        time.sleep(max(0.001, min(delay, give_up - t, to_deadline)))
        delay = min(delay * 2, 0.5)
        head = _head(run)
        if head is None or (run.snapshot is not None and head.digest == run.snapshot.digest):
            continue
        newer = run.store._ledger(head)[0].get(key)
        if newer is None:
            _fence(run, f"run {run.id!r}: the run's head no longer holds effect {key!r}; "
                        "resume the run")
            raise ConflictError(run._fenced or "")
        if (newer.owner, newer.intended_at) != (eff.owner, eff.intended_at):
            lease_end = math.inf  # a new lease: it is waited for on its own deadline
        moved, eff = True, newer
        if newer.status != "intended":
            _fence(run, f"run {run.id!r}: effect {key!r} was settled at seq {head.seq} by the "
                        "process that performed it while this handle waited; the outcome is "
                        "returned, and this handle is behind the run's head: resume the run "
                        "to continue")
            return newer


def _head(run: Run) -> Snapshot | None:
    try:
        return run.store.head(run.id)
    except NotFound:
        return None


def _fence(run: Run, why: str) -> None:
    run._fenced = run._fenced or why


def record_outcome(run: Run, intent: Record, status: Any, *, result: Any = None,
                    error: BaseException | None = None) -> Any:
    """Commit the outcome of this process's call; if another process committed on top of the
    intent meanwhile, re-read the head and append the outcome there, as long as the key is
    still open under this very intent. Returns ``result``; EffectSuperseded when the effect
    was re-issued or settled by someone else (after the lease ran out)."""
    mine = run.ledger.effects[intent.key]  # the fold just after this call's intent
    rec, chunks = _settle(mine, run, status, via="call", result=result, error=error)
    try:
        _append(run, rec, chunks, boundary="after_effect")
        return result
    except ConflictError:
        pass
    key = intent.key
    for _ in range(MAX_REBASES):
        head = _head(run)
        if head is None:
            raise ConflictError(f"run {run.id!r} has no snapshots any more; the outcome of "
                                f"effect {key!r} was not recorded")
        ledger, ledger_writer = run.store._ledger(head, run._writer)
        eff = ledger.get(key)
        if eff is None or eff.issues != mine.issues or (
                (eff.owner, eff.intended_at) != (intent.owner, intent.at)):
            by = f"owner {eff.owner!r}" if eff is not None else "a rewritten history"
            raise EffectSuperseded(eff or intent, result=result, error=error,
                                   why=f"its lease ran out and it was re-issued by {by} "
                                       f"(seq {head.seq})")
        if eff.status != "intended":
            if status == "completed" and eff.status == "completed":
                return result  # reconciled as done: the ledger agrees that it happened
            raise EffectSuperseded(eff, result=result, error=error,
                                   why=f"its lease ran out and it was settled as {eff.status} "
                                       f"({eff.via}) at seq {head.seq}")
        assert ledger_writer is not None
        run.snapshot, run._ledger, run._ledger_writer, run._fenced = (
            head, ledger, ledger_writer, None)
        try:
            snap = _append(run, rec, chunks, boundary="after_effect")
        except ConflictError:
            continue
        run._fenced = (
            f"run {run.id!r}: another process committed on top of this run while effect "
            f"{key!r} was running; its outcome is recorded at seq {snap.seq}, on top of that, "
            "but this handle does not hold the run's latest state: resume the run to continue")
        return result
    raise ConflictError(f"run {run.id!r}: other processes kept committing; the outcome of "
                        f"effect {key!r} was not recorded after {MAX_REBASES} tries. It stays "
                        "in doubt: reconcile it or settle it by hand")


def settle(run: Run, key: str, *, result: Any = NOT_DONE,
           failed: str | BaseException | None = None) -> Effect:
    """``run.settle_effect``: a human records how an in-doubt effect ended."""
    eff = run.ledger.get(key)
    if eff is None or not eff.in_doubt:
        state = "does not exist" if eff is None else f"is {eff.status} ({eff.kind})"
        raise EffectMismatch(f"effect {key!r} {state}; only an in-doubt effect can be settled")
    if (result is NOT_DONE) == (failed is None):
        raise ValueError("settle_effect takes exactly one of result= or failed=")
    if held_elsewhere(run, eff):
        raise EffectInProgress(eff, run.store.now())
    settled = (_settle(eff, run, "completed", via="manual", result=result) if failed is None
               else _settle(eff, run, "failed", via="manual", error=failed))
    _check_closed(run, key)
    _append(run, *settled, boundary="after_effect")
    return run.ledger.effects[key]


@attrs.frozen
class Decision:
    """A human's answer to an approval request."""

    approved: bool
    decision: Any = None


def wait_for_approval(run: Run, request: Any, *, key: str, name: str = "approval") -> Decision:
    """The recorded decision for ``key``; otherwise record the request (once), checkpoint at
    ``approval`` and raise ApprovalPending so the caller stops until someone decides."""
    cbor.check_plain(request, what=f"approval request {key!r}",
                     max_depth=cbor.LEDGER_VALUE_DEPTH)
    digest = args_digest([request], {})
    known = _known(run, key, "approval", name, digest)
    if known is None:
        _check_closed(run, key)
        _append(run, Record(key=key, kind="approval", name=name, args=digest, status="intended",
                            at=run.store.now(), attempt=run.attempt, request=request), boundary="approval")
        known = run.ledger.effects[key]
    if known.status == "intended":
        raise ApprovalPending(known)
    res = result_of(run, known)
    return Decision(approved=bool(res.get("approved")), decision=res.get("decision"))


def decide(run: Run, key: str, *, approved: bool, decision: Any) -> Effect:
    """``run.approve`` / ``run.reject``: settle a pending request, once."""
    eff = run.ledger.get(key)
    if eff is None or not eff.pending:
        state = ("does not exist" if eff is None else
                 f"was already decided ({'approved' if result_of(run, eff).get('approved') else 'rejected'})"
                 if eff.kind == "approval" else "is an effect, not an approval")
        raise EffectMismatch(f"approval {key!r} {state}; a request is decided once")
    _check_closed(run, key)
    _append(run, *_settle(eff, run, "completed", via="manual",
                          result={"approved": approved, "decision": decision}), boundary="approval")
    return run.ledger.effects[key]


def result_of(run: Run, eff: Effect) -> Any:
    """The recorded result of a completed effect (read from the store when it was large)."""
    if eff.result_content is None:
        return eff.result
    where = f"run {run.id!r} effect {eff.key!r} result"
    content = read_content(run.store.repo.objects, eff.result_content, where=where)
    return decode_value(eff.result_content, content, where=where)


# -- helpers -----------------------------------------------------------------------------------
def _known(run: Run, key: str, kind: Kind, name: str, digest: Any) -> Effect | None:
    if type(key) is not str or not (1 <= len(key) <= MAX_KEY):
        raise ValueError(f"an idempotency key is text of 1..{MAX_KEY} characters, not {key!r:.80}")
    eff = run.ledger.get(key)
    if eff is not None and (eff.kind, eff.name, eff.args) != (kind, name, digest):
        what = "arguments" if (eff.kind, eff.name) == (kind, name) else "kind or name"
        raise EffectMismatch(
            f"key {key!r} was used for {eff.kind} {eff.name!r} with other {what}; an "
            "idempotency key names exactly one effect in a run. Use a new key for a new effect.")
    return eff


def _check_closed(run: Run, key: str) -> None:
    if run._open_effect is not None:
        raise BoundaryError(f"run {run.id!r}: cannot start {key!r} inside effect "
                            f"{run._open_effect!r}; effects do not nest")


Chunks = list[tuple[Digest, bytes | memoryview]]


def _settle(eff: Effect, run: Run, status: Any, *, via: Via, result: Any = None,
            error: str | BaseException | None = None) -> tuple[Record, Chunks]:
    """The settling record, and the chunks a large result needs."""
    content: Captured | None = None
    chunks: Chunks = []
    if status == "completed":
        content, chunks = _large(run, eff.key, result)
    err = None
    if error is not None:
        err = {"type": _recordable("str" if isinstance(error, str) else type(error).__qualname__),
               "message": _recordable(error_text(error))}
    return Record(key=eff.key, kind=eff.kind, name=eff.name, args=eff.args, status=status,
                  at=run.store.now(), attempt=run.attempt, result=None if content else result,
                  result_content=content, error=err, via=via), chunks


def error_text(error: str | BaseException) -> str:
    """An error's message for its ``failed`` record; a fallback text when ``str()`` raises
    (the failure is still recorded, and the caller still gets its own exception)."""
    if isinstance(error, str):
        return error
    try:
        text = str(error)
    except Exception as e:
        return (f"<the message of this {type(error).__qualname__} cannot be shown: str() "
                f"raised {type(e).__qualname__}>")
    return text if isinstance(text, str) else repr(text)


def _recordable(text: str) -> str:
    """``text`` as a record can hold it: valid UTF-8 (lone surrogates escaped) and at most
    MAX_ERROR_TEXT characters, so that recording a failure never makes the ledger unreadable."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")[:MAX_ERROR_TEXT]


def _large(run: Run, key: str, result: Any) -> tuple[Captured | None, Chunks]:
    """Chunks for a result too big to sit in the ledger record (None: it is stored inline)."""
    try:
        cbor.check_plain(result, what=f"result of effect {key!r}",
                         max_depth=cbor.LEDGER_VALUE_DEPTH)
    except TypeError as e:
        raise TypeError(f"{e} The effect happened but its result cannot be recorded: it stays "
                        "in doubt until run.settle_effect() records a plain result.") from None
    return large_result(run._ledger_writer, result)


def large_result(writer: EntryWriter, result: Any) -> tuple[Captured | None, Chunks]:
    """A plain result as a value entry and the chunks it needs when its canonical CBOR is over
    INLINE_RESULT_MAX; (None, []) when it belongs inline in its record."""
    if len(cbor.encode(result)) <= INLINE_RESULT_MAX:
        return None, []
    w = EntryWriter(writer.objects, writer.params)
    entry = w.encode_state({"result": result})["result"]
    assert isinstance(entry, Captured)
    return entry, w.pending


def _append(run: Run, rec: Record, chunks: Chunks | None = None, *, boundary: str) -> Snapshot:
    """Commit the last snapshot's state with ``rec`` added to the ledger; on any failure the
    run's ledger stays as it was (the commit did not happen)."""
    before = run._ledger
    run._ledger = before.append(rec, what=f"run {run.id!r} ledger")
    try:
        return run._commit(None, boundary, labels={"ckptfs.effect": rec.key[:1024]},
                           chunks=chunks)
    except BaseException:
        run._ledger = before
        raise
