"""The one hierarchy of ckptfs errors.

Every error says what happened and what to do. Each class carries a ``category``: the short,
language-neutral name the spec (section "Error categories") and the conformance suite use.
"""

from __future__ import annotations

import time
from typing import Any


class CkptfsError(Exception):
    """Base of every error ckptfs raises on purpose."""

    category = "error"


class InvalidName(CkptfsError, ValueError):
    """A run id, entry name, label or path breaks the naming rules (path tricks included)."""

    category = "path"


class FormatError(CkptfsError, ValueError):
    """Bytes that do not follow the format: bad CBOR, wrong field types, bad framing."""

    category = "corrupt"


class NonCanonical(FormatError):
    """CBOR that decodes but is not in the canonical form the spec requires."""

    category = "non-canonical"


class CorruptObject(FormatError):
    """A stored object whose digest or size disagrees with what names it."""


class CorruptSnapshot(CorruptObject):
    """A snapshot whose manifest, entry or chunk is damaged; the message names which."""


class MissingObject(CkptfsError):
    """A chunk or manifest that a committed snapshot refers to is absent from the store."""

    category = "missing"


class NotFound(CkptfsError, LookupError):
    """The run, snapshot or entry asked for does not exist in this store."""

    category = "not-found"


class NotAStore(NotFound):
    """The URL holds no ckptfs store (no store config file)."""


class UnsupportedVersion(CkptfsError):
    """A store or manifest written in a format version this reader does not know."""

    category = "unsupported-version"


class UpgradeRequired(UnsupportedVersion):
    """A change asked of a format version 1 store (or a new version 1 store): ckptfs reads
    version 1 but writes only version 2; ``ckptfs upgrade`` turns the store into version 2."""


class UnsupportedFeature(CkptfsError):
    """A store or manifest requires a feature this reader does not implement."""

    category = "unsupported-feature"


class ConflictError(CkptfsError):
    """Another writer committed the same sequence number first; this commit did not happen."""

    category = "conflict"


class SessionConflict(ConflictError):
    """An agent adapter's write (a session's items, events, state) lost the race to another
    process that committed to the same session first; nothing of it was stored."""


class ExpiredError(CkptfsError):
    """The snapshot or run has passed its expiry and will not be restored."""

    category = "expired"


class ErasedError(NotFound):
    """The run or snapshot was erased; only its tombstone remains."""

    category = "erased"


class KeyringError(CkptfsError):
    """The keyring is missing, damaged, protected by another key or passphrase, or belongs to
    another store; or an encrypted store is opened without the ``encrypt`` extra."""

    category = "keyring"


class InvalidURL(CkptfsError, ValueError):
    """A store URL that no backend can open (unknown protocol, missing fsspec plugin, bad form)."""

    category = "url"


class StorageError(CkptfsError, OSError):
    """The storage backend failed (permissions, credentials, network); the store is unchanged."""

    category = "storage"


class CapabilityError(StorageError):
    """The backend cannot do what was asked (for example a write to a read-only store)."""


class MissingReference(CkptfsError):
    """One or more external references of a snapshot could not be verified on restore."""

    category = "missing-reference"

    def __init__(self, problems: list[tuple[str, str]], advice: str | None = None) -> None:
        self.problems = problems
        lines = "; ".join(f"{name}: {why}" for name, why in problems)
        super().__init__(
            f"{len(problems)} reference(s) cannot be restored: {lines}. " + (advice or
            "Restore the referenced data, or resume with lenient_refs=True to get them marked "
            "missing.")
        )


class ReferenceChanged(MissingReference):
    """A reference's data, read through ``Ref.open``/``Ref.read``, is not what was recorded."""

    def __init__(self, uri: str, why: str) -> None:
        self.problems = [(uri, why)]
        CkptfsError.__init__(
            self, f"reference {uri} {why}: the data it names is not the data recorded with "
            "the snapshot. Restore the original data, or record a new Ref.of(...) of it.")


class BoundaryError(CkptfsError):
    """A checkpoint was requested where the run is not at a boundary (e.g. inside an effect)."""

    category = "boundary"


class EffectError(CkptfsError):
    """Base for effect-ledger errors."""

    category = "effect"


def _effect(record: Any) -> str:
    """How a message names an effect: ``effect 'charge-1' (pay)`` (its key and name)."""
    return f"effect {getattr(record, 'key', '?')!r} ({getattr(record, 'name', '?')})"


class EffectInDoubt(EffectError):
    """An effect's intent was recorded but its outcome was not: it may or may not have happened."""

    category = "in-doubt"

    def __init__(self, record: Any, message: str | None = None) -> None:
        self.record = record
        super().__init__(
            message
            or (
                f"{_effect(record)} was issued but its result was never recorded; it may "
                "have happened. Pass reconcile= to ask the outside world by idempotency key, or "
                "settle it with run.settle_effect()."
            )
        )


class EffectFailed(EffectError):
    """The effect with this key was recorded as failed; it is not retried under the same key."""

    category = "effect-failed"

    def __init__(self, record: Any) -> None:
        self.record = record
        err = getattr(record, "error", None) or {}
        super().__init__(
            f"{_effect(record)} failed earlier with {err.get('type', '?')}: "
            f"{err.get('message', '')}; the failure is "
            "recorded and replayed. Use a new key to try again.")


class EffectInProgress(EffectError):
    """Another process issued this effect under a lease that has not run out: its call may be
    under way, so this process neither reconciles nor re-issues it (spec/ledger.md "Leases").
    An owner that provably no longer runs (killed on this host) holds no lease: it is taken
    over at once, so this is raised only for one that runs or cannot be proven gone."""

    category = "in-progress"

    #: what a program can do (``advice=``: the command line says what an operator can)
    API_ADVICE = ("Do not repeat it: stop this process (the owner records the outcome), call "
                  "again with wait=True to wait for the outcome or the deadline, or resume "
                  "after the deadline, when reconcile= or run.settle_effect() decide.")

    def __init__(self, record: Any, now: int, *, advice: str | None = None) -> None:
        self.record = record
        self.owner = getattr(record, "owner", None)
        self.deadline = getattr(record, "deadline", None)
        left = max(0, (self.deadline or now) - now) / 1000
        until = utc_time(self.deadline) if self.deadline is not None else "its deadline"
        super().__init__(
            f"{_effect(record)} is in progress: owner {self.owner!r} issued it at attempt "
            f"{getattr(record, 'issued_by', '?')} and may be running it until {until} "
            f"({left:.1f} s from now); a process killed on this host would not hold it, so "
            f"that one runs, or runs elsewhere. {advice or self.API_ADVICE}")


def utc_time(ms: int) -> str:
    """A time in ms since the epoch, for messages: ``2026-12-04 18:05:03 UTC``."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))


class EffectSuperseded(EffectError):
    """This process's call of an effect returned, but its outcome cannot be recorded: after
    the lease ran out another process re-issued or settled the effect (spec "Leases")."""

    category = "effect-superseded"

    def __init__(self, record: Any, *, result: Any = None, error: BaseException | None = None,
                 why: str) -> None:
        self.record = record
        self.result = result
        self.error = error
        outcome = "returned" if error is None else f"raised {type(error).__name__}"
        super().__init__(
            f"{_effect(record)}: this call {outcome} after {why}, so its outcome was NOT "
            "recorded (recording it would contradict the ledger). The outside world may have "
            "seen the effect more than once: check it by idempotency key. The outcome is in "
            ".result / .error; use a longer timeout= for calls this slow.")


class ApprovalPending(EffectError):
    """The run waits for a human decision; the request is recorded and checkpointed."""

    category = "approval-pending"

    def __init__(self, record: Any) -> None:
        self.record = record
        super().__init__(
            f"approval {getattr(record, 'key', '?')!r} is pending: the request is recorded at "
            "boundary 'approval'. Stop here; once someone calls run.approve() or run.reject() "
            "on the resumed run, resume again and the decision is returned.")


class EffectMismatch(EffectError, ValueError):
    """The same idempotency key was reused with a different effect name or arguments."""

    category = "effect-mismatch"


class SchemaError(CkptfsError):
    """State schema trouble: a snapshot newer than the code, a gap in the migration chain."""

    category = "schema"


class MigrationError(SchemaError):
    """A migration step raised; the message names the snapshot and the step."""


class Busy(CkptfsError):
    """Another maintenance operation (forget, gc, erase) holds the store's lease."""

    category = "busy"


# -- the object-store commit path (issue 13) ---------------------------------------------------
class OutcomeUnknown(StorageError):
    """A create-only write (a commit) failed without a definitive answer and its object could not
    be read back: the commit may or may not have happened."""


# -- issue 18: arguments a caller gets wrong (not a store's fault) ------------------------------
class InvalidArgument(CkptfsError, ValueError, TypeError):
    """An argument of the wrong type or an implausible value (e.g. an expiry in epoch
    milliseconds where seconds are expected). Also a ValueError and a TypeError, which is
    what such arguments raised before; the base category (spec/format.md 13)."""

    category = "error"


# -- typed values (issue 17, spec/format.md 18) ------------------------------------------------
class UnregisteredType(CkptfsError, TypeError):
    """A value to checkpoint is of a type no codec is registered for (nothing was written)."""

    category = "unregistered-type"


class TypedValueError(FormatError):
    """A stored typed value (tag 27) that its registered codec cannot read back: a payload of
    the wrong shape, or a codec's decoder refusing it."""

    category = "typed-value"


class UnknownType(TypedValueError):
    """A stored typed value names a type the reading application has not registered."""

    category = "unknown-type"


class AppendError(CkptfsError, TypeError):
    """``Run.append`` names an entry that the run's state lacks or that is not a list."""

    category = "append"


class StateMismatch(CkptfsError):
    """``Run.audit`` found a committed entry that no longer equals what the caller holds: a
    change made in place that an O(change) commit could not see."""

    category = "state-mismatch"


class RestoreRefused(CkptfsError):
    """``ckptfs restore``: the target is not a folder it may write into (a file, a link, or a
    folder that is not empty, without ``--force``)."""

    category = "restore"
