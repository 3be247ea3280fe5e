"""The conformance suite run against ckptfs through its adapter, exactly as an outsider would,
plus checks that the suite itself can fail: broken adapters, bad writers, stale vectors."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ckptfs_conformance import render, runner
from ckptfs_conformance.generate import generate
from ckptfs_conformance.validate import validate_store

ADAPTER = f"{shlex.quote(sys.executable)} -m ckptfs_conformance.adapters.ckptfs_adapter"
REPO = Path(__file__).resolve().parent.parent
VECTORS = runner.VECTORS


def _statuses(results: list[runner.Result]) -> dict[str, str]:
    return {r.id: r.status for r in results}


def test_ckptfs_passes_every_vector() -> None:
    results = runner.run(ADAPTER, batch=True)
    bad = [f"{r.id}: {r.status} {r.message}" for r in results if r.status != runner.PASS]
    assert not bad, "\n".join(bad)
    cats: dict[str, int] = {}
    for r in results:
        cats[r.id.split("/")[0]] = cats.get(r.id.split("/")[0], 0) + 1
    assert len(results) >= 250
    assert set(cats) == {"digest", "cbor", "framing", "chunker", "store-valid", "store-invalid",
                         "lookup", "writer", "typed", "gc", "writer-rules",
                         "maintenance", "encryption"}
    assert min(n for c, n in cats.items() if c not in ("gc", "writer-rules", "maintenance")) >= 8  # gc: ckptfs_conformance/gen_locators.py


def test_cli_single_process_mode_and_junit(tmp_path: Path) -> None:
    """``python -m ckptfs_conformance`` from the repo root, one adapter process per vector."""
    junit = tmp_path / "out.xml"
    p = subprocess.run(
        [sys.executable, "-m", "ckptfs_conformance", "--impl", ADAPTER, "--only", "*-exact",
         "--junit", str(junit)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None
    assert int(suite.get("tests", 0)) >= 5 and suite.get("failures") == "0"
    assert "Pass: " in p.stdout and "Fail: 0" in p.stdout


@pytest.mark.parametrize("rule, must_fail", [
    ("accept-non-canonical", {"store-invalid/manifest-noncanonical",
                              "store-invalid/config-noncanonical",
                              "cbor/reject-key-order-bytewise", "cbor/reject-nonminimal-int-1byte"}),
    ("skip-digests", {"store-invalid/chunk-flipped-byte", "store-invalid/entry-digest-lies",
                      "store-invalid/inline-digest-lies", "store-invalid/manifest-flipped-byte"}),
    ("ignore-required", {"store-invalid/manifest-required-feature",
                         "store-invalid/config-required-feature"}),
])
def test_broken_adapter_fails_the_matching_vectors(rule: str, must_fail: set[str]) -> None:
    results = runner.run(f"{ADAPTER} --break {rule}", batch=True,
                         only="store-*,cbor/reject-*,cbor/decode-*")
    st = _statuses(results)
    failed = {i for i, s in st.items() if s == runner.FAIL}
    assert must_fail <= failed, sorted(must_fail - failed)
    assert runner.ERROR not in st.values()
    # the flip touches nothing else: every other vector still passes
    assert all(s == runner.PASS for i, s in st.items() if i not in failed)
    assert len(failed) < len(st) / 4


LIFECYCLE_BREAKS = {
    "ignore-retired": {
        "store-valid/lifecycle-stray-records", "store-valid/lifecycle-run-forgotten",
        "store-valid/lifecycle-erase-interrupted", "lookup/lifecycle-gaps-at-3",
        "lookup/lifecycle-by-id-gaps", "lookup/lifecycle-old", "lookup/lifecycle-old-at-2",
        "lookup/lifecycle-by-id-old", "lookup/lifecycle-halted", "lookup/lifecycle-halted-at-1",
        "lookup/lifecycle-by-id-halted", "store-invalid/lifecycle-fence-truncated",
        "store-valid/v2-hints", "lookup/v2-hint-forgot",  # a hint at a stray (spec/v2.md 4)
        "store-valid/v2-locator-into-stray",  # the stray r@1 served as a snapshot
        "lookup/v2-by-id-stray", "lookup/v2-by-prefix-stray-not-counted",  # issue 32
        *(f"store-invalid/lifecycle-retired-{k}" for k in (
            "truncated", "through-lies", "other-run", "kept-zero", "noncanonical"))},
    "ignore-tombstones": {
        "store-valid/lifecycle-run-erased", "store-valid/lifecycle-snapshot-erased",
        "store-valid/lifecycle-erase-interrupted", "lookup/lifecycle-gone",
        "store-valid/lifecycle-tombstone-without-fence",
        "lookup/lifecycle-gone-at-1", "lookup/lifecycle-part-at-2", "lookup/lifecycle-halted",
        "lookup/lifecycle-halted-at-1", "lookup/lifecycle-by-id-halted",
        "store-invalid/lifecycle-snapshot-tombstone-truncated",
        *(f"store-invalid/lifecycle-tombstone-{k}" for k in (
            "truncated", "bad-state", "bad-id", "noncanonical"))},
    "ignore-expiry-overrides": {
        "store-valid/lifecycle-expiry-overrides", "store-valid/lifecycle-run-expiry",
        "lookup/lifecycle-exp-at-1", "store-invalid/lifecycle-run-expiry-truncated",
        *(f"store-invalid/lifecycle-expiry-{k}" for k in (
            "truncated", "no-expires", "other-seq", "text"))},
}


@pytest.mark.parametrize("rule", sorted(LIFECYCLE_BREAKS))
def test_lifecycle_broken_adapter_fails_exactly_the_matching_vectors(rule: str) -> None:
    """A reader that skips one retention rule fails exactly the vectors about that rule."""
    st = _statuses(runner.run(f"{ADAPTER} --break {rule}", batch=True,
                              only="store-*,lookup/*,writer/*"))
    assert runner.ERROR not in st.values()
    assert {i for i, s in st.items() if s == runner.FAIL} == LIFECYCLE_BREAKS[rule]


# -- spec/v2.md: a reader that skips one rule of format version 2 fails exactly its vectors ----
V2_BREAKS = {
    "v2-trust-head-hint": {"store-valid/v2-hints", "lookup/v2-hint-ahead", "lookup/v2-hint-forgot",
                           "lookup/v2-hint-other", "lookup/v2-hint-stale"},
    "v2-skip-header-digest": {"store-invalid/v2-record-header-digest",
                              "store-invalid/v2-record-header-flipped",
                              "store-invalid/v2-zheader-digest-stale"},
    "v2-lenient-zheader": {f"store-invalid/v2-zheader-{k}" for k in (
        "bomb", "no-content-size", "not-zstd", "trailing-bytes")},
    "v2-no-item-budget": {"store-invalid/v2-zheader-item-bomb"},
    "v2-lenient-body-table": {f"store-invalid/v2-{k}" for k in (
        "bodies-duplicate-digest", "bodies-gap", "bodies-size-zero", "body-length-lies",
        "bodies-unneeded-size-zero", "bodies-unneeded-stored-one")},
    "v2-no-forwards": {"store-invalid/v2-forward-wrong-bytes", "store-valid/v2-forward-four-hops",
                       "store-valid/v2-forwards"},
    "v2-unbounded-forwards": {"store-invalid/v2-forward-five-hops"},
    "v2-no-loose-fallback": {"store-valid/v2-body-damaged-loose",
                             "store-valid/v2-forward-damaged-loose",
                             "store-valid/v2-stale-locator-loose"},
}


# complete locators (ckptfs_conformance/gen_locators.py, spec/v2.md 3.5, 9.2)
V2_BREAKS.update({
    "v2-no-stray-bodies": {"store-valid/v2-locator-into-stray"},
    "v2-gc-visible-only": {"gc/v2-gc-named-by-locator", "gc/v2-gc-named-through-forward",
                           "gc/v2-gc-named-pack-and-fork", "gc/v2-gc-named-junk-ignored"},
    "v2-gc-no-forwards": {"gc/v2-gc-named-through-forward", "gc/v2-gc-named-junk-ignored"},
    # issue 30: a gc that parses every name it lists under moved/ (a .DS_Store: "not a forward")
    "v2-gc-parse-junk": {"gc/v2-gc-named-junk-ignored"},
})


@pytest.mark.parametrize("rule", sorted(V2_BREAKS))
def test_v2_broken_adapter_fails_exactly_the_matching_vectors(rule: str) -> None:
    """A reader that skips one reader rule of spec/v2.md fails exactly the vectors about it."""
    st = _statuses(runner.run(f"{ADAPTER} --break {rule}", batch=True, only="*/v2-*"))
    assert runner.ERROR not in st.values()
    assert {i for i, s in st.items() if s == runner.FAIL} == V2_BREAKS[rule]


# issue 32 (ckptfs_conformance/gen_spec32.py): a reader that skips one more rule of spec/v2.md,
# or reads a point the spec used to leave open the other way, fails exactly its vectors
SPEC32_BREAKS = {
    "v2-lenient-form": {"store-invalid/v2-record-form-0", "store-invalid/v2-record-form-1"},
    "v2-any-kind": {"store-invalid/v2-record-kind-unknown"},
    "v2-lenient-body-ranges": {f"store-invalid/v2-bodies-{k}" for k in (
        "size-zero", "unneeded-size-zero", "unneeded-stored-one")},
    "v2-lenient-locators": {f"store-invalid/v2-locator-{k}" for k in (
        "index-out-of-range", "unneeded-index-out-of-range", "unneeded-stored-one")},
    "v2-allow-prefix-twice": {"store-invalid/v2-locator-prefix-twice"},
    "v2-lenient-nonce": {f"store-invalid/v2-record-nonce-{k}" for k in ("15", "absent", "text")},
    "v2-skip-manifest-path": {"store-invalid/v2-record-manifest-other-seq"},
    "v2-verify-by-prefix": {"lookup/v2-locator-names-other-body"},
    "v2-forward-good-rows": {"store-invalid/v2-forward-bad-row"},
    "v2-check-pack-header": {"store-valid/v2-pack-header-damaged"},
    "v2-zheader-needs-feature": {"store-valid/v2-zheader-without-feature"},
    "v2-refuse-bad-window": {"store-valid/v2-config-window-out-of-range"},
    "v2-refuse-v2-features-in-v1": {"store-valid/v2-v1-config-with-v2-features"},
    "v2-check-table-size": {"store-valid/v2-bodies-size-differs"},
    "v2-serve-stray-by-id": {"lookup/v2-by-id-stray"},
    "v2-prefix-counts-strays": {"lookup/v2-by-prefix-stray-not-counted"},
    "v2-scan-skips-damage": {"lookup/v2-absent-id-beside-damaged",
                             "lookup/v2-absent-prefix-beside-damaged"},
    "check-record-created": {"store-valid/v2-record-created-differs"},  # issue 16's rule, in v2
    "v2-no-v1-record-limit": {"store-invalid/v2-v1-record-over-64kib"},
    # format.md 2: a missing or non-text hash is corrupt, not an unknown algorithm
    "hash-missing-unsupported": {"store-invalid/config-hash-missing",
                                 "store-invalid/config-hash-not-text"},
}


def test_every_issue32_break_rule_is_tested() -> None:
    from ckptfs_conformance.adapters.spec32_breaks import SPEC32_BREAKS as rules

    assert set(rules) | {"check-record-created"} == set(SPEC32_BREAKS)


@pytest.mark.parametrize("rule", sorted(SPEC32_BREAKS))
def test_issue32_broken_adapter_fails_exactly_its_vectors(rule: str) -> None:
    """Among the version 2 vectors, the broken reader fails exactly the ones of its rule."""
    st = _statuses(runner.run(f"{ADAPTER} --break {rule}", batch=True,
                              only="*/v2-*,store-invalid/config-*"))
    assert runner.ERROR not in st.values()
    assert {i for i, s in st.items() if s == runner.FAIL} == SPEC32_BREAKS[rule]


# issue 32: a version 2 writer that breaks one rule of spec/v2.md 5.2.1 fails exactly its vector
WRITER32_BREAKS = {
    "writer-v2-extra-object": {"writer-rules/one-object-per-commit"},
    "writer-v2-drop-packs": {"writer-rules/packs-complete"},
    "writer-v2-hole": {"writer-rules/complete-locators"},
    # (and writer-rules/existing-config, whose store config must stay as it was)
    "writer-v2-zheader-without-feature": {"writer-rules/features", "writer-rules/existing-config"},
    "writer-v2-no-complete-locators": {"writer-rules/features", "writer-rules/existing-config"},
    "writer-v2-reuse-nonce": {"writer-rules/nonces-unique"},
    "writer-v2-hint-ahead": {"writer-rules/hints-committed"},
    # spec32c: format.md, ledger.md, migrations.md (writer_rules_manifest.py)
    "writer-v2-reserved-name": {"writer-rules/one-object-per-commit"},
    "writer-v2-own-config": {"writer-rules/existing-config"},
    "writer-v2-container-in-v1": {"writer-rules/v1-store"},
    "writer-v2-schema-extra-key": {"writer-rules/schema-and-provenance"},
    "writer-v2-migrated-from": {"writer-rules/schema-and-provenance"},
    "writer-v2-ledger-rewritten": {"writer-rules/ledger-append-only",
                                   "writer-rules/ledger-refusals"},
    "writer-v2-typed-unlisted": {"writer-rules/typed-values-listed"},
    "writer-v2-expiry-in-extension-key": {"writer-rules/extension-keys"},
}


def test_every_issue32_writer_break_is_tested() -> None:
    from ckptfs_conformance.adapters.spec32_writer import SPEC32_WRITER_BREAKS as rules

    assert set(rules) == set(WRITER32_BREAKS)


@pytest.mark.parametrize("rule", sorted(WRITER32_BREAKS))
def test_issue32_broken_writer_fails_exactly_its_vectors(rule: str) -> None:
    """A version 2 writer whose output breaks one rule fails exactly the vector of that rule
    (and the reference writer passes them all: test_ckptfs_passes_every_vector)."""
    st = _statuses(runner.run(f"{ADAPTER} --break {rule}", batch=True, only="writer-rules/*"))
    assert len(st) == len(list(runner.VECTORS.glob("writer-rules/*.json")))
    assert runner.ERROR not in st.values()
    assert {i for i, s in st.items() if s == runner.FAIL} == WRITER32_BREAKS[rule]


def test_v2_vectors_need_the_v2_capability() -> None:
    """A version 1 reader (no ``v2`` claim) skips every v2 vector and no other."""
    claims = set(runner.CAPABILITIES) - {"v2"}
    st = _statuses(runner.run(ADAPTER, batch=True, capabilities=claims, only="*/v2-*,store-*/r*"))
    v2 = {i for i in st if "/v2-" in i}
    assert len(v2) >= 60
    assert {i for i, s in st.items() if s == runner.SKIP} == v2
    assert {s for i, s in st.items() if i not in v2} == {runner.PASS}


def test_reader_without_lifecycle_passes_when_it_does_not_claim_it() -> None:
    """The capability switch is meaningful: a reader that knows nothing of retention (all three
    rules off) skips the lifecycle vectors and passes every other one."""
    breaks = " ".join(f"--break {r}" for r in LIFECYCLE_BREAKS)
    claims = set(runner.CAPABILITIES) - {"lifecycle"}
    st = _statuses(runner.run(f"{ADAPTER} {breaks}", batch=True, capabilities=claims,
                              only="store-*,lookup/*,writer/*"))
    lifecycle = {v["id"] for v in runner.load_vectors() if "lifecycle" in v["requires"]}
    assert lifecycle >= set().union(*LIFECYCLE_BREAKS.values())
    assert {i for i, s in st.items() if s == runner.SKIP} == lifecycle & set(st)
    assert {s for i, s in st.items() if i not in lifecycle} == {runner.PASS}


def test_capabilities_skip_what_is_not_claimed() -> None:
    results = runner.run(ADAPTER, batch=True, capabilities={"digest"})
    st = _statuses(results)
    assert {s for i, s in st.items() if i.startswith("digest/")} == {runner.PASS}
    assert {s for i, s in st.items() if not i.startswith("digest/")} == {runner.SKIP}


def test_adapter_that_breaks_is_error_not_fail(tmp_path: Path) -> None:
    crash = f"{shlex.quote(sys.executable)} -c 'import sys; sys.exit(3)'"
    garbage = f"{shlex.quote(sys.executable)} -c 'print(\"hello\")'"
    assert {r.status for r in runner.run(crash, only="digest/abc")} == {runner.ERROR}
    assert {r.status for r in runner.run(crash, only="digest/abc", batch=True)} == {runner.ERROR}
    # a non-JSON answer where JSON is required is the adapter's fault, not a wrong answer
    assert {r.status for r in runner.run(garbage, only="chunker/empty")} == {runner.ERROR}
    assert {r.status for r in runner.run(garbage, only="digest/abc")} == {runner.FAIL}


def test_writer_vectors_catch_a_wrong_store(tmp_path: Path) -> None:
    """A 'writer' that produces some other valid store fails both checks."""
    other = VECTORS / "writer" / "values.store"
    script = tmp_path / "fake.py"
    script.write_text("import shutil, sys\n"
                      f"shutil.copytree({str(other)!r}, sys.argv[3], dirs_exist_ok=True)\n"
                      "print('ok')\n")
    fake = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"
    st = _statuses(runner.run(fake, only="writer/resume-fork*"))
    assert st == {"writer/resume-fork": runner.FAIL, "writer/resume-fork-exact": runner.FAIL}
    assert _statuses(runner.run(fake, only="writer/values*")) == {
        "writer/values": runner.PASS, "writer/values-exact": runner.PASS}


def test_regenerating_gives_identical_vectors(tmp_path: Path) -> None:
    generate(tmp_path / "v")

    def tree(root: Path) -> dict[str, bytes]:
        return {f.relative_to(root).as_posix(): f.read_bytes()
                for f in sorted(root.rglob("*")) if f.is_file()}

    want, got = tree(VECTORS), tree(tmp_path / "v")
    assert sorted(want) == sorted(got), "vectors are stale: run python -m ckptfs_conformance.generate"
    stale = [k for k in want if want[k] != got[k]]
    assert not stale, f"vectors are stale ({stale[:5]}): run python -m ckptfs_conformance.generate"


def test_every_manifest_in_every_vector_matches_the_cddl() -> None:
    checked = 0
    for v in runner.load_vectors():
        stores = [v.get("store"), v["expect"].get("exact") if "store" in v["expect"] else None]
        for s in filter(None, stores):
            skip = frozenset(v.get("damaged", ())) | frozenset(v.get("beyond_cddl", ()))
            assert not validate_store(Path(v["_dir"]) / s, skip), v["id"]
            checked += 1
    assert checked >= 70
    # and the check can fail: the damaged manifests of invalid vectors do not all validate
    v = json.loads((VECTORS / "store-invalid" / "manifest-format-2.json").read_text())
    assert validate_store(VECTORS / "store-invalid" / v["store"])


def test_cddl_in_vectors_is_the_spec() -> None:
    assert (VECTORS / "ckptfs.cddl").read_bytes() == (REPO / "spec" / "ckptfs.cddl").read_bytes()


def test_readmes_state_the_vector_counts() -> None:
    """The counts in ckptfs_conformance/README.md are those of vectors/ (README.md and the docs
    link to it instead of repeating them)."""
    import re

    vectors = runner.load_vectors()
    cats: dict[str, int] = {}
    for v in vectors:
        cats[v["category"]] = cats.get(v["category"], 0) + 1
    text = " ".join((REPO / "ckptfs_conformance" / "README.md").read_text().split())
    assert f"There are {len(vectors)} vectors:" in text
    for cat, n in cats.items():
        assert re.search(rf"`{cat}` {n}\b", text), cat
    for cap in ("lifecycle", "ledger"):
        n = sum(cap in v["requires"] for v in vectors)
        assert re.search(rf"\b{n} (of them need )?the `{cap}` capability", text), cap


def test_writer_cases_write_version_2_stores() -> None:
    """The writer vectors are format 2 stores (README "Writer cases"), the only version
    ckptfs writes: the exact ones hold run records and packs, no loose object."""
    st = _statuses(runner.run(ADAPTER, batch=True, only="writer/values*"))
    assert st == {"writer/values": runner.PASS, "writer/values-exact": runner.PASS}
    stores = sorted((VECTORS / "writer").glob("*.store"))
    assert len(stores) >= 9
    for store in stores:
        assert not (store / "chunks").exists() and not (store / "snapshots").exists(), store
        assert _config_version(store) == 2, store


def _config_version(store: Path) -> int:
    from ckptfs.format.models import StoreConfig

    return StoreConfig.from_bytes((store / "ckptfs.cbor").read_bytes()).version


def test_frozen_vectors_are_unchanged() -> None:
    """The format version 1 vectors (and those of the primitives) are frozen data: the
    generator leaves them as they are (ckptfs writes no version 1 store to make them again),
    and every file keeps the digest listed in ckptfs_conformance/frozen_vectors.sha256."""
    import hashlib

    from ckptfs_conformance.generate import frozen

    listed = frozen()
    assert len(listed) > 4000
    changed = [rel for rel, digest in listed.items()
               if not (VECTORS / rel).is_file()
               or hashlib.sha256((VECTORS / rel).read_bytes()).hexdigest() != digest]
    assert not changed, f"frozen vector files changed or missing: {changed[:5]}"


# -- issue 16: one broken-adapter rule per rule it settled (ckptfs_conformance/gen_spec16.py) ----------
_DIGEST_PARSE = {f"digest/parse-{k}" for k in (
    "empty", "leading-space", "no-prefix-colon", "other-algorithm", "short", "trailing-newline",
    "uppercase")}
_NAN = {"cbor/value-nan-double-payload", "cbor/value-nan-negative", "cbor/value-nan-payload",
        "store-valid/value-noncanonical"}
SPEC16_BREAKS = {
    "by-id-skip-record-size": {"lookup/by-id-record-size-lies"},
    "skip-record-path": {"store-invalid/record-in-wrong-run", "store-invalid/record-seq-not-path"},
    "skip-chunk-digest": {"store-invalid/chunk-digest-only-lies"},
    "skip-chunker-order": {"store-invalid/config-chunker-avg-above-max",
                           "store-invalid/config-chunker-min-above-avg"},
    "skip-label-rules": {"store-invalid/entry-label-value-1025", "store-invalid/label-key-129",
                         "store-invalid/label-key-dot", "store-invalid/label-value-1025"},
    "allow-after-zstd-frame": {"framing/zstd-second-frame", "framing/zstd-skippable-after",
                               "framing/zstd-trailing-byte"},
    "check-content-canonical": _NAN | {"cbor/value-noncanonical-float",
                                       "cbor/value-noncanonical-int",
                                       "cbor/value-noncanonical-key-order"},
    "keep-nan-payload": _NAN,
    "seq-names-unbounded": {"store-valid/record-name-over-u64"},
    "digest-text-corrupt": _DIGEST_PARSE | {"lookup/by-id-short", "lookup/by-id-uppercase"},
    "lenient-ledger-fields": {"store-invalid/ledger-completed-without-result",
                              "store-invalid/ledger-request-on-effect",
                              "store-invalid/ledger-settled-without-via"},
    "open-ledger-maps": {"store-invalid/ledger-error-unknown-key",
                         "store-invalid/ledger-ref-unknown-key"},
    "tombstone-hides-run": {"store-valid/lifecycle-tombstone-without-fence"},
    "check-record-created": {"store-valid/record-created-differs"},
    "strict-schema-keys": {"store-valid/schema-extra-keys"},
    "chunker-before-required": {"store-invalid/two-config-required-and-chunker"},
    "expiry-before-required": {"store-invalid/two-manifest-required-and-expired"},
    "folder-is-missing": {"store-invalid/chunk-is-folder", "store-invalid/record-is-folder"},
    "empty-folder-is-run": {"store-valid/empty-folders"},
    "request-of-last-record": {"store-valid/ledger-approval-request"},
}


def test_every_issue16_break_rule_is_tested() -> None:
    from ckptfs_conformance.adapters.ckptfs_adapter import SPEC16_BREAKS as rules

    assert set(rules) == set(SPEC16_BREAKS)


@pytest.mark.parametrize("rule", sorted(SPEC16_BREAKS))
def test_issue16_broken_adapter_fails_exactly_its_vectors(rule: str) -> None:
    """A reader that skips one rule issue 16 settled (or reads it the other way) fails exactly
    the vectors about that rule, among every vector about such a rule. (A full-suite run of
    each rule was checked by hand when they were written: no other vector fails.)"""
    watched = set().union(*SPEC16_BREAKS.values())
    st = _statuses(runner.run(f"{ADAPTER} --break {rule}", batch=True,
                              only=",".join(sorted(watched))))
    assert set(st) == watched
    assert runner.ERROR not in st.values()
    assert {i for i, s in st.items() if s == runner.FAIL} == SPEC16_BREAKS[rule]


def test_reading_any_store_vector_allocates_in_proportion_to_its_bytes() -> None:
    """Every valid and hostile store vector is read whole (``render_store``) with a peak
    allocation (tracemalloc) under 2x the store's bytes plus 4 MiB: a reader that sizes an
    allocation by a limit or by a claim the store makes (a 128 MiB record limit, an 80 MiB
    header length, a zstd frame's declared size) instead of by the bytes there is caught
    here. The RLIMIT_AS cap of tests/test_hostile_stores.py (3 GiB) lets such reads pass.
    A compressed (form 0x03) header within the 80 MiB limit is inflated once to be read, so
    its inflated size counts as bytes of the store (``v2-zheader-item-bomb``: 9 KiB that
    inflate to 4 MiB, all of which a reader must see to count its items)."""
    import tracemalloc

    import zstandard

    from ckptfs.errors import CkptfsError
    from ckptfs.format import containers as ct

    def inflated(f: Path) -> int:
        with open(f, "rb") as fh:
            head = fh.read(ct.PREFIX_LEN + 18)
        if len(head) < ct.PREFIX_LEN + 18 or not ct.is_container(head) \
                or head[len(ct.MAGIC)] != ct.CONTAINER_COMPRESSED:
            return 0
        try:
            declared = zstandard.frame_content_size(head[ct.PREFIX_LEN:])
        except zstandard.ZstdError:
            return 0
        return declared if 0 < declared <= ct.MAX_HEADER_SIZE else 0

    over = []
    stores = sorted((REPO / "ckptfs_conformance" / "vectors").glob("store-*/*.store"))
    assert len(stores) > 200
    for d in stores:
        size = sum(f.stat().st_size + inflated(f) for f in d.rglob("*") if f.is_file())
        tracemalloc.start()
        try:
            render.render_store(str(d), 1_700_000_000_000 + 10 ** 9)
        except CkptfsError:
            pass
        finally:
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
        if peak > 2 * size + (4 << 20):
            over.append((d.name, size, peak))
    assert not over, over
