"""Deliberately broken readers for the reader vectors of ckptfs_conformance/gen_spec32c.py
(issue 32, ``spec32c``; ``--break c32-...`` of ckptfs's adapter): each reads one point of
format.md, ledger.md or migrations.md the other way, and fails exactly its vectors
(tests/test_spec32c.py)."""

from __future__ import annotations

from typing import Any

SPEC32C_BREAKS: tuple[str, ...] = tuple("c32-" + r for r in (
    "encoding-optional", "closed-ledger-records", "schema-version-is-format"))

#: the keys of a ledger record (spec/ledger.md 1)
_RECORD_KEYS = frozenset({"key", "kind", "name", "args", "status", "at", "attempt", "result",
                          "result_content", "error", "request", "via", "owner", "deadline"})


def apply(rule: str) -> None:
    """Flip one rule in this process."""
    from ckptfs.errors import FormatError, UnsupportedVersion
    from ckptfs.format import ledger, models

    if rule == "c32-encoding-optional":  # a value entry without encoding is read as cbor
        entry = models.entry_from_cbor

        def lenient(name: str, m: Any) -> Any:
            if isinstance(m, dict) and m.get("kind") == "value" and "encoding" not in m:
                m = {**m, "encoding": "cbor"}
            return entry(name, m)
        setattr(models, "entry_from_cbor", lenient)
    elif rule == "c32-closed-ledger-records":  # unknown record keys refused
        record = ledger.Record.from_cbor

        def closed(m: Any, *, what: str = "ledger record") -> Any:
            if isinstance(m, dict) and set(m) - _RECORD_KEYS:
                raise FormatError(f"{what}: unknown keys {sorted(set(m) - _RECORD_KEYS)}")
            return record(m, what=what)
        setattr(ledger.Record, "from_cbor", staticmethod(closed))
    elif rule == "c32-schema-version-is-format":  # the schema version taken for the format's
        manifest = models.Manifest.from_cbor

        def mixed(m: Any, *, what: str = "manifest") -> Any:
            out = manifest(m, what=what)
            if out.schema.version not in (1, 2):
                raise UnsupportedVersion(f"{what}: version {out.schema.version}")
            return out
        setattr(models.Manifest, "from_cbor", staticmethod(mixed))
    else:
        raise ValueError(rule)
