"""The effect ledger: append-only records of side effects and approvals, and their fold.

A run's ledger is a sequence of records, never edited: issuing an effect appends an
``intended`` record, settling it appends a ``completed`` or ``failed`` record with the same key
(spec "Effect ledger"). Readers fold the records per key into one ``Effect``; a record that
breaks the transition rules makes the whole ledger corrupt. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

import attrs

from ckptfs.errors import FormatError
from ckptfs.format import cbor
from ckptfs.format.digest import Digest
from ckptfs.format.models import Captured, ChunkRef, entry_from_cbor

Status = Literal["intended", "completed", "failed"]
Kind = Literal["effect", "approval"]
Via = Literal["call", "reconcile", "manual"]
STATUSES: tuple[str, ...] = ("intended", "completed", "failed")
KINDS: tuple[str, ...] = ("effect", "approval")
VIAS: tuple[str, ...] = ("call", "reconcile", "manual")
MAX_KEY = 256
MAX_NAME = 256
MAX_ERROR_TEXT = 4096
#: the most characters an intent's ``owner`` may have
MAX_OWNER = 256
#: a result whose canonical CBOR is larger than this is stored as chunks (``result_content``)
INLINE_RESULT_MAX = 64 * 1024


def args_digest(args: Iterable[Any], kwargs: Mapping[str, Any]) -> Digest:
    """BLAKE3 of the canonical CBOR of ``[args, kwargs]``: what a reused key must match."""
    value = [list(args), dict(kwargs)]
    cbor.check_plain(value, what="effect arguments")
    return Digest.of(cbor.encode(value))


@attrs.frozen(slots=True)
class Record:
    """One ledger record, as written: never changed once appended."""

    key: str
    kind: Kind
    name: str
    args: Digest
    status: Status
    at: int
    attempt: int
    result: Any = None
    result_content: Captured | None = None
    error: Mapping[str, str] | None = None
    request: Any = None
    via: Via | None = None
    #: the lease of an effect's ``intended`` record (spec "Leases"): who issued the call, and
    #: until when (ms) it may be running; both None in records written before leases existed
    owner: str | None = None
    deadline: int | None = None

    def to_cbor(self) -> dict[str, Any]:
        m: dict[str, Any] = {"key": self.key, "kind": self.kind, "name": self.name,
                             "args": self.args.raw, "status": self.status, "at": self.at,
                             "attempt": self.attempt}
        if self.status == "completed":
            if self.result_content is not None:
                m["result_content"] = self.result_content.to_cbor()
            else:
                m["result"] = self.result
        if self.error is not None:
            m["error"] = dict(self.error)
        if self.request is not None:
            m["request"] = self.request
        if self.via is not None:
            m["via"] = self.via
        if self.owner is not None:
            m["owner"] = self.owner
        if self.deadline is not None:
            m["deadline"] = self.deadline
        return m

    @classmethod
    def from_cbor(cls, m: Any, *, what: str = "ledger record") -> Record:
        if not isinstance(m, dict):
            raise FormatError(f"{what}: must be a CBOR map")
        key = _text(m, "key", what, MAX_KEY)
        what = f"{what} {key!r}"
        kind = _choice(m, "kind", KINDS, what)
        status = _choice(m, "status", STATUSES, what)
        args = m.get("args")
        if type(args) is not bytes or len(args) != 32:
            raise FormatError(f"{what}: 'args' must be a 32-byte BLAKE3 digest")
        at, attempt = _uint(m, "at", what), _uint(m, "attempt", what)
        if attempt < 1:
            raise FormatError(f"{what}: attempt starts at 1")
        result_content = None
        if "result_content" in m:
            content = entry_from_cbor("result_content", m["result_content"])
            if not isinstance(content, Captured) or content.kind != "value":
                raise FormatError(f"{what}: result_content must be a value entry")
            result_content = content
        if status != "completed" and ("result" in m or result_content is not None):
            raise FormatError(f"{what}: only a completed record carries a result")
        if "result" in m and result_content is not None:
            raise FormatError(f"{what}: 'result' and 'result_content' are exclusive")
        error = m.get("error")
        if status == "failed":
            if not (isinstance(error, dict) and set(error) == {"type", "message"}
                    and all(type(v) is str and len(v) <= MAX_ERROR_TEXT for v in error.values())):
                raise FormatError(f"{what}: a failed record needs error {{type, message}} (text)")
        elif error is not None:
            raise FormatError(f"{what}: only a failed record carries an error")
        via = m.get("via")
        if via is not None and via not in VIAS:
            raise FormatError(f"{what}: 'via' must be one of {', '.join(VIAS)}")
        if via is not None and status == "intended":
            raise FormatError(f"{what}: an intended record has no 'via'")
        check_record_fields(m, kind, status, what)
        owner, deadline = _lease(m, what, kind=kind, status=status, at=at)
        return cls(key=key, kind=kind, name=_text(m, "name", what, MAX_NAME), args=Digest(args),
                   status=status, at=at, attempt=attempt, result=m.get("result"),
                   result_content=result_content, error=error, request=m.get("request"),
                   via=via, owner=owner, deadline=deadline)


def check_record_fields(m: Mapping[str, Any], kind: str, status: str, what: str) -> None:
    """Fields a record MUST carry or MUST NOT (ledger.md 1, issue 16): a completed record has
    ``result`` or ``result_content``, a settling record ``via``, and only approvals a
    ``request``."""
    if status == "completed" and "result" not in m and "result_content" not in m:
        raise FormatError(f"{what}: a completed record carries 'result' or 'result_content'")
    if status != "intended" and m.get("via") is None:
        raise FormatError(f"{what}: a {status} record says how it became known ('via')")
    if "request" in m and kind != "approval":
        raise FormatError(f"{what}: only an approval record carries a 'request'")


def _lease(m: Mapping[str, Any], what: str, *, kind: str, status: str, at: int
           ) -> tuple[str | None, int | None]:
    """A record's ``owner`` and ``deadline``: both or neither, only on an effect's intent, and
    the deadline not before the record's ``at``."""
    if "owner" not in m and "deadline" not in m:
        return None, None
    if (kind, status) != ("effect", "intended"):
        raise FormatError(f"{what}: only an effect's intended record carries 'owner' and "
                          "'deadline' (its lease)")
    if "owner" not in m or "deadline" not in m:
        raise FormatError(f"{what}: a lease needs both 'owner' and 'deadline'")
    owner, deadline = _text(m, "owner", what, MAX_OWNER), _uint(m, "deadline", what)
    if deadline < at:
        raise FormatError(f"{what}: 'deadline' {deadline} is before the record's 'at' {at}")
    return owner, deadline


@attrs.frozen(slots=True)
class Effect:
    """The folded view of one key: where the effect stands now, and who did what when."""

    key: str
    kind: Kind
    name: str
    args: Digest
    status: Status
    intended_at: int
    issued_by: int
    issues: int = 1
    settled_at: int | None = None
    settled_by: int | None = None
    via: Via | None = None
    result: Any = None
    result_content: Captured | None = None
    error: Mapping[str, str] | None = None
    request: Any = None
    #: the lease of the last ``intended`` record (None when it had none: a v1 record)
    owner: str | None = None
    deadline: int | None = None

    @property
    def in_doubt(self) -> bool:
        """Issued, outcome unknown (an effect; a pending approval is merely waiting). Whether
        the call may still be under way is ``running(now)``."""
        return self.status == "intended" and self.kind == "effect"

    def running(self, now: int) -> bool:
        """Issued under a lease that has not run out at ``now`` (ms): the call may be under
        way, so no other process may reconcile or re-issue it yet (spec "Leases")."""
        return self.in_doubt and self.deadline is not None and now < self.deadline

    @property
    def pending(self) -> bool:
        """An approval request not decided yet."""
        return self.status == "intended" and self.kind == "approval"

    def to_json(self) -> dict[str, Any]:
        """A JSON-friendly summary (for the CLI)."""
        out: dict[str, Any] = {k: v for k, v in attrs.asdict(self, recurse=False).items()
                               if k not in ("args", "result_content")}
        out["args"] = self.args.text
        if self.result_content is not None:
            out["result_content"] = self.result_content.digest.text
        if self.error is not None:
            out["error"] = dict(self.error)
        return out


def fold(effect: Effect | None, r: Record, *, what: str = "ledger") -> Effect:
    """The effect after record ``r``; FormatError if ``r`` breaks the transition rules:
    the first record of a key is ``intended``; ``completed``/``failed`` are final; an
    ``intended`` record may follow an ``intended`` one (a re-issue after reconciliation found
    it not done); kind, name and args never change for a key."""
    where = f"{what}: record for key {r.key!r}"
    if effect is None:
        if r.status != "intended":
            raise FormatError(f"{where} settles an effect that was never intended")
        return Effect(key=r.key, kind=r.kind, name=r.name, args=r.args, status="intended",
                      intended_at=r.at, issued_by=r.attempt, request=r.request, owner=r.owner,
                      deadline=r.deadline)
    if (r.kind, r.name, r.args) != (effect.kind, effect.name, effect.args):
        raise FormatError(f"{where} changes the kind, name or arguments of its effect")
    if effect.status != "intended":
        raise FormatError(f"{where} follows a {effect.status} record, which is final")
    if r.status == "intended":
        return attrs.evolve(effect, intended_at=r.at, issued_by=r.attempt,
                            issues=effect.issues + 1, owner=r.owner, deadline=r.deadline)
    return attrs.evolve(effect, status=r.status, settled_at=r.at, settled_by=r.attempt,
                        via=r.via, result=r.result, result_content=r.result_content,
                        error=r.error)


@attrs.frozen
class Ledger:
    """A run's records in order, their fold by key, and their plain CBOR items (in the
    canonical key order a reader decodes them in, so re-encoding after a resume is an append).
    Appending returns a new Ledger."""

    records: tuple[Record, ...] = ()
    effects: Mapping[str, Effect] = attrs.field(factory=dict)
    items: tuple[Any, ...] = ()

    @classmethod
    def from_cbor(cls, items: list[Any], *, what: str = "ledger") -> Ledger:
        """Validate and fold decoded records (the ledger content, in order)."""
        out = cls()
        for i, m in enumerate(items):
            out = out.append(Record.from_cbor(m, what=f"{what} record {i}"), what=what, item=m)
        return out

    def append(self, r: Record, *, what: str = "ledger", item: Any = None) -> Ledger:
        """The ledger with ``r`` added; FormatError if it breaks the rules of ``fold``."""
        effects = dict(self.effects)
        effects[r.key] = fold(effects.get(r.key), r, what=what)
        if item is None:
            item = cbor.decode(cbor.encode(r.to_cbor()), what=what, allow_bignum=True)
        return Ledger(self.records + (r,), effects, self.items + (item,))

    def get(self, key: str) -> Effect | None:
        return self.effects.get(key)

    def to_cbor(self) -> list[Any]:
        return list(self.items)

    def __len__(self) -> int:
        return len(self.records)


@attrs.frozen(slots=True)
class LedgerRef:
    """The manifest's ``ledger`` field: the record count, and the ledger content (the CBOR
    sequence of its records) held exactly like a ``cbor-seq`` value entry: chunks, or inline."""

    count: int
    size: int
    digest: Digest
    chunks: tuple[ChunkRef, ...] = ()
    inline: bytes | None = None

    @classmethod
    def of(cls, count: int, entry: Captured) -> LedgerRef:
        return cls(count, entry.size, entry.digest, entry.chunks, entry.inline)

    def to_cbor(self) -> dict[str, Any]:
        m: dict[str, Any] = {"count": self.count}
        content = self.as_entry().to_cbor()
        for k in ("size", "digest", "chunks", "inline"):
            if k in content:
                m[k] = content[k]
        return m

    def as_entry(self) -> Captured:
        """The ledger content described as the ``cbor-seq`` value entry it is read like."""
        return Captured(kind="value", type="application/cbor-seq", size=self.size,
                        digest=self.digest, chunks=self.chunks, encoding="cbor-seq",
                        inline=self.inline)

    @classmethod
    def from_cbor(cls, m: Any, *, what: str = "manifest ledger") -> LedgerRef:
        """Validate the map; its content rules are those of a value entry."""
        if not isinstance(m, dict) or not ({"count", "size", "digest"} <= set(m) <= {
                "count", "size", "digest", "chunks", "inline"}):
            raise FormatError(f"{what}: must be a map of count, size, digest and chunks or inline")
        count = _uint(m, "count", what)
        fields = {k: v for k, v in m.items() if k != "count"}
        fields.update(kind="value", type="application/cbor-seq", encoding="cbor-seq")
        try:
            entry = entry_from_cbor("ledger", fields)
        except FormatError as e:
            raise FormatError(f"{what}: {e}") from e
        assert isinstance(entry, Captured)
        if count < 1 or entry.size < count:
            raise FormatError(f"{what}: count {count} does not fit size {entry.size}; "
                              "an empty ledger is written as null")
        return cls.of(count, entry)


def _text(m: Mapping[str, Any], key: str, what: str, limit: int) -> str:
    v = m.get(key)
    if type(v) is not str or not (1 <= len(v) <= limit):
        raise FormatError(f"{what}: {key!r} must be text of 1..{limit} characters")
    return v


def _uint(m: Mapping[str, Any], key: str, what: str) -> int:
    v = m.get(key)
    if type(v) is not int or not (0 <= v < 1 << 64):
        raise FormatError(f"{what}: {key!r} must be an unsigned integer")
    return v


def _choice(m: Mapping[str, Any], key: str, choices: tuple[str, ...], what: str) -> Any:
    v = m.get(key)
    if v not in choices or type(v) is not str:
        raise FormatError(f"{what}: {key!r} must be one of {', '.join(choices)}, not {v!r:.40}")
    return v
