"""Maintenance vectors (issue 32, ``spec32c``; capability ``maintenance``): an erase or a copy
carried out on a store, whose result the runner reads back with the reference reader, like a
writer case's (requests ``erase STORE NOW RUN REASON`` and ``copy SOURCE DEST NOW RUN``,
README "Maintenance"). What they pin: spec/retention.md 5 (erase touches only what is the
run's, and ignores names that are no object's) and 9 (a copy carries lifetimes, forgets and
erasures; a destination run of another history gets nothing of the source's; a corrupt source
record is not copied), spec/v2.md 10 (a source pack that breaks a rule is not written whole).

Stores are written by ckptfs at the generator's clock; the expectation is what ckptfs's own
erase and copy leave (ckptfs_conformance/adapters/ckptfs_adapter.py runs the same functions).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ckptfs
from ckptfs.errors import CkptfsError
from ckptfs.format.names import record_path
from ckptfs.ops.copy import copy_runs
from ckptfs.ops.erase import erase
from ckptfs.ops.expire import set_expiry
from ckptfs.ops.retention import forget_snapshots
from ckptfs_conformance.adapters.maintenance import do_copy, do_erase

MAINT = ["reader", "v2", "lifecycle", "maintenance"]
REASON = "user request"


# -- stores --------------------------------------------------------------------------------------
def _two_runs(p: Path, new_store: Any, prng: Any) -> Any:
    """Run r: two snapshots sharing a blob; run o: one snapshot."""
    s, c = new_store(p)
    r = s.start_run("r")
    blob = ckptfs.Blob(prng("maint-blob", 3000))
    r.checkpoint({"blob": blob, "n": 1})
    c.tick()
    r.checkpoint({"blob": blob, "n": 2})
    c.tick()
    s.start_run("o").checkpoint({"o": prng("maint-o", 1500).hex()})
    return s, c


def _forged(p: Path, new_store: Any, prng: Any) -> None:
    """As _two_runs, then r@3 is a copy of o's record (a misplaced record naming o@1)."""
    s, _ = _two_runs(p, new_store, prng)
    s.close()
    shutil.copyfile(p / record_path("o", 1), p / record_path("r", 3))


def _junk(p: Path, new_store: Any, prng: Any) -> None:
    """As _two_runs, with names that are no object's under snapshots/, chunks/ and packs/."""
    s, _ = _two_runs(p, new_store, prng)
    s.close()
    for top in ("snapshots", "chunks", "packs"):
        for name in (".DS_Store", "ab/.partial.Xq2b9Z", "zz/not-a-digest"):
            f = p / top / name
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_bytes(b"junk")


def _lifetimes(p: Path, new_store: Any, prng: Any) -> None:
    """Run r: three snapshots; r@1 forgotten, the run's expiry set, r@3's own expiry set."""
    s, c = _two_runs(p, new_store, prng)
    s.resume("r").checkpoint({"n": 3})
    forget_snapshots(s.repo, {"r": {1}}, now=c.tick())
    set_expiry(s.repo, "r", 1_900_000_000_000, now=c.tick())
    set_expiry(s.repo, "r@3", 1_850_000_000_000, now=c.tick())
    s.close()


def _copied(src: Path, dst: Path, now: int) -> None:
    """Copy run r into ``dst`` with reproducible record nonces (the vectors' bytes repeat)."""
    from ckptfs_conformance.gen_commit import reproducible_nonces

    s, d = ckptfs.open_store(str(src)), ckptfs.open_store(str(dst))
    d.repo.nonce = reproducible_nonces()
    copy_runs(s.repo, d.repo, runs=["r"], now=now, workers=1)
    s.close()
    d.close()


def _other_history(p: Path, new_store: Any, prng: Any) -> None:
    """A destination whose run r is its own: other snapshots at the same seqs."""
    s, c = new_store(p)
    r = s.start_run("r")
    r.checkpoint({"mine": 1})
    c.tick()
    r.checkpoint({"mine": 2})
    s.close()


def _corrupt_record(p: Path, new_store: Any, prng: Any) -> None:
    """As _two_runs, then r@2 carries a manifest of seq 3 (snapshot and size agree)."""
    from ckptfs_conformance.gen_spec32 import _manifest_other_seq
    from ckptfs_conformance.gen_v2_containers import edit

    s, _ = _two_runs(p, new_store, prng)
    s.close()
    edit(p / record_path("r", 2), _manifest_other_seq)


def _damaged_pack(p: Path, new_store: Any, prng: Any) -> None:
    """A store whose run r's blob is in packs; a byte of one pack's header digest flipped (its
    bodies intact: readers read it, spec/v2.md 3.4)."""
    from ckptfs_conformance import gen_v2_stores
    from ckptfs_conformance.gen_v2_containers import flip

    s, c = new_store(p)
    s.init(settings={"record_bulk_max": 2048, "pack_target": 4096})
    s.start_run("r").checkpoint({"blob": ckptfs.Blob(prng("maint-pack", 12000))})
    s.close()
    f = gen_v2_stores.packs(p)[0]
    hlen = int.from_bytes(f.read_bytes()[9:13], "big")
    flip(f, 13 + hlen + 5)


# -- vectors -------------------------------------------------------------------------------------
Build = Callable[[Path, Any, Any], None]


def vectors(g: Any, new_store: Any, prng: Any, render_store: Any, now: int) -> None:
    """Every maintenance vector (call inside gen_v2.layout_v2)."""
    from ckptfs_conformance.render import symbolic
    from ckptfs_conformance.writer_rules import check

    def vector(name: str, desc: str, argv: list[str], build: Build,
               dest: Build | Callable[[Path, Path], None] | None, rules: list[str],
               damaged: list[str] | None = None) -> None:
        src = g.store_dir("maintenance", name)
        build(src, new_store, prng)
        extra: dict[str, Any] = {"damaged": damaged} if damaged else {}
        work = g.out / "_maint" / name
        if argv[0] == "copy":
            extra["store"] = f"{name}.store"
            seed = g.out / "maintenance" / f"{name}-dest.store"
            if dest is not None:
                seed.mkdir(parents=True)
                if getattr(dest, "takes_source", False):
                    dest(src, seed)  # type: ignore[call-arg]
                else:
                    dest(seed, new_store, prng)  # type: ignore[call-arg]
                extra["seed"] = seed.name
                shutil.copytree(seed, work)
            else:
                work.mkdir(parents=True)
        else:
            extra["seed"] = f"{name}.store"
            shutil.copytree(src, work)
        try:
            if argv[0] == "copy":
                out = do_copy(str(src), str(work), int(argv[1]), argv[2])
            else:
                out = do_erase(str(work), int(argv[1]), argv[2], argv[3])
        except CkptfsError as e:
            out = f"error: {e.category}"
        if out.startswith("error: "):
            expect: dict[str, Any] = {"error": out[len("error: "):]}
        else:
            assert not check(work, rules, {"steps": []}), (name, check(work, rules, {"steps": []}))
            got = symbolic(render_store(str(work), now))
            expect = {"store": {k: v for k, v in got.items() if k != "config"}, "now": now,
                      "rules": rules}
        placeholder = ["{store}", "{out}"] if argv[0] == "copy" else ["{out}"]
        g.vector("maintenance", name, desc, [argv[0], *placeholder, *argv[1:]], expect,
                 MAINT, **extra)
        shutil.rmtree(g.out / "_maint")

    n = str(now)

    def copied_then(change: Callable[[Path], None]) -> Callable[[Path, Path], None]:
        def dest(src: Path, seed: Path) -> None:
            _copied(src, seed, now)
            change(src)
        setattr(dest, "takes_source", True)
        return dest

    vector("erase-forged-record", "r@3 is a copy of o's record (it names o@1's manifest): "
           "erasing r deletes that record but not o's manifest or chunks, and o@1's id is "
           "not in the tombstone (retention.md 5)", ["erase", n, "r", REASON], _forged, None, [])
    vector("erase-junk-names", "names under snapshots/, chunks/ and packs/ that are no "
           "object's (.DS_Store, an rsync partial, a name that is no digest) never stop an "
           "erase (retention.md 5)", ["erase", n, "r", REASON], _junk, None, [])
    vector("copy-lifetimes", "run r with r@1 forgotten, a run expiry and r@3's own expiry, "
           "copied into an empty store: the marker and both overrides come along, so nothing "
           "lives longer or comes back in the copy (retention.md 9)", ["copy", n, "r"],
           _lifetimes, None, [])
    vector("copy-other-history", "the destination's run r is its own (other snapshots at seqs "
           "1 and 2) and the source's r has expiry overrides: the copy writes nothing of r, "
           "no override either (retention.md 9 step 0)", ["copy", n, "r"], _lifetimes,
           _other_history, [])

    def shorter(src: Path) -> None:
        s = ckptfs.open_store(str(src))
        set_expiry(s.repo, "r@2", 1_750_000_000_000, now=now - 5)
        s.close()
    vector("copy-shorter-expiry", "r was copied before; then the source gave r@2 an earlier "
           "expiry: copying again gives r@2 that expiry in the destination, never a later one "
           "(retention.md 9 step 4)", ["copy", n, "r"],
           lambda p, ns, pr: _two_runs(p, ns, pr)[0].close(), copied_then(shorter), [])

    def erased(src: Path) -> None:
        s = ckptfs.open_store(str(src))
        erase(s.repo, "r", reason=REASON, now=now - 5)
        s.close()
    vector("copy-erased-held", "r was copied before; then r was erased in the source: the "
           "copy erases r in the destination too (retention.md 9 step 1)", ["copy", n, "r"],
           lambda p, ns, pr: _two_runs(p, ns, pr)[0].close(), copied_then(erased), [])

    def erased_src(p: Path, ns: Any, pr: Any) -> None:
        s, _ = _two_runs(p, ns, pr)
        erase(s.repo, "r", reason=REASON, now=now - 5)
        s.close()
    vector("copy-erased-fence", "r is erased in the source and the destination never held "
           "it: the copy writes a fence for r and the source's tombstone (retention.md 9 "
           "step 1)", ["copy", n, "r"], erased_src, None, [])
    def own_commit_then_erase(src: Path, seed: Path) -> None:
        _copied(src, seed, now)
        d, c = new_store(seed)
        c.tick(1_000_000)
        d.resume("r").checkpoint({"mine": 3})  # the destination's own r@3, on top
        d.close()
        s = ckptfs.open_store(str(src))
        erase(s.repo, "r", reason=REASON, seq=2, now=now - 5)
        s.close()
    setattr(own_commit_then_erase, "takes_source", True)
    vector("copy-erase-proven", "r was copied before, then the destination committed r@3 of "
           "its own, then the source erased r@2 alone: the destination's r@2 lies at a seq "
           "where the two agree (the tombstone lists its id), so it is erased there too; r@1 "
           "and the destination's own r@3 stay (retention.md 9 steps 0, 1)", ["copy", n, "r"],
           lambda p, ns, pr: _two_runs(p, ns, pr)[0].close(), own_commit_then_erase, [])
    def went_on_and_forgot(bad_ids: bool) -> Callable[[Path, Path], None]:
        def change(src: Path) -> None:
            s, c = new_store(src)
            c.tick(1_000_000)
            r = s.resume("r")
            r.checkpoint({"n": 3})
            c.tick()
            r.checkpoint({"n": 4})
            forget_snapshots(s.repo, {"r": {1, 2, 3}}, now=now - 5)
            s.close()
            if bad_ids:  # seq 1's id cut short: the list proves nothing, seq 2's neither
                from ckptfs.format import cbor

                (f,) = (src / "runs" / "r" / "retired").iterdir()
                m = cbor.decode(f.read_bytes(), what="marker")
                assert [p[0] for p in m["ids"]] == [1, 2, 3], m
                m["ids"][0][1] = m["ids"][0][1][:31]
                f.write_bytes(cbor.encode(m))
        return copied_then(change)
    two = lambda p, ns, pr: _two_runs(p, ns, pr)[0].close()  # noqa: E731
    vector("copy-forgot-past-head", "r was copied at seq 2; then the source committed r@3 and "
           "r@4 and forgot seqs 1-3 (keep-last 1). The source's marker lists the ids of what it "
           "forgot, which prove the destination's r@1 and r@2 the source's: r@4 is added (with "
           "a marker retiring the gap at 3) and r@1, r@2 stay (retention.md 3 ids, 9 step 0)",
           ["copy", n, "r"], two, went_on_and_forgot(False), [])
    vector("copy-forgot-past-head-bad-ids", "as copy-forgot-past-head, but the source marker's "
           "id of seq 1 is 31 bytes: its ids prove nothing (seq 2's neither), the marker is "
           "still read, and nothing shows the destination's r is the source's, so nothing of "
           "r is written (retention.md 3 ids, 9 step 0)",
           ["copy", n, "r"], two, went_on_and_forgot(True), [],
           damaged=[f"runs/r/retired/{3:020d}"])
    vector("copy-corrupt-record", "the source's r@2 carries a manifest of seq 3: it is not "
           "copied, and the copy of r stops with corrupt (retention.md 9 step 4)",
           ["copy", n, "r"], _corrupt_record, None, [])
    vector("copy-damaged-pack", "a source pack whose header digest is damaged (its bodies "
           "intact): the copy does not write it under its name; the bodies r needs are read, "
           "verified and packed anew (spec/v2.md 3.4, 10)", ["copy", n, "r"], _damaged_pack,
           None, ["packs-complete"])


def gc_vectors(g: Any, new_store: Any, prng: Any) -> None:
    """``gc/v2-gc-named-without-feature``: a store whose config does not require
    complete-locators: no rule lets gc delete a container unread (spec/v2.md 9.2)."""
    import json

    import cbor2

    from ckptfs.format import cbor
    from ckptfs_conformance import gen_locators
    from ckptfs_conformance.adapters.ckptfs_adapter import handle

    name = "v2-gc-named-without-feature"
    d = g.store_dir("gc", name)
    getattr(gen_locators, "_stray_named")(d, new_store, prng)
    cfg = cbor2.loads((d / "ckptfs.cbor").read_bytes())
    cfg["required"] = [r for r in cfg["required"] if r != "complete-locators"]
    (d / "ckptfs.cbor").write_bytes(cbor.encode(cfg))
    got = json.loads(handle(["gc-named", str(d)]))
    assert len(got) > 2, got
    g.vector("gc", name, "The strays r@1 and o@1 and the pack of run big, in a store whose "
             "config does not require complete-locators: gc MUST NOT use the rule of 9.2, so "
             "it reads and judges every old stray and pack, named or not (spec/v2.md 9.2)",
             ["gc-named", "{store}"], {"output": got, "compare": "json"},
             ["reader", "v2", "gc", "lifecycle"], store=f"{name}.store")
