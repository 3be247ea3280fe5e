"""Issue 32, the last untested MUSTs of format.md, ledger.md and migrations.md that a reader
vector can show (``spec32c``): a version 2 store written by ckptfs, then one carried manifest
or ledger edited so that only the rule at stake decides. Each edit re-encodes the manifest
canonically and gives the record the new manifest's digest and size (and the ledger its new
count, size and digest), so the store is consistent but for that rule; a head hint naming the
old snapshot is dropped (hints are optional, spec/v2.md 4).

The writer side of those files is judged by writer rules (ckptfs_conformance/writer_rules.py,
``writer-rules/*``).
"""

from __future__ import annotations

import io
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cbor2

from ckptfs.format import cbor
from ckptfs.format import containers as ct
from ckptfs.format.digest import Digest
from ckptfs.format.names import head_hint_path, record_path
from ckptfs_conformance import gen_v2_stores
from ckptfs_conformance.gen_v2_containers import body_at, edit, flip
from ckptfs_conformance.gen_v2_stores import P, V2

LEDGER = V2 + ["ledger"]


# -- edits ---------------------------------------------------------------------------------------
def edit_manifest(p: Path, run: str, seq: int, change: Callable[[dict[str, Any]], None]) -> None:
    """Edit the manifest record ``run``@``seq`` carries (``change`` edits the decoded map in
    place); the record names the new manifest's digest and size, and the run's head hint goes."""
    def header(h: dict[str, Any], area: bytes) -> None:
        m = cbor2.loads(h["manifest"])
        change(m)
        data = cbor.encode(m)
        h["manifest"], h["snapshot"], h["size"] = data, Digest.of(data).raw, len(data)
    edit(p / record_path(run, seq), header)
    (p / head_hint_path(run)).unlink(missing_ok=True)


def ledger_records(inline: bytes) -> list[Any]:
    """The records of a ledger's content (a CBOR sequence, format.md 6.1)."""
    dec, out = cbor2.CBORDecoder(io.BytesIO(inline)), []
    while dec.fp.tell() < len(inline):
        out.append(dec.decode())
    return out


def edit_ledger(change: Callable[[list[Any]], None]) -> Callable[[dict[str, Any]], None]:
    """A manifest edit: ``change`` edits the inline ledger's records; count, size and digest
    follow."""
    def manifest(m: dict[str, Any]) -> None:
        led = m["ledger"]
        recs = ledger_records(led["inline"])
        change(recs)
        data = b"".join(cbor.encode(r) for r in recs)
        led.update(inline=data, size=len(data), digest=Digest.of(data).raw, count=len(recs))
    return manifest


def nested(depth: int) -> Any:
    """An array ``depth`` levels deep (``[]`` is 1 deep)."""
    out: Any = []
    for _ in range(depth - 1):
        out = [out]
    return out


def _set_result(depth: int) -> Callable[[list[Any]], None]:
    def change(recs: list[Any]) -> None:
        (done,) = [r for r in recs if r["status"] == "completed"]
        done["result"] = nested(depth)
    return change


def _unknown_record_key(recs: list[Any]) -> None:
    for r in recs:
        r["x-note"] = {"by": "a later writer", "n": [1, 2]}


# -- stores --------------------------------------------------------------------------------------
def ledger_store(p: Path, new_store: Any) -> None:
    """Run r1: a checkpoint, then effect pay-1 returning 1 (intent at r1@2, result at r1@3)."""
    s, c = new_store(p)
    r = s.start_run("r1")
    r.checkpoint({"cart": ["book"]}, "start")
    c.tick()
    r.effect("pay", lambda: 1, key="pay-1")
    s.close()


def chunked_ledger_store(p: Path, new_store: Any) -> None:
    """Run r1: a checkpoint, then ten effects with 300-byte results: the last snapshot's
    ledger (21 records) is content past the inline limit, held as chunks."""
    s, c = new_store(p)
    r = s.start_run("r1")
    r.checkpoint({"n": 1}, "start")
    for i in range(10):
        c.tick()
        r.effect("note", lambda i=i: f"{i:03d}" * 100, key=f"note-{i}")
    s.close()


def schema_store(p: Path, new_store: Any) -> None:
    """One snapshot whose schema is ("format", 3): an application's version, not the store's."""
    s, _ = new_store(p)
    s.start_run("r1", schema=("format", 3)).checkpoint({"n": 1}, "start")
    s.close()


def _last_seq(p: Path, run: str) -> int:
    return max(int(f.name) for f in (p / "runs" / run).iterdir() if f.name.isdigit())


def _flip_ledger_body(p: Path) -> None:
    """Flip a byte inside a ledger chunk carried by the head record of r1."""
    f = p / record_path("r1", _last_seq(p, "r1"))
    c = ct.decode(f.read_bytes(), what="head")
    assert isinstance(c.header, ct.RecordHeader)
    m = cbor2.loads(c.header.manifest)
    ledger = {bytes(d) for d, _ in m["ledger"]["chunks"]}
    entries = {bytes(d) for e in m["entries"].values() for d, _ in e.get("chunks") or ()}
    (i,) = [i for i, b in enumerate(c.header.bodies)
            if b.digest.raw in ledger - entries][-1:]
    start, stored = body_at(f, i)
    flip(f, start + stored // 2)


# -- vectors -------------------------------------------------------------------------------------
def vectors(g: Any, new_store: Any, prng: Any, invalid_stores: Any, render_store: Any,
            now: int) -> None:
    """The reader vectors of this module (call inside gen_v2.layout_v2)."""
    def valid(name: str, desc: str, build: Callable[[Path], None],
              requires: list[str] = V2) -> None:
        d = g.store_dir("store-valid", P + name)
        build(d)
        g.vector("store-valid", P + name, desc, ["read", "{store}", str(now)],
                 {"output": render_store(str(d), now), "compare": "json"}, requires,
                 store=f"{P}{name}.store")

    def base(p: Path) -> None:
        gen_v2_stores.base(p, new_store, prng)

    tmp = g.out / "_spec32c"
    base(tmp)
    invalid_stores(g, tmp, {"entry-without-encoding": (
        "corrupt", "r2@1's value entry 'x' has no 'encoding' (REQUIRED for a value "
        "entry: format.md 6)", lambda p: edit_manifest(p, "r2", 1, lambda m: m["entries"][
            "x"].pop("encoding")))}, prefix=P, requires=V2)
    shutil.rmtree(tmp)

    def settings(p: Path) -> None:
        base(p)
        cfg = cbor2.loads((p / "ckptfs.cbor").read_bytes())
        cfg["settings"].update(default_ttl_ms=1, gc_grace_ms=1)
        (p / "ckptfs.cbor").write_bytes(cbor.encode(cfg))
    valid("settings-do-not-change-reading", "the config's settings give default_ttl_ms 1 and "
          "gc_grace_ms 1 after the snapshots were written: they bind writers and tools, not "
          "what existing snapshots read as (no snapshot expires by them; format.md 2)",
          settings)

    valid("schema-version-3", "a snapshot whose schema is ('format', 3): the application's "
          "schema version, never the store's format version (migrations.md 1)",
          lambda p: schema_store(p, new_store))

    def unknown_key(p: Path) -> None:
        ledger_store(p, new_store)
        for seq in (2, 3):
            edit_manifest(p, "r1", seq, edit_ledger(_unknown_record_key))
    valid("ledger-unknown-record-key", "every ledger record of r1 carries an unknown key "
          "'x-note': readers MUST ignore it (ledger.md 1)", unknown_key, LEDGER)

    def depth(n: int) -> Callable[[Path], None]:
        def build(p: Path) -> None:
            ledger_store(p, new_store)
            edit_manifest(p, "r1", 3, edit_ledger(_set_result(n)))
        return build
    valid("ledger-result-depth-254", "r1@3's completed record has a result 254 arrays deep "
          "(ledger array, record map and result: 256 levels, the limit; format.md 5.3)",
          depth(254), LEDGER)
    tmp = g.out / "_spec32c-ledger"
    ledger_store(tmp, new_store)
    invalid_stores(g, tmp, {"ledger-result-depth-255": (
        "corrupt", "r1@3's completed record has a result 255 arrays deep: 257 levels with the "
        "ledger array and the record map (a result MUST be at most 254 deep; format.md 5.3)",
        lambda p: edit_manifest(p, "r1", 3, edit_ledger(_set_result(255))))},
        prefix=P, requires=LEDGER)
    shutil.rmtree(tmp)

    tmp = g.out / "_spec32c-chunked"
    chunked_ledger_store(tmp, new_store)
    invalid_stores(g, tmp, {"ledger-chunk-flipped": (
        "corrupt", "a byte flipped inside a chunk of r1's ledger (the head's ledger is held "
        "as chunks): ledger chunks are verified like entry chunks (ledger.md 3)",
        _flip_ledger_body)}, prefix=P, requires=LEDGER)
    shutil.rmtree(tmp)


# -- writers (ckptfs_conformance/writer_rules_manifest.py) ---------------------------------------
def _start(run: str, t: int) -> dict[str, Any]:
    return {"op": "start", "run": run, "time": t, "schema": {"name": "agent", "version": 1}}


def _cp(run: str, t: int, state: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return {"op": "checkpoint", "run": run, "time": t, "state": state, **kw}


def writer_cases(t0: int, now: int) -> dict[str, tuple[str, list[str], list[str], dict[str, Any]]]:
    """name -> (description, rules checked, capabilities beyond writer-v2, case)."""
    owner = "ckptfs-conformance/owner-a"
    return {
        "schema-and-provenance": (
            "start, resume and fork, no migration: every manifest's schema is a map of exactly "
            "name and version, and none carries migrated_from (migrations.md 2, 4)",
            ["schema-map", "migrated-from"], [],
            {"steps": [_start("r", t0), _cp("r", t0 + 1000, {"n": {"value": 1}}),
                       {"op": "resume", "run": "r", "time": t0 + 2000},
                       _cp("r", t0 + 3000, {"n": {"value": 2}}),
                       {"op": "fork", "from": "r@1", "run": "f", "time": t0 + 4000},
                       _cp("f", t0 + 5000, {"n": {"value": 10}})]}),
        "ledger-append-only": (
            "effects completed, failed and in doubt, a resume, a settle and a fork: each "
            "snapshot's ledger starts with its parent's, byte for byte (ledger.md 1)",
            ["ledger-append-only"], ["ledger"],
            {"owner": owner, "steps": [
                _start("r", t0), _cp("r", t0 + 1000, {"cart": {"value": ["book"]}}),
                {"op": "effect", "run": "r", "time": t0 + 2000, "key": "pay-1", "name": "pay",
                 "outcome": {"result": {"ok": True}}},
                {"op": "effect", "run": "r", "time": t0 + 3000, "key": "pay-2", "name": "pay",
                 "outcome": {"error": {"type": "RuntimeError", "message": "declined"}}},
                {"op": "effect", "run": "r", "time": t0 + 4000, "key": "ship-1",
                 "name": "ship", "timeout": 1, "outcome": {"crash": True}},
                {"op": "resume", "run": "r", "time": t0 + 5000},
                {"op": "settle", "run": "r", "time": t0 + 6000, "key": "ship-1",
                 "outcome": {"result": "shipped"}},
                {"op": "fork", "from": "r@7", "run": "f", "time": t0 + 7000},
                _cp("f", t0 + 8000, {"cart": {"value": ["book", "pen"]}})]}),
        "typed-values-listed": (
            "a snapshot holding a typed value (a datetime) lists typed-values in its "
            "manifest's required; one without lists nothing (format.md 18)",
            ["typed-values-listed"], ["typed-values"],
            {"steps": [_start("r", t0), _cp("r", t0 + 1000, {"n": {"value": 1}}),
                       _cp("r", t0 + 2000, {"when": {"value": {"$typed": [
                           "datetime", {"wall": "1999-12-31T23:59:59", "offset": None}]}}})]}),
        "extension-keys": (
            "labels, entry labels and an expiry: read by a reader that ignores every key it "
            "does not know (the reference reader), the store holds what the case asked for; a "
            "writer that keeps any of it in an extension key fails (format.md 2, 7)",
            [], [],
            {"steps": [_start("r", t0), _cp("r", t0 + 1000, {"v": {"value": 1}},
                                            labels={"team": "a"}, expires=now + 10_000,
                                            entry_labels={"v": {"unit": "n"}})]}),
    }


def writer_vectors(g: Any, writer: str, now: int, t0: int) -> None:
    """The writer-rules/* vectors of this module (as gen_spec32.writer_vectors)."""
    from ckptfs_conformance.gen_spec32 import writer_rules_vector

    tmp = g.out / "_tmp32c"
    for name, (desc, rules, caps, case) in writer_cases(t0, now).items():
        writer_rules_vector(g, tmp, name, desc, rules, caps, dict(case, writer=writer), now)
    shutil.rmtree(tmp)


# -- refusals and seeded cases -------------------------------------------------------------------
def refusal_cases(t0: int) -> dict[str, tuple[str, list[str], list[str], dict[str, Any]]]:
    """Cases whose steps a writer MUST refuse (``"refused": true``: it commits nothing of the
    step, the case goes on): the expected store holds only what was accepted."""
    owner = "ckptfs-conformance/owner-a"
    return {
        "refusals": (
            "a label of 1025 characters, an entry name of 256 bytes and a value 257 deep are "
            "refused (nothing committed, format.md 1, 7, 5.3); a value exactly 256 deep, which "
            "a reader accepts, is committed",
            [], [],
            {"steps": [_start("r", t0), _cp("r", t0 + 1000, {"n": {"value": 1}}),
                       _cp("r", t0 + 2000, {"n": {"value": 2}}, labels={"k": "x" * 1025},
                           refused=True),
                       _cp("r", t0 + 3000, {"e" * 256: {"value": 3}}, refused=True),
                       _cp("r", t0 + 4000, {"d": {"value": nested(257)}}, refused=True),
                       _cp("r", t0 + 5000, {"d": {"value": nested(256)}})]}),
        "ledger-refusals": (
            "an effect whose result is 255 deep is refused when it returns (its intent stays "
            "in doubt; 254 deep is recorded); an effect in doubt after a resume is not "
            "performed again without reconciliation (ledger.md 1, 4)",
            [], ["ledger"],
            {"owner": owner, "steps": [
                _start("r", t0), _cp("r", t0 + 1000, {"n": {"value": 1}}),
                {"op": "effect", "run": "r", "time": t0 + 2000, "key": "deep-254",
                 "name": "deep", "outcome": {"result": nested(254)}},
                {"op": "effect", "run": "r", "time": t0 + 3000, "key": "deep-255",
                 "name": "deep", "outcome": {"result": nested(255)}, "refused": True},
                {"op": "effect", "run": "r", "time": t0 + 4000, "key": "ship-1",
                 "name": "ship", "timeout": 1, "outcome": {"crash": True}},
                {"op": "resume", "run": "r", "time": t0 + 5000},
                {"op": "effect", "run": "r", "time": t0 + 6000, "key": "ship-1",
                 "name": "ship", "outcome": {"result": "shipped again"}, "refused": True}]}),
    }


def _seed_config(p: Path, new_store: Any, prng: Any) -> None:
    s, _ = new_store(p)  # the generator's small chunker (64/256/1024)
    s.init()
    s.close()


def _seed_v1(p: Path, new_store: Any, prng: Any) -> None:
    from ckptfs_conformance.gen_spec32 import _v1_store

    _v1_store(p, new_store, prng)


def _seed_retired(p: Path, new_store: Any, prng: Any) -> None:
    from ckptfs.ops.retention import forget_snapshots

    s, c = new_store(p)
    s.start_run("r").checkpoint({"n": 1})
    forget_snapshots(s.repo, {"r": {1}}, now=c.tick())
    s.close()


def _seed_foreign(p: Path, new_store: Any, prng: Any) -> None:
    import ckptfs

    s, _ = new_store(p)
    s.start_run("o").checkpoint({"blob": ckptfs.Blob(prng("seed-foreign", 3000))})
    s.close()


def seeded_cases(t0: int, prng: Any) -> dict[str, tuple[str, list[str], list[str], Any,
                                                       dict[str, Any], bool]]:
    """name -> (description, rules, capabilities, seed builder, case, compare the config): a
    case carried out on a copy of the seed store (the vector's ``seed``)."""
    later = t0 + 10_000_000
    up_blob = prng("up-blob", 3000).hex()
    return {
        "existing-config": (
            "the store exists with a chunker of 64/256/1024 and the case asks for another: "
            "the writer uses the existing config, byte for byte (format.md 2)", [], [],
            _seed_config,
            {"chunker": {"min": 4096, "avg": 16384, "max": 65536, "normalization": 1},
             "steps": [_start("r", later), _cp("r", later + 1000, {
                 "blob": {"blob": prng("existing-config", 5000).hex()}})]}, True),
        "v1-store": (
            "a version 1 store (config version 1): a writer that implements spec/v2.md writes "
            "no container into it; it may refuse to write at all (ckptfs asks for an upgrade) "
            "(spec/v2.md 2)", ["no-containers"], [], _seed_v1,
            {"steps": [dict(_start("zz", later), refused="may"),
                       dict(_cp("zz", later + 1000, {"n": {"value": 1}}), refused="may")]},
            False),
        "retired-run-id": (
            "run r was forgotten whole (a retired marker): starting a new run r is refused; "
            "run s starts (retention.md 3)", [], ["lifecycle"], _seed_retired,
            {"steps": [dict(_start("r", later), refused=True), _start("s", later),
                       _cp("s", later + 1000, {"n": {"value": 1}})]}, False),
        "foreign-record": (
            "the store holds run o, whose record carries a blob; a new run commits the same "
            "blob: it carries it (or locates it in what it wrote), never in o's record, a "
            "container it merely saw (spec/v2.md 5.2)", ["locator-sources", "complete-locators"],
            [], _seed_foreign,
            {"steps": [_start("r", later), _cp("r", later + 1000, {
                "blob": {"blob": prng("seed-foreign", 3000).hex()}})]}, False),
        "upgraded-loose-chunk": (
            "an upgraded store holds the blob as version 1 loose chunks; a new run commits "
            "the same blob: each chunk is carried or located like any other (spec/v2.md 3.5)",
            ["complete-locators"], [],
            lambda p, new_store, prng: gen_v2_stores.upgraded(p, new_store, prng),
            {"steps": [_start("n", later), _cp("n", later + 1000, {
                "blob": {"blob": up_blob}})]}, False),
    }


def refusal_vectors(g: Any, new_store: Any, prng: Any, writer: str, now: int, t0: int) -> None:
    """The writer-rules vectors of ``refusal_cases`` and ``seeded_cases``."""
    from ckptfs_conformance.adapters.spec32_writer import write_v2
    from ckptfs_conformance.render import canonical_json, render_store, symbolic
    from ckptfs_conformance.writer_rules import check

    tmp = g.out / "_tmp32c"
    cases = {n: (d, r, c, None, case, False) for n, (d, r, c, case)
             in refusal_cases(t0).items()}
    cases.update(seeded_cases(t0, prng))
    for name, (desc, rules, caps, seed, case, config) in cases.items():
        case = dict(case, writer=writer)
        path = tmp / f"{name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(canonical_json(case))
        d = tmp / name
        extra: dict[str, Any] = {}
        if seed is not None:
            s = g.store_dir("writer-rules", name)
            seed(s, new_store, prng)
            shutil.copytree(s, d)
            extra["seed"] = f"{name}.store"
        write_v2(str(path), str(d))
        assert not check(d, rules, case), (name, check(d, rules, case))
        got = symbolic(render_store(str(d), now))
        want = None if any(s.get("refused") == "may" for s in case["steps"]) else {
            k: v for k, v in got.items() if k != "config" or config}
        g.vector("writer-rules", name, desc, ["write-v2", "{file:case}", "{out}"],
                 {"store": want, "now": now, "rules": rules}, ["writer-v2", *caps],
                 {"case": {"json": case}}, **extra)
    shutil.rmtree(tmp)
