"""Issue 32, gaps 24-26 (ckptfs_conformance/gen_spec32b.py): each broken reader of
``SPEC32B_BREAKS`` fails exactly its vectors, and ckptfs passes them."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from ckptfs_conformance import runner

ADAPTER = f"{shlex.quote(sys.executable)} -m ckptfs_conformance.adapters.ckptfs_adapter"

TYPED = "typed/*,store-valid/v2-typed*,store-valid/v2-ledger-typed*"
#: rule -> (the vectors it runs over, the ones it must fail)
BREAKS: dict[str, tuple[str, set[str]]] = {
    # spec/v2.md 6, One outcome: a reader that serves a chunk from a place another record named
    "v2-remembered-places": ("*/v2-*", {"store-invalid/v2-stale-locator-after-carrier",
                                        "store-invalid/v2-hole-after-carrier"}),
    # format.md 18.3 (gap 25): a decoder of built-in types that skips one settled rule
    "typed-paths-as-given": (TYPED, {f"typed/spec32-{k}" for k in (
        "path-empty", "path-not-canonical", "path-three-slashes", "windows-path-slashes")}),
    "typed-offset-unchecked": (TYPED, {"typed/spec32-datetime-offset-not-zone"}),
    "typed-set-nan-twice": (TYPED, {"typed/spec32-set-two-nans"}),
    "typed-refuse-set-order": (TYPED, {"typed/spec32-set-other-order"}),
    # spec/encryption.md: a writer that ignores the keyring, a reader that ignores the version
    "enc-writer-plaintext": ("encryption/*", {"encryption/write-scopes"}),
    "enc-accept-version-1": ("encryption/*", {"encryption/store-version-1"}),
    # spec/encryption.md 5.1: a writer of layout 1, a reader of layout 1 only, a whole-object
    # reader that does not require the final flag, a range reader that opens whole objects
    "enc-writer-layout-1": ("encryption/*", {"encryption/write-scopes"}),
    "enc-open-layout-1-only": ("encryption/*", {
        "encryption/write-scopes", "encryption/store-layout-2", "encryption/store-mixed-layouts",
        "encryption/store-rotated",  # its run started after the rotation is sealed in layout 2
        *(f"encryption/open2{k}" for k in ("", "-full-final", "-segments")),
        *(f"encryption/range2-{k}" for k in ("across", "beside-flipped", "final-dropped",
                                             "full-final", "inside", "past-end"))}),
    "enc-whole-no-final": ("encryption/*", {"encryption/open2-drop-last"}),
    "enc-range-whole": ("encryption/*", {"encryption/range2-beside-flipped",
                                         "encryption/range2-final-dropped"}),
}


def test_every_rule_is_tested() -> None:
    from ckptfs_conformance.adapters.spec32b_breaks import SPEC32B_BREAKS

    assert set(SPEC32B_BREAKS) == set(BREAKS)


@pytest.mark.parametrize("rule", sorted(BREAKS))
def test_broken_reader_fails_exactly_its_vectors(rule: str) -> None:
    only, must_fail = BREAKS[rule]
    good = {r.id: r.status for r in runner.run(ADAPTER, batch=True, only=only)}
    assert set(good.values()) == {runner.PASS}, good
    st = {r.id: r.status for r in runner.run(f"{ADAPTER} --break {rule}", batch=True, only=only)}
    assert runner.ERROR not in st.values()
    assert {i for i, s in st.items() if s == runner.FAIL} == must_fail


def test_encryption_rules_catch_a_plaintext_store(tmp_path: Path) -> None:
    """The enc-write rules are not vacuous: the same case written into a plaintext store breaks
    config-encrypted and observer-learns-nothing (names and content in paths and bytes)."""
    from ckptfs_conformance.adapters.case_writer import write_case
    from ckptfs_conformance.enc_rules import RULES
    from ckptfs_conformance.gen_enc_vectors import writer_case
    from ckptfs_conformance.generate import NOW
    from ckptfs_conformance.render import canonical_json, render_store

    case = writer_case()
    for step in case["steps"]:
        step.pop("subject", None)
    (tmp_path / "case.json").write_text(canonical_json(case))
    assert write_case(str(tmp_path / "case.json"), str(tmp_path / "store")) == "ok"
    raw = render_store(str(tmp_path / "store"), NOW)
    store, ring = tmp_path / "store", tmp_path / "keyring"
    assert RULES["config-encrypted"](store, ring, case, raw)
    leaks = RULES["observer-learns-nothing"](store, ring, case, raw)
    assert any("runs/alice-chat-7" in x for x in leaks), leaks
