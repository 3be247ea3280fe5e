"""Vectors for the points issue 16 settled ("The spec alone must be enough"): every rule an
independent implementation had to guess, every place where the spec and the reference
disagreed, and reader MUSTs that no vector tested before (a reader dropping the check passed).

Each vector breaks one rule (or, for the precedence vectors, exactly two, to pin which is
reported); ``ckptfs_conformance/README.md`` ("Rule -> vector") lists them by rule, and the adapter has
a ``--break`` rule per new check (``tests/test_conformance.py`` checks that each fails exactly
its vectors). Called from generate.py; kept in its own module so that the shared generator only
gains calls.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cbor2

from ckptfs.format import cbor, framing
from ckptfs.format.digest import Digest
from ckptfs.format.names import chunk_path, record_path
from ckptfs_conformance.render import render_ref, render_store, tagged

Damage = Callable[[Path], Any]


def _g() -> Any:
    from ckptfs_conformance import generate

    return generate


# -- primitives --------------------------------------------------------------------------------
#: value content that is well-formed but not canonical: readers MUST accept it (format.md 5.3)
VALUE_NONCANONICAL = {
    "value-noncanonical-int": ("1801", "the integer 1 in a 2-byte head"),
    "value-noncanonical-key-order": ("a2616201616102", "map keys out of order ({b, a})"),
    "value-noncanonical-float": ("fb3ff0000000000000", "1.0 as a double"),
}
#: every NaN renders as the one canonical NaN (README "Tagged JSON", format.md 5.1)
VALUE_NAN = {
    "value-nan-payload": ("f97e01", "a half NaN with a payload"),
    "value-nan-negative": ("f9fe00", "a NaN with the sign bit set"),
    "value-nan-double-payload": ("fb7ff8000000000001", "a double NaN with a payload"),
}


def primitive_vectors(g: Any) -> None:
    for name, (h, desc) in VALUE_NONCANONICAL.items():
        g.vector("cbor", name, f"format.md 5.3: value content is never refused for its "
                 f"encoding alone: {desc} decodes", ["value-decode", "{file:input}"],
                 {"output": tagged(cbor2.loads(bytes.fromhex(h))), "compare": "json"},
                 ["cbor"], {"input": {"hex": h}})
    for name, (h, desc) in VALUE_NAN.items():
        g.vector("cbor", name, f"format.md 5.1: {desc} is NaN, rendered 7ff8000000000000",
                 ["value-decode", "{file:input}"],
                 {"output": {"$float": "7ff8000000000000"}, "compare": "json"}, ["cbor"],
                 {"input": {"hex": h}})
    g.vector("cbor", "reject-nan-payload", "format.md 5.2: in config, manifests and records "
             "NaN is f97e00; a NaN with a payload is non-canonical",
             ["cbor-decode", "{file:input}"], {"error": "non-canonical"}, ["cbor"],
             {"input": {"hex": "f97e01"}})
    g.vector("cbor", "value-depth-256", "format.md 5.3: a value 256 arrays deep decodes",
             ["value-decode", "{file:input}"],
             {"output": tagged(cbor2.loads(bytes.fromhex("81" * 256 + "00"))),
              "compare": "json"}, ["cbor"], {"input": {"hex": "81" * 256 + "00"}})
    text = b"ckptfs framing vector " * 200
    frame = _g()._zstd(text)
    skippable = bytes.fromhex("502a4d18") + (4).to_bytes(4, "little") + b"skip"
    framing_cases = {
        "zstd-trailing-byte": (b"\x01" + frame + b"\x00", "one byte after the zstd frame"),
        "zstd-skippable-after": (b"\x01" + frame + skippable,
                                 "a skippable frame after the zstd frame"),
        "zstd-second-frame": (b"\x01" + frame + _g()._zstd(b"x"), "a second zstd frame"),
        "zstd-declares-larger": (b"\x01" + _g()._patch_content_size(frame, len(text) + 1),
                                 "a frame that declares one byte more than it holds and than "
                                 "expected (the payload itself has the expected length)"),
    }
    for name, (stored, desc) in framing_cases.items():
        g.vector("framing", name, f"format.md 4: {desc} (corrupt)",
                 ["unframe", "{file:input}", str(len(text))], {"error": "corrupt"},
                 ["framing"], {"input": {"hex": stored.hex()}})
    g.vector("digest", "parse-empty", "format.md 3.3: the empty text is no digest (path)",
             ["parse-digest", ""], {"error": "path"}, ["digest"])


# -- damaged stores (on generate._base: r1 seqs 1-2 with small/big/blob, r2 seq 1) ------------
def _cfg(**kw: Any) -> Damage:
    return lambda p: _g()._set_config(p, **kw)


def _cfg_without(key: str, **kw: Any) -> Damage:
    def damage(p: Path) -> None:
        c = cbor2.loads((p / "ckptfs.cbor").read_bytes())
        c.update(kw)
        del c[key]
        (p / "ckptfs.cbor").write_bytes(cbor.encode(c))
    return damage


def _cfg_noncanonical(**kw: Any) -> Damage:
    def damage(p: Path) -> None:
        c = cbor2.loads((p / "ckptfs.cbor").read_bytes())
        c.update(kw)
        (p / "ckptfs.cbor").write_bytes(_g()._noncanonical(c))
    return damage


def _chunker(**kw: Any) -> dict[str, Any]:
    return dict(_g().SMALL_CBOR, **kw)


def _manifest(**kw: Any) -> Damage:
    return lambda p: _g()._manifest_field(p, **kw)


def _manifest_noncanonical(**kw: Any) -> Damage:
    def damage(p: Path) -> None:
        G = _g()
        m = dict(G._head_manifest(p)[1], **kw)
        G._recommit(p, m, G._noncanonical(m))
    return damage


def _record_at_wrong_seq(p: Path) -> None:
    """runs/r1/..03 holds r1's record of seq 2 (whose manifest is seq 2 as well)."""
    (p / record_path("r1", 3)).write_bytes((p / record_path("r1", 2)).read_bytes())


def _chunk_lies_whole_digest_agrees(p: Path) -> None:
    """A blob whose one chunk file holds other bytes than its name says; the entry's digest is
    of the bytes the file holds, so only the per-chunk digest check catches it."""
    G = _g()
    named, held = b"A" * 100, b"B" * 100
    G.put_file(p, chunk_path(Digest.of(named)), framing.frame(held))
    G._with_entry(p, "swapped", {"kind": "blob", "type": "application/octet-stream",
                                 "size": 100, "digest": Digest.of(held).raw,
                                 "chunks": [[Digest.of(named).raw, 100]]})


def _is_folder(which: Callable[[Path], Path]) -> Damage:
    def damage(p: Path) -> None:
        f = which(p)
        f.unlink()
        f.mkdir()
        (f / "x").write_bytes(b"x")  # git keeps no empty folder
    return damage


def _ledger(records: list[dict[str, Any]]) -> Damage:
    return lambda p: _g()._bad_ledger(p, records)


def _ledger_ref_extra(p: Path) -> None:
    G = _g()
    G._bad_ledger(p, [G._rec("k", "intended")])
    _, m, _ = G._head_manifest(p)
    m["ledger"]["note"] = "x"
    G._recommit(p, m)


def _rec(key: str, status: str, **kw: Any) -> dict[str, Any]:
    r: dict[str, Any] = _g()._rec(key, status, **kw)
    return {k: v for k, v in r.items() if v is not ...}


#: an entry name of exactly 255 bytes (two segments of 127 and a "/"; a segment may be 128)
_NAME_255 = "a" * 127 + "/" + "b" * 127


def _blob(p: Path, **kw: Any) -> dict[str, Any]:
    return dict(_g().content_entry(p, "blob", b"abc"), **kw)


def invalid_cases() -> dict[str, tuple[str, str, Damage]]:
    G = _g()
    err = {"type": "E", "message": "m"}
    return {
        # reader MUSTs no vector tested alone (issue 16)
        "record-seq-not-path": ("corrupt", "format.md 8.1: runs/r1/..03 holds the record of "
                                "seq 2 (its manifest agrees with the record, not the path)",
                                _record_at_wrong_seq),
        "chunk-digest-only-lies": ("corrupt", "format.md 6.1: a chunk file holding other bytes "
                                   "than its name; the whole-content digest agrees with them, "
                                   "so only the per-chunk digest catches it",
                                   _chunk_lies_whole_digest_agrees),
        "config-chunker-min-above-avg": ("corrupt", "format.md 2: chunker min 300 > avg 256",
                                         _cfg(chunker=_chunker(min=300))),
        "config-chunker-avg-above-max": ("corrupt", "format.md 2: chunker avg 2048 > max 1024",
                                         _cfg(chunker=_chunker(avg=2048))),
        "config-chunker-extra-key": ("corrupt", "format.md 2: the chunker map has exactly its "
                                     "five keys", _cfg(chunker=_chunker(window=48))),
        "label-value-1025": ("corrupt", "format.md 3.3: a label value of 1025 characters",
                             _manifest(labels={"a": "\u00e9" * 1025})),
        "label-key-dot": ("corrupt", "format.md 3.3: a label key starting with '.'",
                          _manifest(labels={".a": "x"})),
        "label-key-129": ("corrupt", "format.md 3.3: a label key of 129 characters",
                          _manifest(labels={"k" * 129: "x"})),
        "entry-label-value-1025": ("corrupt", "format.md 3.3: an entry label value of 1025 "
                                   "characters", lambda p: G._with_entry(p, "v", dict(
                                       G.content_entry(p, "value", b"\x01", encoding="cbor"),
                                       labels={"a": "x" * 1025}))),
        # other reader MUSTs of format.md 3.3, 6 and 7 that no vector tested
        "entry-name-dash-segment": ("corrupt", "format.md 3.3: an entry name segment starting "
                                    "with '-'", lambda p: G._with_entry(p, "a/-b", _blob(p))),
        "entry-name-256-bytes": ("corrupt", "format.md 3.3: an entry name of 256 bytes",
                                 lambda p: G._with_entry(p, _NAME_255 + "b", _blob(p))),
        "ref-uri-empty": ("corrupt", "format.md 6.2: an empty URI",
                          lambda p: G._with_entry(p, "r", {"kind": "ref", "uri": ""})),
        "ref-uri-4097": ("corrupt", "format.md 6.2: a URI of 4097 characters",
                         lambda p: G._with_entry(p, "r", {"kind": "ref", "uri": "x" * 4097})),
        "ref-digest-null": ("corrupt", "format.md 6.2: an optional key is absent, never null",
                            lambda p: G._with_entry(p, "r", {"kind": "ref", "uri": "x",
                                                             "digest": None})),
        "blob-type-empty": ("corrupt", "format.md 6.1: an empty media type",
                            lambda p: G._with_entry(p, "b", _blob(p, type=""))),
        "blob-type-256": ("corrupt", "format.md 6.1: a media type of 256 characters",
                          lambda p: G._with_entry(p, "b", _blob(p, type="x" * 256))),
        "entry-inline-and-chunks": ("corrupt", "format.md 6.1: both inline and chunks",
                                    lambda p: G._with_entry(p, "b", _blob(p, chunks=[]))),
        "entry-no-content": ("corrupt", "format.md 6.1: neither inline nor chunks",
                             lambda p: G._with_entry(p, "b", {k: v for k, v in _blob(p).items()
                                                              if k != "inline"})),
        "value-type-mismatch": ("corrupt", "format.md 6.1: a cbor value typed "
                                "application/cbor-seq", lambda p: G._with_entry(p, "v", dict(
                                    G.content_entry(p, "value", b"\x01", encoding="cbor"),
                                    type="application/cbor-seq"))),
        "manifest-boundary-uppercase": ("corrupt", "format.md 3.3: boundary 'Step'",
                                        _manifest(boundary="Step")),
        "manifest-attempt-zero": ("corrupt", "format.md 7: attempt 0", _manifest(attempt=0)),
        "manifest-labels-null": ("corrupt", "format.md 7: labels is a map (may be empty), not "
                                 "null", _manifest(labels=None)),
        "schema-name-empty": ("corrupt", "format.md 7: an empty schema name",
                              _manifest(schema={"name": "", "version": 1})),
        # folders where files belong (format.md 9.2)
        "chunk-is-folder": ("storage", "format.md 9.2: a folder where a chunk file belongs",
                            _is_folder(lambda p: G._entry_chunk(p, "big"))),
        "record-is-folder": ("storage", "format.md 9.2: a folder where the head run record "
                             "belongs", _is_folder(lambda p: p / record_path("r2", 1))),
        # ledger fields (ledger.md 1, 3)
        "ledger-ref-unknown-key": ("corrupt", "ledger.md 3: ledger-ref has exactly its keys",
                                   _ledger_ref_extra),
        "ledger-error-unknown-key": ("corrupt", "ledger.md 1: error is exactly {type, message}",
                                     _ledger([_rec("k", "intended"), _rec(
                                         "k", "failed", error=dict(err, code=1), via="call")])),
        "ledger-completed-without-result": ("corrupt", "ledger.md 1: a completed record "
                                            "carries result or result_content",
                                            _ledger([_rec("k", "intended"),
                                                     _rec("k", "completed", via="call")])),
        "ledger-settled-without-via": ("corrupt", "ledger.md 1: a settling record carries via",
                                       _ledger([_rec("k", "intended"),
                                                _rec("k", "completed", result=1)])),
        "ledger-request-on-effect": ("corrupt", "ledger.md 1: only approval records carry a "
                                     "request", _ledger([_rec("k", "intended", request=1)])),
        # precedence: two rules broken, the first in the order of format.md 13.1 is reported
        "two-config-required-and-chunker": ("unsupported-feature", "format.md 13.1: an unknown "
                                            "required feature and chunker min > avg: required "
                                            "first", _cfg(required=["x-unknown"],
                                                          chunker=_chunker(min=300))),
        "two-config-version-and-required": ("unsupported-version", "format.md 13.1: version 3 "
                                            "and an unknown required feature: version first",
                                            _cfg(version=3, required=["x-unknown"])),
        "two-config-version-and-missing-key": ("unsupported-version", "format.md 13.1: version "
                                               "3 without 'created': version before fields",
                                               _cfg_without("created", version=3)),
        "two-config-noncanonical-and-version": ("non-canonical", "format.md 13.1: keys out of "
                                                "order and version 3: canonical form first",
                                                _cfg_noncanonical(version=3)),
        "two-manifest-format-and-required": ("unsupported-version", "format.md 13.1: manifest "
                                             "format 2 and an unknown required feature",
                                             _manifest(format=2, required=["x-unknown"])),
        "two-manifest-required-and-label": ("unsupported-feature", "format.md 13.1: an unknown "
                                            "required feature and a bad label key: required "
                                            "before fields", _manifest(
                                                required=["x-unknown"], labels={".a": "x"})),
        "two-manifest-required-and-expired": ("unsupported-feature", "format.md 11: an unknown "
                                              "required feature and an expiry long past: "
                                              "required before expiry", _manifest(
                                                  required=["x-unknown"], expires=G.T0)),
        "two-manifest-noncanonical-and-format": ("non-canonical", "format.md 13.1: keys out of "
                                                 "order and format 2: canonical form first",
                                                 _manifest_noncanonical(format=2)),
    }


# -- valid stores --------------------------------------------------------------------------------
def _noncanonical_values(p: Path) -> list[str]:
    G = _g()
    entries = {name: G.content_entry(p, "value", bytes.fromhex(h), encoding="cbor")
               for name, (h, _) in {**VALUE_NONCANONICAL, **VALUE_NAN}.items()}
    G.commit_raw(p, G.manifest_map("r3", 1, entries))
    return []


def _noncanonical_ledger(p: Path) -> list[str]:
    """r1's head gets a ledger whose records are encoded with their keys in reverse order."""
    G = _g()
    recs = [G._rec("k", "intended"), G._rec("k", "completed", result=1, via="call")]
    content = b"".join(G._noncanonical(r) for r in recs)
    _, m, _ = G._head_manifest(p)
    m["ledger"] = {"count": 2, "size": len(content), "digest": Digest.of(content).raw,
                   "inline": content}
    G._recommit(p, m)
    return []


def _approval_requests(p: Path) -> list[str]:
    """An approval whose decision record repeats the request with another value: the fold
    shows the request of the key's first record."""
    G = _g()
    args = Digest.of(cbor.encode([["refund 10"], {}])).raw
    recs = [G._rec("ok-1", "intended", kind="approval", name="approval", args=args,
                   request="refund 10"),
            G._rec("ok-1", "completed", kind="approval", name="approval", args=args,
                   request="other", via="manual",
                   result={"approved": True, "decision": None})]
    G._bad_ledger(p, recs)
    return []


def _created_differs(p: Path) -> list[str]:
    G = _g()
    G._patch_record(p, created=G.T0 - 1)
    return []


def _name_over_u64(p: Path) -> list[str]:
    (p / "runs/r2/99999999999999999999").write_bytes(b"not a record")
    (p / "runs/r2/18446744073709551616").write_bytes(b"not a record")
    return []


def _schema_extra(p: Path) -> list[str]:
    G = _g()
    G._manifest_field(p, schema={"name": "state", "version": 1, "note": "extension"})
    return []


def _label_limits(p: Path) -> list[str]:
    G = _g()
    G._manifest_field(p, labels={"k" * 128: "\u00e9" * 1024, "a/b.c-d_e": ""})
    return []


def _name_limits(p: Path) -> list[str]:
    G = _g()
    _, m, _ = G._head_manifest(p)
    m["entries"][_NAME_255] = _blob(p, type="x/" + "y" * 253)
    m["entries"]["uri"] = {"kind": "ref", "uri": "\u00e9" * 4096}
    m["boundary"] = "b" + "0" * 63
    G._recommit(p, m)
    return []


def _tombstone_without_fence(p: Path) -> list[str]:
    """tombstones/r2.cbor (erasing) with no retired marker: visibility is the markers'."""
    stone = {"run": "r2", "seq": None, "reason": "asked", "requested": _g().T0,
             "state": "erasing", "completed": None, "snapshots": [], "manifests_deleted": 0,
             "chunks_deleted": 0, "bytes_deleted": 0, "chunks_kept_shared": 0}
    _g().put_file(p, "tombstones/r2.cbor", cbor.encode(stone))
    return []


def _empty_folders(p: Path) -> list[str]:
    """A run folder with nothing in it (a crash before a run's first record), one with only
    empty folders below it, and an empty chunk fan-out folder: none of them is part of the
    store (format.md 9.2), so the rendering is the base store's."""
    for rel in ("runs/ghost", "runs/ghost2/retired", "chunks/zz"):
        (p / rel).mkdir(parents=True)
    return []


VALID: dict[str, tuple[str, Callable[[Path], list[str]]]] = {
    "empty-folders": ("format.md 9.2: a folder that holds no file at any depth is absent: an "
                      "empty run folder is no run (the runner makes the vector's `folders`, "
                      "which git cannot keep)", _empty_folders),
    "value-noncanonical": ("format.md 5.3: value content that is well-formed but not canonical "
                           "(a long integer head, keys out of order, 1.0 as a double, NaNs with "
                           "payloads) is read, never refused; every NaN renders as "
                           "7ff8000000000000", _noncanonical_values),
    "ledger-noncanonical-records": ("ledger.md 3: ledger records encoded with their keys out of "
                                    "order are read like value content", _noncanonical_ledger),
    "ledger-approval-request": ("ledger.md 2: the fold shows the request of the key's first "
                                "record", _approval_requests),
    "record-created-differs": ("format.md 8.1: a record's created is not checked against the "
                               "manifest's; the snapshot's created is the manifest's",
                               _created_differs),
    "record-name-over-u64": ("format.md 3.1: 20-digit names above 2^64-1 in a run folder are "
                             "no records: ignored", _name_over_u64),
    "schema-extra-keys": ("format.md 7, migrations.md 2: readers ignore other keys in schema",
                          _schema_extra),
    "label-limits": ("format.md 3.3: a label key of 128 characters and a value of 1024 "
                     "(2048 bytes of UTF-8), and an empty value", _label_limits),
    "name-limits": ("format.md 3.3, 6: an entry name of 255 bytes, a media type of 255 "
                    "characters, a URI of 4096 (8192 bytes), a boundary of 64", _name_limits),
    "lifecycle-tombstone-without-fence": ("retention.md 5: a run tombstone without a fence (no "
                                          "conforming erase leaves one): visibility is decided "
                                          "by retired markers, so the run is served and the "
                                          "tombstone rendered", _tombstone_without_fence),
}


def empty_folders(root: Path) -> list[str]:
    """The folders below ``root`` with nothing in them, as store paths (sorted): a vector
    lists them because git does not keep them (ckptfs_conformance/README.md). The writer's empty
    ``tmp/`` is left out: no reader looks there."""
    return sorted(rel for d, subs, files in os.walk(root)
                  if not subs and not files
                  and (rel := str(Path(d).relative_to(root))) not in (".", "tmp"))


def valid_vectors(g: Any, base: Path) -> None:
    G = _g()
    for name, (desc, build) in VALID.items():
        d = g.store_dir("store-valid", name)
        shutil.copytree(base, d)
        beyond = build(d)
        folders = empty_folders(d)
        g.vector("store-valid", name, desc, ["read", "{store}", str(G.NOW)],
                 {"output": render_store(str(d), G.NOW), "compare": "json"},
                 ["reader", *G._feature(name)], store=f"{name}.store", beyond_cddl=beyond,
                 **({"folders": folders} if folders else {}))


# -- lookups ---------------------------------------------------------------------------------------
def lookup_vectors(g: Any, base: Path) -> None:
    """By id, a record that lies about the size is corrupt as it is by run (format.md 8.1);
    text that is no digest is a bad name (3.3)."""
    G = _g()
    d = g.store_dir("lookup", "spec16")
    shutil.copytree(base, d)
    head = Digest(G._record(d)["snapshot"])
    G._patch_record(d, size=G._record(d)["size"] + 1)
    bad = {"by-id-record-size-lies": (head.text, "corrupt", "by id: r1@2's record says a size "
                                      "other than its manifest's"),
           "by-run-seq-record-size-lies": ("r1@2", "corrupt", "by RUN@SEQ: the same record"),
           "by-id-uppercase": ("blake3:" + head.hex.upper(), "path", "uppercase hex is no "
                               "digest text: a bad name"),
           "by-id-short": (head.text[:-1], "path", "63 hex digits are no digest text")}
    for name, (ref, cat, desc) in bad.items():
        try:
            render_ref(str(d), ref, G.NOW)
            raise AssertionError(f"{ref}: ckptfs accepts it")
        except Exception as e:
            assert getattr(e, "category", None) == cat, (ref, e)
        g.vector("lookup", name, f"format.md 8.1/3.3: {desc} ({cat})",
                 ["snapshot", "{store}", str(G.NOW), ref], {"error": cat}, ["reader"],
                 store="spec16.store")
    r2 = Digest(G._record(d, 1, "r2")["snapshot"]).text
    g.vector("lookup", "by-id-beside-damaged-record", "by id: r2@1, whose record is intact, in "
             "the same store", ["snapshot", "{store}", str(G.NOW), r2],
             {"output": render_ref(str(d), r2, G.NOW), "compare": "json"}, ["reader"],
             store="spec16.store")


def vectors(g: Any, base: Path) -> None:
    """Every issue-16 vector that builds on generate._base (call while it exists)."""
    G = _g()
    G.invalid_stores(g, base, invalid_cases())
    valid_vectors(g, base)
    lookup_vectors(g, base)


__all__ = ["primitive_vectors", "vectors", "invalid_cases", "VALID", "WRITER_CASES"]


# -- writer cases ------------------------------------------------------------------------------
def _list_append_case() -> dict[str, Any]:
    """A list of 14 items (chunked), then 36 commits each appending one 9-byte item (every 16
    such pieces merge into one), resumed in the middle (the resumed writer derives the sealed
    chunks from the list), then one append of three large items (cut as fresh content)."""
    G = _g()
    steps: list[dict[str, Any]] = [{"op": "start", "run": "r1", "time": G.T0,
                                    "schema": {"name": "s", "version": 1}}]
    items = [G.prng(f"item{j}", 75).hex() for j in range(14)]
    for i in range(38):
        if i == 20:
            steps.append({"op": "resume", "run": "r1", "time": G.T0 + 99})
        if 1 <= i <= 36:
            items.append(G.prng(f"tiny{i}", 4).hex())
        elif i == 37:
            items += [G.prng(f"large{k}", 75).hex() for k in range(3)]
        steps.append(G._cp("r1", G.T0 + 100 + i, {"log": G._v(list(items))}))
    return {"chunker": G.SMALL_CBOR, "steps": steps}


WRITER_CASES: dict[str, tuple[str, bool, list[str], dict[str, Any]]] = {
    "list-append-tiered": ("format.md 10 'Appending to a list': a list grown by one small item "
                           "per commit (pieces merge by 16), resumed in the middle, then by "
                           "three large items; the -exact variant pins the chunk lists of the "
                           "reference profile", True, ["writer"],
                           _list_append_case()),
}
