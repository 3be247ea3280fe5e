"""The error classes keep their categories, bases and message openings while their code is
shared (issue 31 item 6): a subclass inherits its base's category instead of restating it,
and every effect error names its effect through one helper."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest

from ckptfs import errors as E

#: every class's category, as spec/format.md section 13 and the conformance suite use them
CATEGORIES = {
    "AppendError": "append", "ApprovalPending": "approval-pending", "BoundaryError": "boundary",
    "Busy": "busy", "CapabilityError": "storage", "CkptfsError": "error",
    "ConflictError": "conflict", "CorruptObject": "corrupt", "CorruptSnapshot": "corrupt",
    "EffectError": "effect", "EffectFailed": "effect-failed", "EffectInDoubt": "in-doubt",
    "EffectInProgress": "in-progress", "EffectMismatch": "effect-mismatch",
    "EffectSuperseded": "effect-superseded", "ErasedError": "erased", "ExpiredError": "expired",
    "FormatError": "corrupt", "InvalidArgument": "error", "InvalidName": "path",
    "InvalidURL": "url", "KeyringError": "keyring", "MigrationError": "schema", "MissingObject": "missing",
    "MissingReference": "missing-reference", "NonCanonical": "non-canonical",
    "NotAStore": "not-found", "NotFound": "not-found", "OutcomeUnknown": "storage",
    "ReferenceChanged": "missing-reference", "RestoreRefused": "restore", "SchemaError": "schema",
    "SessionConflict": "conflict", "StateMismatch": "state-mismatch", "StorageError": "storage",
    "TypedValueError": "typed-value", "UnknownType": "unknown-type",
    "UnregisteredType": "unregistered-type", "UnsupportedFeature": "unsupported-feature",
    "UnsupportedVersion": "unsupported-version", "UpgradeRequired": "unsupported-version",
}


def test_categories_are_unchanged() -> None:
    got = {n: c.category for n, c in inspect.getmembers(E, inspect.isclass)
           if issubclass(c, E.CkptfsError)}
    assert got == CATEGORIES


@pytest.mark.parametrize("cls,base", [
    (E.CorruptObject, E.FormatError), (E.CorruptSnapshot, E.CorruptObject),
    (E.NotAStore, E.NotFound), (E.SessionConflict, E.ConflictError),
    (E.CapabilityError, E.StorageError), (E.MigrationError, E.SchemaError),
    (E.OutcomeUnknown, E.StorageError)])
def test_inherited_category_keeps_bases(cls: type, base: type) -> None:
    assert cls.__bases__ == (base,)


def test_effect_errors_name_the_effect_alike() -> None:
    r = SimpleNamespace(key="charge-1", name="pay", error={"type": "X", "message": "m"},
                        owner="o", deadline=5000, issued_by=2)
    for err, rest in [(E.EffectInDoubt(r), " was issued but"),
                      (E.EffectFailed(r), " failed earlier"),
                      (E.EffectInProgress(r, 1000), " is in progress: owner 'o'"),
                      (E.EffectSuperseded(r, why="w"), ": this call returned after w")]:
        assert str(err).startswith("effect 'charge-1' (pay)" + rest), str(err)
        assert err.record is r
    assert str(E.EffectInDoubt(object())).startswith("effect '?' (?) was issued")
