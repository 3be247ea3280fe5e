"""Side effects and approvals through the ledger: a resumed run never performs one twice.

The rule (spec "Effect ledger"): commit the intent (boundary ``before_effect``) before calling
the function, commit its result (``after_effect``) after. On a later call with the same key a
completed effect returns its recorded result, a failed one raises ``EffectFailed``, and an
intent without an outcome is in doubt: ``EffectInDoubt`` unless ``reconcile`` settles it.
Every commit is create-only on the run's next sequence number, so a second process resuming
the same head loses its intent commit (ConflictError) and never calls the function.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from ckptfs.errors import (
    ApprovalPending,
    BoundaryError,
    EffectFailed,
    EffectInDoubt,
    EffectMismatch,
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
from ckptfs.store.entries import EntryWriter, decode_value, read_content
from ckptfs.store.repository import Snapshot

if TYPE_CHECKING:
    from ckptfs.runtime.run import Run


class _NotDone:
    """The type of ``NOT_DONE``."""

    def __repr__(self) -> str:
        return "ckptfs.NOT_DONE"


#: what ``reconcile`` returns when the outside world never saw the effect: it is issued again
NOT_DONE = _NotDone()


def perform(run: Run, name: str, fn: Callable[..., Any], args: tuple[Any, ...],
            kwargs: Mapping[str, Any], *, key: str,
            reconcile: Callable[[Effect], Any] | None = None) -> Any:
    """``run.effect``: the recorded outcome for ``key``, or call ``fn`` between two commits."""
    digest = args_digest(args, kwargs)
    known = _known(run, key, "effect", name, digest)
    if known is not None:
        if known.status == "completed":
            return result_of(run, known)
        if known.status == "failed":
            raise EffectFailed(known)
        if reconcile is None:
            raise EffectInDoubt(known)
        found = reconcile(known)
        if found is not NOT_DONE:
            _append(run, *_settle(known, run, "completed", via="reconcile", result=found),
                    boundary="after_effect")
            return found
    _check_closed(run, key)
    intent = Record(key=key, kind="effect", name=name, args=digest, status="intended",
                    at=run.store.now(), attempt=run.attempt)
    run._open_effect = key
    try:
        _append(run, intent, boundary="before_effect")
        try:
            result = fn(*args, **kwargs)
        except Exception as e:  # BaseException (SIGINT, exit) leaves the effect in doubt
            _append(run, *_settle(run.ledger.effects[key], run, "failed", via="call", error=e),
                    boundary="after_effect")
            raise
        _append(run, *_settle(run.ledger.effects[key], run, "completed", via="call",
                              result=result), boundary="after_effect")
        return result
    finally:
        run._open_effect = None


def settle(run: Run, key: str, *, result: Any = NOT_DONE,
           failed: str | BaseException | None = None) -> Effect:
    """``run.settle_effect``: a human records how an in-doubt effect ended."""
    eff = run.ledger.get(key)
    if eff is None or not eff.in_doubt:
        state = "does not exist" if eff is None else f"is {eff.status} ({eff.kind})"
        raise EffectMismatch(f"effect {key!r} {state}; only an in-doubt effect can be settled")
    if (result is NOT_DONE) == (failed is None):
        raise ValueError("settle_effect takes exactly one of result= or failed=")
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
        err = {"type": "str" if isinstance(error, str) else type(error).__qualname__,
               "message": (error if isinstance(error, str) else str(error))[:MAX_ERROR_TEXT]}
    return Record(key=eff.key, kind=eff.kind, name=eff.name, args=eff.args, status=status,
                  at=run.store.now(), attempt=run.attempt, result=None if content else result,
                  result_content=content, error=err, via=via), chunks


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
