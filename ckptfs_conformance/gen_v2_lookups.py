"""The version 2 lookup vectors (``lookup/v2-*``): snapshots found by id, hex prefix and run
head (spec/v2.md 4, 7), through lying head hints, and in a run a repair mended (format.md 8.4).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import blake3

import ckptfs
from ckptfs.errors import CkptfsError
from ckptfs.format.digest import Digest
from ckptfs_conformance.gen_v2_containers import flip
from ckptfs_conformance.gen_v2_stores import P, V2, base, hints, snap_id


def lookups(g: Any, new_store: Any, prng: Any, now: int, t0: int) -> None:
    """Lookups by id, hex prefix and run head in version 2 stores (spec/v2.md 4, 7)."""
    from ckptfs_conformance.render import render_ref

    d = g.store_dir("lookup", P + "store")
    base(d, new_store, prng)
    ids = {f"r1-{n}": Digest(snap_id(d, "r1", n)) for n in (1, 2)}
    ids["r2-1"] = Digest(snap_id(d, "r2", 1))
    ambiguous(d, new_store, ids)
    amb = ids["amb-1"].hex[:6]
    ok = {"by-id": (ids["r1-1"].text, "an id that is not a head: found by reading record "
                    "headers (no manifest objects in a v2 store)"),
          "by-id-head": (ids["r1-2"].text, "the id of a head"),
          "by-prefix": (ids["r1-1"].hex[:10], "a hex prefix of 10 digits"),
          "by-prefix-6": (ids["r2-1"].hex[:6], "a hex prefix of 6 digits (the shortest)"),
          "by-prefix-longer-than-ambiguity": (ids["amb-1"].hex[:12], "a prefix that is unique "
                                               "although its first 6 digits are not"),
          "run-head": ("r1", "the head of r1"), "run-seq": ("r1@1", "r1@1")}
    for name, (ref, desc) in ok.items():
        g.vector("lookup", P + name, desc, ["snapshot", "{store}", str(now), ref],
                 {"output": render_ref(str(d), ref, now), "compare": "json"}, V2,
                 store=f"{P}store.store")
    bad = {"by-prefix-ambiguous": (amb, "not-found", "a 6-digit prefix two snapshot ids share "
                                   "(spec/v2.md 7: an ambiguity the reader reports)"),
           "absent-id": (Digest.of(b"nothing").text, "not-found", "no record has this id"),
           "absent-prefix": (absent_prefix(ids), "not-found", "a prefix no id has")}
    for name, (ref, cat, desc) in bad.items():
        try:
            render_ref(str(d), ref, now)
            raise AssertionError(f"{ref}: ckptfs accepts it")
        except CkptfsError as e:
            assert e.category == cat, (ref, e.category)
        g.vector("lookup", P + name, desc, ["snapshot", "{store}", str(now), ref],
                 {"error": cat}, V2, store=f"{P}store.store")
    _repaired_lookups(g, new_store, prng, now)
    h = g.store_dir("lookup", P + "hints")
    beyond = hints(h, new_store, prng, t0)
    hint_desc = {"stale": "hint at seq 1, head 3", "ahead": "hint at seq 9 (absent), head 2",
                 "torn": "hint cut short", "garbage": "hint of random bytes",
                 "other": "hint that names another run", "forgot": "hint at seq 3, a stray "
                 "record in a retired range (a withdrawn commit), head 2"}
    for run, text in hint_desc.items():
        g.vector("lookup", f"{P}hint-{run}", f"the head of run {run!r}: {text} (spec/v2.md 4)",
                 ["snapshot", "{store}", str(now), run],
                 {"output": render_ref(str(h), run, now), "compare": "json"},
                 V2 + ["lifecycle"] if run == "forgot" else V2, store=f"{P}hints.store",
                 beyond_cddl=beyond)


def _repaired_lookups(g: Any, new_store: Any, prng: Any, now: int) -> None:
    """A run whose head r@3 was damaged (a byte of its header flipped) and then repaired:
    r@4 holds r@2's content again and names r@3 in its ``repair`` key (format.md 8.4)."""
    from ckptfs.ops.repair import repair_run
    from ckptfs_conformance.render import render_ref

    d = g.store_dir("lookup", P + "repaired")
    s, c = new_store(d)
    r = s.start_run("r")
    for i in range(1, 4):
        r.checkpoint({"n": i, "doc": ckptfs.Blob(prng(f"v2-repair{i}", 3000))}, f"step{i}")
        c.tick()
    flip(d / "runs" / "r" / f"{3:020d}", 12)
    repair_run(s.repo, "r", writer=s.writer_name, now=c.tick())
    s.close()
    for name, ref, desc in (
            ("repaired-head", "r", "the head of a repaired run: r@4, the repair record, whose "
             "manifest holds r@2's entries, parent r@2 and the extension key repair = "
             "{damaged: [3], from: 2} (format.md 8.4)"),
            ("repaired-good", "r@2", "the last good snapshot a repair committed again")):
        g.vector("lookup", P + name, desc, ["snapshot", "{store}", str(now), ref],
                 {"output": render_ref(str(d), ref, now), "compare": "json"}, V2,
                 store=f"{P}repaired.store", damaged=[f"runs/r/{3:020d}"])
    try:
        render_ref(str(d), "r@3", now)
        raise AssertionError("r@3: ckptfs accepts it")
    except CkptfsError as e:
        assert e.category == "corrupt", e
    g.vector("lookup", P + "repaired-set-aside", "the damaged record a repair set aside stays "
             "in place and stays damaged (format.md 8.4: nothing is deleted)",
             ["snapshot", "{store}", str(now), "r@3"], {"error": "corrupt"}, V2,
             store=f"{P}repaired.store", damaged=[f"runs/r/{3:020d}"])


def absent_prefix(ids: dict[str, Digest]) -> str:
    n = 0
    while any(d.hex.startswith(f"{n:06x}") for d in ids.values()):
        n += 1
    return f"{n:06x}"


def ambiguous(d: Path, new_store: Any, ids: dict[str, Digest]) -> None:
    """Commit run 'amb' with a salt label chosen (deterministic search) so that its id shares
    its first 6 hex digits with one of ``ids``."""
    from ckptfs.format.models import Manifest

    s, c = new_store(d)
    c.tick(100_000)
    r = s.start_run("amb")
    targets = {x.raw[:3] for x in ids.values()}
    seen: dict[str, Any] = {}
    # the bytes of the manifest with salt 00000000 (then committed for real below), as the
    # probe's record carries them
    r2 = s.start_run("amb-probe")
    r2.checkpoint({"k": 1}, labels={"salt": "00000000"})
    seen["data"] = s.repo.record("amb-probe", 1).manifest
    shutil.rmtree(d / "runs" / "amb-probe")
    template = seen["data"].replace(b"\x69amb-probe", b"\x63amb")
    at = template.index(b"00000000")
    n = 0
    while True:
        salt = f"{n:08d}".encode()
        if blake3.blake3(template[:at] + salt + template[at + 8:]).digest()[:3] in targets:
            break
        n += 1
    snap = r.checkpoint({"k": 1}, labels={"salt": salt.decode()})
    s.close()
    ids["amb-1"] = snap.digest
    assert snap.digest.raw[:3] in targets, "the salt search and the commit disagree"
