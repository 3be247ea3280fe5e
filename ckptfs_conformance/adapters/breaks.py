"""The ``--break RULE`` catalogue of the reference adapter: deliberately broken readers and
writers the suite must catch (tests/test_conformance.py runs each against its vectors).

This module holds the list of every rule (``BREAKS``), the dispatcher ``apply_break`` and the
first reader rules: ``accept-non-canonical``, ``skip-digests``, ``ignore-required``,
``ignore-retired`` (serve records in retired ranges), ``ignore-tombstones`` (as if nothing had
been erased), ``ignore-expiry-overrides`` (only the manifest's ``expires`` counts),
``ignore-lease-deadline`` (an effect intent's lease never runs: every intent is in doubt at
once, as in v1). The other groups live beside it: ``v2-*`` rules of spec/v2.md's layout
(``breaks_v2``), the issue-16 rules (``breaks_spec16``), the issue-32 readers
(``spec32_breaks``) and writers (``spec32_writer``).
"""

from __future__ import annotations

from typing import Any

from ckptfs.format import cbor, models
from ckptfs.format.digest import Digest
from ckptfs.store import heads, repository
from ckptfs_conformance import render
from ckptfs_conformance.adapters import breaks_spec16, breaks_v2, spec32_breaks, spec32_writer
from ckptfs_conformance.adapters.breaks_spec16 import SPEC16_BREAKS
from ckptfs_conformance.adapters.spec32_breaks import SPEC32_BREAKS
from ckptfs_conformance.adapters.spec32_writer import SPEC32_WRITER_BREAKS
from ckptfs_conformance.adapters.spec32c_breaks import SPEC32C_BREAKS
from ckptfs_conformance.adapters.spec32b_breaks import SPEC32B_BREAKS

BREAKS: tuple[str, ...] = (
    "accept-non-canonical", "skip-digests", "ignore-required", "ignore-retired",
    "ignore-tombstones", "ignore-expiry-overrides", "ignore-lease-deadline",
    *("v2-" + r for r in ("trust-head-hint", "skip-header-digest", "lenient-body-table",
                          "no-forwards", "unbounded-forwards", "no-loose-fallback",
                          "no-stray-bodies", "gc-visible-only", "gc-no-forwards",
                          "gc-parse-junk",
                          "lenient-zheader", "no-item-budget")))
#: issue 16: one per rule it settled (skip the check, or read the point the other way)
BREAKS += SPEC16_BREAKS
#: issue 32: one per rule of spec/v2.md its vectors pin (ckptfs_conformance/gen_spec32.py)
BREAKS += SPEC32_BREAKS
#: issue 32: broken version 2 writers, one per rule of spec/v2.md 5.2.1 (writer-rules/* vectors)
BREAKS += SPEC32_WRITER_BREAKS
#: spec32c: readers of the points of format.md, ledger.md and migrations.md gen_spec32c.py pins
BREAKS += SPEC32C_BREAKS
#: issue 32, gaps 24-26 (ckptfs_conformance/gen_spec32b.py)
BREAKS += SPEC32B_BREAKS


def apply_break(rule: str) -> None:
    """Flip one rule of the reader (or writer) in this process, for testing that the suite
    notices; an unknown rule ends the process with the list of known ones."""
    if rule == "accept-non-canonical":
        strict = cbor.decode

        def lenient(data: Any, *, what: str, allow_bignum: bool = False,
                       check_canonical: bool = True, max_items: int | None = None) -> Any:
            return strict(data, what=what, allow_bignum=allow_bignum, check_canonical=False,
                          max_items=max_items)

        cbor.decode = lenient
    elif rule == "skip-digests":
        Digest.__ne__ = lambda self, other: False  # type: ignore[method-assign]
    elif rule == "ignore-required":
        models.check_features = lambda required, what: tuple(required or ())
    elif rule == "ignore-retired":  # every record counts: strays are served
        from ckptfs.store import ids  # lookups by id and prefix (issue 32)

        for module in (repository, heads, ids):  # heads: the head search (s3req14 moved it)
            setattr(module, "read_retired", lambda storage, run_id: None)
    elif rule == "ignore-tombstones":  # nothing was ever erased
        for module in (repository, render):
            setattr(module, "read_tombstone", lambda storage, run_id, seq=None: None)
    elif rule == "ignore-expiry-overrides":  # only the manifest's expires counts
        setattr(render, "effective_expiry", lambda storage, run_id, seq, expires: expires)
    elif rule == "ignore-lease-deadline":  # spec/ledger.md "Leases" not applied
        from ckptfs.format.ledger import Effect

        setattr(Effect, "running", lambda self, now: False)
    elif rule in SPEC32C_BREAKS:
        from ckptfs_conformance.adapters import spec32c_breaks

        spec32c_breaks.apply(rule)
    elif rule in SPEC32B_BREAKS:
        from ckptfs_conformance.adapters import spec32b_breaks

        spec32b_breaks.apply(rule)
    elif rule in SPEC32_WRITER_BREAKS:
        spec32_writer.BROKEN.add(rule)
    elif rule in SPEC32_BREAKS:
        if rule.startswith("v2-"):
            spec32_breaks.apply(rule[3:])
        else:
            spec32_breaks.apply_other(rule)
    elif rule.startswith("v2-"):
        breaks_v2.apply(rule[3:])
    elif rule in SPEC16_BREAKS:
        breaks_spec16.apply(rule)
    else:
        raise SystemExit(f"unknown --break rule {rule!r}; known: {', '.join(BREAKS)}")
