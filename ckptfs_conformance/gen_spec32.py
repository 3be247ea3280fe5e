"""Issue 32: reader vectors that fail a reader which skips one rule of spec/v2.md, or which
reads a point the spec used to leave open the other way.

Each vector here has a ``--break`` rule in ckptfs's adapter (``SPEC32_BREAKS``,
ckptfs_conformance/adapters/spec32_breaks.py) that fails exactly it and its siblings
(tests/test_conformance.py). The stores are damaged so that only the rule at stake decides:
an extra body row or locator row that no needed chunk uses (a reader that skips the row rules
never notices it otherwise), a header rewritten as is before its form byte is changed (a
reader that takes any form byte for ``0x02`` then reads it), and so on.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cbor2

import ckptfs
from ckptfs.errors import CkptfsError
from ckptfs.format import cbor
from ckptfs.format import containers as ct
from ckptfs.format.cdc import ChunkerParams
from ckptfs.format.digest import Digest
from ckptfs.format.lifecycle import Retired
from ckptfs.format.names import forward_path, record_path
from ckptfs_conformance import gen_v2_lookups, gen_v2_stores
from ckptfs_conformance.gen_v2_containers import edit, flip, join, split
from ckptfs_conformance.gen_v2_stores import REC1, REC2, P, V2

#: a chunker whose minimum exceeds the blobs below: each blob of 3000 bytes is one chunk
WIDE = ChunkerParams(min_size=4096, avg_size=16384, max_size=65536)


# -- damage ------------------------------------------------------------------------------------
def _as_form(f: Path, form_byte: int) -> None:
    """Rewrite container ``f`` with its header stored as is (form 0x02, digest recomputed),
    then set the form byte to ``form_byte``: only the form rule is broken."""
    h, area = split(f.read_bytes())
    data = join(h, area, version=2)
    f.write_bytes(data[:8] + bytes([form_byte]) + data[9:])


def _extra_body(stored: int, size: int) -> Callable[[dict[str, Any], bytes], bytes]:
    """Append a body row no manifest names (its bytes appended too, body_length grown)."""
    def change(h: dict[str, Any], area: bytes) -> bytes:
        h["bodies"].append([Digest.of(b"unneeded").raw, h["body_length"], stored, size])
        h["body_length"] += stored
        return area + b"\x00" * stored
    return change


def _extra_locator(row: Callable[[dict[str, Any]], list[Any]]
                   ) -> Callable[[dict[str, Any], bytes], None]:
    """Append a locator row (built from the header) that no needed chunk uses."""
    def change(h: dict[str, Any], area: bytes) -> None:
        h["locators"]["chunks"].append(row(h))
    return change


def _prefix_twice(h: dict[str, Any], area: bytes) -> None:
    rows = h["locators"]["chunks"]
    rows.insert(1, list(rows[0]))


def _nonce(value: Any) -> Callable[[dict[str, Any], bytes], None]:
    def change(h: dict[str, Any], area: bytes) -> None:
        if value is None:
            del h["nonce"]
        else:
            h["nonce"] = value
    return change


def _manifest_other_seq(h: dict[str, Any], area: bytes) -> None:
    """The carried manifest names seq 3 (snapshot and size agree with it): the record at
    runs/r1/<2> commits a manifest of another seq."""
    m = cbor2.loads(h["manifest"])
    m["seq"] = 3
    data = cbor.encode(m)
    h["manifest"], h["snapshot"], h["size"] = data, Digest.of(data).raw, len(data)


def _table_size(h: dict[str, Any], area: bytes) -> None:
    h["bodies"][0][3] += 1


def _created(h: dict[str, Any], area: bytes) -> None:
    h["created"] += 1


def _config(p: Path, change: Callable[[dict[str, Any]], None]) -> None:
    cfg = cbor2.loads((p / "ckptfs.cbor").read_bytes())
    change(cfg)
    (p / "ckptfs.cbor").write_bytes(cbor.encode(cfg))


def _retire(p: Path, run: str, through: int, created: int) -> None:
    f = p / "runs" / run / "retired" / f"{through:020d}"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_bytes(Retired(run, through, (), created).to_bytes())


def _bad_forward_row(p: Path) -> None:
    """A forward whose rows are good but one: a 31-byte digest. The whole forward is damaged."""
    f = p / forward_path(REC1)
    m = cbor2.loads(f.read_bytes())
    bad = list(m["bodies"][0])
    bad[0] = bytes(bad[0])[:31]
    m["bodies"].append(bad)
    f.write_bytes(cbor.encode(m))


INVALID: dict[str, tuple[str, str, Callable[[Path], Any]]] = {
    "record-form-1": ("corrupt", "form byte 0x01 before a header stored as is, whose digest "
                      "holds (only 0x02 and 0x03 exist; spec/v2.md 3.1 step 1)",
                      lambda p: _as_form(p / REC2, 1)),
    "record-form-0": ("corrupt", "form byte 0x00 before a header stored as is, whose digest "
                      "holds", lambda p: _as_form(p / REC2, 0)),
    "bodies-unneeded-stored-one": ("corrupt", "an extra body row no manifest names, stored in 1 "
                                   "byte (range 2..16908289): the header is corrupt whether or "
                                   "not the body is read (3.2)",
                                   lambda p: edit(p / REC2, _extra_body(1, 1))),
    "bodies-unneeded-size-zero": ("corrupt", "an extra body row no manifest names, of size 0 "
                                  "(range 1..16777216)",
                                  lambda p: edit(p / REC2, _extra_body(2, 0))),
    "locator-unneeded-stored-one": ("corrupt", "an extra locator row no needed chunk uses, "
                                    "stored 1 (range 2..16908289): the header is corrupt (3.5)",
                                    lambda p: edit(p / REC2, _extra_locator(
                                        lambda h: [b"\xee" * 8, 0, 45, 1]))),
    "locator-unneeded-index-out-of-range": (
        "corrupt", "an extra locator row no needed chunk uses, whose container index is past "
        "the end of containers", lambda p: edit(p / REC2, _extra_locator(
            lambda h: [b"\xee" * 8, len(h["locators"]["containers"]), 45, 2]))),
    "locator-prefix-twice": ("corrupt", "a locator row repeated: two rows with one prefix "
                             "(3.5: a reader never chooses between two)",
                             lambda p: edit(p / REC2, _prefix_twice)),
    "record-nonce-15": ("corrupt", "a nonce of 15 bytes (3.3: exactly 16)",
                        lambda p: edit(p / REC2, _nonce(b"\x01" * 15))),
    "record-nonce-absent": ("corrupt", "a record header without nonce",
                            lambda p: edit(p / REC2, _nonce(None))),
    "record-nonce-text": ("corrupt", "a nonce that is a text of 16 characters",
                          lambda p: edit(p / REC2, _nonce("0123456789abcdef"))),
    "record-manifest-other-seq": ("corrupt", "runs/r1/<2> whose header names r1 and 2 but "
                                  "carries a manifest of seq 3 (snapshot and size agree with "
                                  "it; 3.3, format.md 8.1)",
                                  lambda p: edit(p / REC2, _manifest_other_seq)),
}

VALID_DESC = {
    "zheader-without-feature": "form 0x03 records in a version 2 store whose config does not "
                               "list compressed-headers: read (spec/v2.md 2, 3.1)",
    "config-window-out-of-range": "check_window_ms 60001 (out of range): readers never depend "
                                  "on settings (spec/v2.md 2)",
    "bodies-size-differs": "a body table row whose size is one more than the chunk reference's: "
                           "unframed with the reference's size, not refused (3.2)",
    "record-created-differs": "a record header whose created is not the manifest's: not "
                              "compared (3.3)",
    "pack-header-damaged": "a pack whose header digest is flipped (so its name is not its "
                           "digest either), bodies intact: readers read packs by range and "
                           "never need the header (3.4)",
    "v1-config-with-v2-features": "a version 1 store whose config requires compressed-headers "
                                  "and complete-locators: read as version 1 (spec/v2.md 2)",
}


def _pad_v1_record(p: Path) -> None:
    f = p / REC1
    m = cbor2.loads(f.read_bytes())
    assert isinstance(m, dict) and "snapshot" in m, "r1@1 must be a version 1 record"
    m["x-pad"] = b"\x00" * 70000
    f.write_bytes(cbor.encode(m))


def _v1_store(p: Path, new_store: Any, prng: Any) -> None:
    """A version 1 store with one snapshot: a copy of the frozen vector store
    ``store-valid/value-scalars`` (ckptfs writes no version 1 store; the config vectors of
    format.md 2 damage the copy)."""
    from ckptfs_conformance.generate import OUT

    shutil.copytree(OUT / "store-valid" / "value-scalars.store", p)


#: format.md 2 (issue 32, gap 27): a missing or non-text hash is damage, another text unknown
CONFIG_INVALID: dict[str, tuple[str, str, Callable[[Path], Any]]] = {
    "config-hash-missing": ("corrupt", "a store config without 'hash' (a required key; format.md "
                            "2: corrupt, not unsupported-feature)",
                            lambda p: _config(p, lambda c: c.pop("hash"))),
    "config-hash-not-text": ("corrupt", "a store config whose 'hash' is the integer 1",
                             lambda p: _config(p, lambda c: c.update(hash=1))),
}


def _valid_builds(new_store: Any, prng: Any) -> dict[str, Callable[[Path], Any]]:
    def base(p: Path) -> None:
        gen_v2_stores.base(p, new_store, prng)

    def without_feature(p: Path) -> None:
        base(p)
        gen_v2_stores.set_required(p, lambda r: r - {"compressed-headers"})

    def window(p: Path) -> None:
        base(p)
        _config(p, lambda c: c["settings"].update(check_window_ms=60001))

    def table_size(p: Path) -> None:
        base(p)
        edit(p / REC2, _table_size)

    def created(p: Path) -> None:
        base(p)
        edit(p / REC2, _created)

    def pack_header(p: Path) -> None:
        gen_v2_stores.pack_base(p, new_store, prng)
        packs = gen_v2_stores.packs(p)
        assert packs
        f = packs[0]
        hlen = int.from_bytes(f.read_bytes()[9:13], "big")
        flip(f, 13 + hlen + 5)  # a byte of the header digest

    def v1_config(p: Path) -> None:
        _v1_store(p, new_store, prng)
        _config(p, lambda c: c.update(required=sorted(
            set(c["required"]) | {"compressed-headers", "complete-locators"})))
        assert cbor2.loads((p / "ckptfs.cbor").read_bytes())["version"] == 1

    return {"zheader-without-feature": without_feature, "config-window-out-of-range": window,
            "bodies-size-differs": table_size, "record-created-differs": created,
            "pack-header-damaged": pack_header, "v1-config-with-v2-features": v1_config}


def _other_body_store(p: Path, new_store: Any, prng: Any) -> None:
    """r1@1 carries two one-chunk blobs 'a' and 'c' of 3000 bytes each; r1@2 needs only 'a'
    and locates it in r1@1. Then r1@2's locator row for 'a' is pointed at the body of 'c'
    (the same container, the same stored length, another digest) and its entry's digest made
    c's: a reader that takes the bytes at a located place without checking the chunk's full
    digest renders c's bytes as 'a'."""
    s, c = new_store(p, WIDE)
    r = s.start_run("r1")
    a, other = prng("same-a", 3000), prng("same-c", 3000)
    r.checkpoint({"a": ckptfs.Blob(a), "c": ckptfs.Blob(other)}, "start")
    c.tick()
    r.checkpoint({"a": ckptfs.Blob(a), "n": 2})
    s.close()
    one = ct.decode((p / REC1).read_bytes(), what="r1@1")
    where = {b.digest.raw[:8]: (one.body_start + b.offset, b.stored) for b in one.header.bodies}
    da, dc = Digest.of(a).raw[:8], Digest.of(other).raw[:8]
    assert where[da][1] == where[dc][1], "the two bodies must have one stored length"

    def point(h: dict[str, Any], area: bytes) -> None:
        (row,) = [x for x in h["locators"]["chunks"] if bytes(x[0]) == da]
        row[2] = where[dc][0]
        # the entry's own digest is that of the bytes found there, so that only the chunk's
        # digest tells them from 'a' (the chunk reference still names 'a')
        m = cbor2.loads(h["manifest"])
        m["entries"]["a"]["digest"] = Digest.of(other).raw
        data = cbor.encode(m)
        h["manifest"], h["snapshot"], h["size"] = data, Digest.of(data).raw, len(data)
    edit(p / REC2, point)


def vectors(g: Any, new_store: Any, prng: Any, invalid_stores: Any, render_store: Any,
            now: int, t0: int) -> None:
    """Every issue-32 reader vector (call inside gen_v2.layout_v2)."""
    from ckptfs_conformance.render import render_ref

    tmp = g.out / "_spec32base"
    gen_v2_stores.base(tmp, new_store, prng)
    invalid_stores(g, tmp, INVALID, prefix=P, requires=V2)
    shutil.rmtree(tmp)
    tmp = g.out / "_spec32fwd"
    gen_v2_stores.forwards(tmp, new_store, prng, t0)
    invalid_stores(g, tmp, {"forward-bad-row": (
        "missing", "r1@1 is gone and its forward has good rows but one malformed row (a "
        "31-byte digest): the whole forward is damaged, none of its rows is used (spec/v2.md "
        "8)", _bad_forward_row)}, prefix=P, requires=V2)
    shutil.rmtree(tmp)

    tmp = g.out / "_spec32up"
    gen_v2_stores.upgraded(tmp, new_store, prng)
    invalid_stores(g, tmp, {"v1-record-over-64kib": (
        "corrupt", "an upgraded store whose version 1 record r1@1 carries an unknown key padding "
        "it to 70000 bytes: format.md's 64 KiB limit of a version 1 record holds in a version 2 "
        "store (spec/v2.md 10)", _pad_v1_record)}, prefix=P, requires=V2)
    shutil.rmtree(tmp)

    tmp = g.out / "_spec32v1"
    _v1_store(tmp, new_store, prng)
    invalid_stores(g, tmp, CONFIG_INVALID, requires=["reader"])
    shutil.rmtree(tmp)

    for name, build in _valid_builds(new_store, prng).items():
        d = g.store_dir("store-valid", P + name)
        build(d)
        g.vector("store-valid", P + name, VALID_DESC[name], ["read", "{store}", str(now)],
                 {"output": render_store(str(d), now), "compare": "json"}, V2,
                 store=f"{P}{name}.store")

    def lookup(store: str, name: str, desc: str, ref: str, requires: list[str] = V2,
               **extra: Any) -> None:
        d = g.store_dir("lookup", store)
        try:
            expect: dict[str, Any] = {"output": render_ref(str(d), ref, now), "compare": "json"}
        except CkptfsError as e:
            expect = {"error": e.category}
        g.vector("lookup", name, desc, ["snapshot", "{store}", str(now), ref], expect,
                 requires, store=f"{store}.store", **extra)

    d = g.store_dir("lookup", P + "other-body")
    _other_body_store(d, new_store, prng)
    lookup(P + "other-body", P + "locator-names-other-body", "r1@2 alone: its locator for 'a' "
           "(prefix right) points at the body of another chunk of the same stored length; "
           "verified by the full digest it is not 'a' and nothing else holds 'a': corrupt "
           "(spec/v2.md 3.5, 6)", "r1@2")

    # strays and damage in id scans (spec/v2.md 7)
    d = g.store_dir("lookup", P + "strays")
    gen_v2_stores.base(d, new_store, prng)
    ids = {f"r1-{n}": Digest(gen_v2_stores.snap_id(d, "r1", n)) for n in (1, 2)}
    ids["r2-1"] = Digest(gen_v2_stores.snap_id(d, "r2", 1))
    gen_v2_lookups.ambiguous(d, new_store, ids)
    _retire(d, "amb", 1, t0 + 500_000)
    lookup(P + "strays", P + "by-id-stray", "by id: the id of a stray record (amb@1, in a "
           "retired range): no snapshot (spec/v2.md 7)", ids["amb-1"].text, V2 + ["lifecycle"])
    lookup(P + "strays", P + "by-prefix-stray-not-counted", "a 6-digit prefix a visible "
           "snapshot shares only with a stray: the visible one, not an ambiguity (spec/v2.md 7)",
           ids["amb-1"].hex[:6], V2 + ["lifecycle"])

    d = g.store_dir("lookup", P + "damaged-scan")
    gen_v2_stores.base(d, new_store, prng)
    r11 = Digest(gen_v2_stores.snap_id(d, "r1", 1))
    DAMAGED = [record_path("r2", 1)]
    flip(d / record_path("r2", 1), 20)  # a byte of the header: its digest fails
    lookup(P + "damaged-scan", P + "absent-id-beside-damaged", "by id: an id no intact record "
           "holds, while the visible record r2@1 cannot be decoded (it may be the one): "
           "corrupt, never not-found on a guess (spec/v2.md 7)", Digest.of(b"nothing").text, damaged=DAMAGED)
    lookup(P + "damaged-scan", P + "by-id-beside-damaged", "by id: r1@1, found in an intact "
           "record; damage elsewhere does not matter (spec/v2.md 7)", r11.text, damaged=DAMAGED)
    absent = gen_v2_lookups.absent_prefix({**ids, "r11": r11})
    lookup(P + "damaged-scan", P + "absent-prefix-beside-damaged", "a prefix no intact record "
           "matches while r2@1 cannot be decoded (it might match): corrupt", absent,
           damaged=DAMAGED)


# -- version 2 writers (spec/v2.md 5.2.1) ------------------------------------------------------
def _start(run: str, t: int) -> dict[str, Any]:
    return {"op": "start", "run": run, "time": t, "schema": {"name": "agent", "version": 1}}


def _cp(run: str, t: int, state: dict[str, Any]) -> dict[str, Any]:
    return {"op": "checkpoint", "run": run, "time": t, "state": state}


def writer_cases(prng: Any, t0: int) -> dict[str, tuple[str, list[str], dict[str, Any]]]:
    """name -> (description, rules checked, case)."""
    blob = prng("writer-rules-blob", 3000).hex()
    text = {"value": "the same words again and again; " * 40}
    return {
        "one-object-per-commit": (
            "two commits (the second adds a chunked blob): two run records, nothing else",
            ["one-object-per-commit"],
            {"steps": [_start("r", t0), _cp("r", t0 + 1000, {"a": {"value": 1}}),
                       _cp("r", t0 + 2000, {"a": {"value": 2}, "b": {"blob": blob}})]}),
        "packs-complete": (
            "a 12000-byte blob with record_bulk_max 2048 and pack_target 4096: its bodies go "
            "into packs, each named by its digest, form 0x02, in the store with the record",
            ["packs-complete"],
            {"settings": {"record_bulk_max": 2048, "pack_target": 4096},
             "steps": [_start("r", t0), _cp("r", t0 + 1000, {
                 "blob": {"blob": prng("writer-rules-pack", 12000).hex()}})]}),
        "complete-locators": (
            "a blob committed twice: the second record carries it or locates it, and the "
            "located bytes are the chunk", ["complete-locators"],
            {"steps": [_start("r", t0), _cp("r", t0 + 1000, {"blob": {"blob": blob}}),
                       _cp("r", t0 + 2000, {"blob": {"blob": blob}, "n": {"value": 2}})]}),
        "features": (
            "a new store: version 2 requiring complete-locators; a form 0x03 record only where "
            "the config lists compressed-headers; packs in form 0x02",
            ["config-features", "form-follows-feature"],
            {"steps": [_start("r", t0), _cp("r", t0 + 1000, {"text": text})]}),
        "nonces-unique": (
            "three commits in two runs: three nonces", ["nonces-unique"],
            {"steps": [_start("r", t0), _start("s", t0), _cp("r", t0 + 1000, {"a": {"value": 1}}),
                       _cp("s", t0 + 1000, {"a": {"value": 1}}),
                       _cp("r", t0 + 2000, {"a": {"value": 2}})]}),
        "hints-committed": (
            "two commits: a head hint, where written, names a committed record",
            ["hints-committed"],
            {"steps": [_start("r", t0), _cp("r", t0 + 1000, {"a": {"value": 1}}),
                       _cp("r", t0 + 2000, {"a": {"value": 2}})]}),
    }


def writer_vectors(g: Any, prng: Any, writer: str, now: int, t0: int) -> None:
    """The writer-rules/* vectors: ckptfs writes each case into a version 2 store; the vector
    keeps the rendering (config aside) and the rules to check (ckptfs_conformance/
    writer_rules.py)."""
    tmp = g.out / "_tmp32"
    for name, (desc, rules, case) in writer_cases(prng, t0).items():
        writer_rules_vector(g, tmp, name, desc, rules, [], dict(case, writer=writer), now)
    shutil.rmtree(tmp)


def writer_rules_vector(g: Any, tmp: Path, name: str, desc: str, rules: list[str],
                        caps: list[str], case: dict[str, Any], now: int) -> None:
    """One writer-rules/NAME vector: ckptfs writes ``case`` under ``tmp`` (its output must
    keep ``rules``), and the vector keeps the rendering, config aside."""
    from ckptfs_conformance.adapters.spec32_writer import write_v2
    from ckptfs_conformance.render import canonical_json, render_store, symbolic
    from ckptfs_conformance.writer_rules import check

    path = tmp / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(canonical_json(case))
    d = tmp / name
    write_v2(str(path), str(d))
    assert not check(d, rules, case), (name, check(d, rules, case))
    got = symbolic(render_store(str(d), now))
    g.vector("writer-rules", name, desc, ["write-v2", "{file:case}", "{out}"],
             {"store": {k: v for k, v in got.items() if k != "config"}, "now": now,
              "rules": rules}, ["writer-v2", *caps], {"case": {"json": case}})
