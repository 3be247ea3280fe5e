"""Which vectors test which requirement of spec/*.md (issue 32): requirement id -> globs over
vector ids. The generator writes the matching ids into each vector's ``requirements``
(ckptfs_conformance/coverage.py); a test checks that every id here is in the spec and that every
glob matches a vector. A requirement with no row here and no ``untestable:`` reason in the spec
is *untested* (``python -m ckptfs_conformance --coverage``)."""

from __future__ import annotations

SI, SV, LK = "store-invalid/v2-", "store-valid/v2-", "lookup/v2-"

REQ_VECTORS: dict[str, tuple[str, ...]] = {
    # -- spec/v2.md --------------------------------------------------------------------------
    "v2.store.accept-versions-reject": ("store-invalid/config-version-3", SV + "upgraded",
                                        SV + "records"),
    "v2.store.depend": (SV + "config-window-out-of-range",),
    "v2.store.refuse-store-because": (SV + "config-window-out-of-range",),
    "v2.store.read-store-version": (SV + "v1-config-with-v2-features",),
    "v2.store.read-such-objects": (SV + "upgraded",),
    "v2.store.ignore-parse-object": ("gc/v2-gc-named-junk-ignored",),
    "v2.framing.reader-decodes-container": tuple(SI + k for k in (
        "record-bad-magic", "record-form-*", "record-hlen-*", "record-header-digest",
        "record-header-flipped", "record-kind-*", "record-torn", "record-appended")) + (
        SV + "zheader-without-feature",),
    "v2.framing.refused-before-items": (SI + "zheader-item-bomb",),
    "v2.compressed.exactly-zstd-frame": tuple(SI + "zheader-" + k for k in (
        "not-zstd", "no-content-size", "empty", "trailing-bytes")),
    "v2.compressed.check-declared-size": (SI + "zheader-bomb",),
    "v2.compressed.treat-corrupt-stored": (SI + "zheader-*",),
    "v2.compressed.canonical-cbor-non": (SI + "zheader-noncanonical",),
    "v2.body.equal-end-last": (SI + "body-length-lies", SI + "bodies-gap"),
    "v2.body.equal-digest-otherwise": (SI + "body-flipped", SI + "pack-body-flipped"),
    "v2.body.unframe-chunk-reference": (SV + "bodies-size-differs",),
    "v2.run.equal-path-s": (SI + "record-run-mismatch", SI + "record-seq-mismatch"),
    "v2.run.equal-length-manifest": (SI + "record-size-lies",),
    "v2.run.equal-snapshot-corrupt": (SI + "record-manifest-not-snapshot",
                                      SI + "record-snapshot-lies"),
    "v2.run.name-record-s": (SI + "record-manifest-other-seq",),
    "v2.run.compared-manifest-s": (SV + "record-created-differs",),
    "v2.run.ignore-header-keys": (SV + "unknown-header-keys",),
    "v2.run.fall-back-lower": (SI + "record-torn",),
    "v2.packs.need-pack-s": (SV + "pack-header-damaged",),
    "v2.locators.range-corrupt-otherwise": (SI + "locator-index-out-of-range",
                                            SI + "locator-unneeded-*", SI + "locator-prefix-short"),
    "v2.locators.prefix-once": (SI + "locator-prefix-twice",),
    "v2.locators.verify-reads-full": (LK + "locator-names-other-body", SV + "stale-locator-loose"),
    "v2.head.take-hint-head": (LK + "hint-*", SV + "hints"),
    "v2.head.treated-absent-seq": (LK + "hint-torn", LK + "hint-garbage", LK + "hint-other"),
    "v2.head.read-exists-visible": (LK + "hint-ahead", LK + "hint-forgot"),
    "v2.head.fall-back-listing": (LK + "hint-ahead", LK + "hint-forgot"),
    "v2.reading.try-forwards-before": (SV + "locator-into-stray", SV + "forwards"),
    "v2.reading.try-body-table": (SV + "locator-into-stray",),
    "v2.reading.report-missing-before": (SV + "stale-locator-loose", SV + "forward-damaged-loose",
                                         SV + "body-damaged-loose", SV + "forwards"),
    "v2.forwards.follow-most-hops": (SV + "forward-four-hops", SI + "forward-five-hops"),
    "v2.forwards.use-well-formed": (SI + "forward-bad-row", SI + "forward-damaged"),
    "v2.garbage.keep-named-container": ("gc/v2-gc-named-*",),
    # the writer side of spec/v2.md: writer-rules/* (ckptfs_conformance/writer_rules.py)
    "v2.store.list": ("writer-rules/features",),
    "v2.store.write-form-0x03": ("writer-rules/features",),
    "v2.packs.blake3-whole-file": ("writer-rules/packs-complete",),
    "v2.locators.cover-chunk-snapshot": ("writer-rules/complete-locators",),
    "v2.locators.carry-body-read": ("writer-rules/complete-locators",),
    "v2.head.name-seq-did": ("writer-rules/hints-committed",),
    "v2.writer.alike-writer-vectors": ("writer-rules/*",),
}
