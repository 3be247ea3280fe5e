"""Vectors of complete locators (spec/v2.md 2, 3.5, 5.2, 6, 9.2; feature ``complete-locators``).

- ``store-valid/v2-locator-into-stray``: a visible record carries nothing of a chunk and
  locates it in a stray record (forgotten, kept because it is named): a reader MUST read the
  body there (6 step 2; the stray is invisible as a snapshot, not as a container).
- ``gc/v2-gc-named-*`` (request ``gc-named STORE``, capability ``gc``): the old stray records
  and packs a collection under the complete-locators rule MUST read and judge instead of
  deleting unread (9.2): those a visible record's locators name, and those a forward of a
  named container points into. An implementation whose gc forgets either would delete a
  container a snapshot needs. ``v2-gc-named-junk-ignored``: the same with files that are no
  pack and no forward beside them, which gc MUST ignore (an implementation that parses every
  name it lists fails there, as ckptfs did before issue 30).

Stores are written by ckptfs with the generator's fixed clock (``ckptfs_conformance.generate``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

import ckptfs
from ckptfs.format.models import COMPLETE_LOCATORS
from ckptfs.format.names import forward_path, record_path
from ckptfs.ops.gc import gc
from ckptfs.ops.gc_locators import named_containers
from ckptfs.ops.retention import forget_snapshots

V2 = ["reader", "v2"]
GC = ["reader", "v2", "gc"]


def _stray_named(p: Path, new_store: Any, prng: Any) -> None:
    """r@1 carries X; r@2 locates X in r@1; r@1 is forgotten (a stray nothing deleted yet).
    Run o: o@1 carries Y, forgotten, named by nothing; a pack named by nothing (run big,
    forgotten)."""
    s, c = new_store(p)
    s.init(settings={"record_bulk_max": 4096, "pack_target": 8192})  # the blob: in packs
    r = s.start_run("r")
    x = prng("loc-x", 1500).hex()
    r.checkpoint({"x": x, "i": 1})
    c.tick()
    r.checkpoint({"x": x, "i": 2})
    o = s.start_run("o")
    o.checkpoint({"y": prng("loc-y", 1500).hex()})
    c.tick()
    o.checkpoint({"n": 2})
    big = s.start_run("big")
    big.checkpoint({"blob": ckptfs.Blob(prng("loc-big", 12_000))})
    c.tick()
    big.checkpoint({"n": 2})
    forget_snapshots(s.repo, {"r": {1}, "o": {1}, "big": {1}}, now=c.tick())
    assert COMPLETE_LOCATORS in s.repo.config.required
    assert list((p / "packs").rglob("*"))
    s.close()


def _forwarded(p: Path, new_store: Any, prng: Any) -> None:
    """As ``_stray_named``, then a gc repacked r@1 (the forward moved/runs/r/<1> names the
    new pack) and deleted o@1 and the unnamed pack unread; then r@2's run goes on."""
    _stray_named(p, new_store, prng)
    s, c = new_store(p)
    gc(s.repo, grace_ms=0, now=int(time.time() * 1000) + 3_600_000)
    assert not (p / record_path("r", 1)).exists()
    assert (p / forward_path(record_path("r", 1))).exists()
    assert not (p / record_path("o", 1)).exists()
    s.close()


#: files other tools leave in a store (spec/v2.md 2, "Names that are not objects"); none is a
#: pack or a forward, so none may change what gc-named answers
JUNK = [".DS_Store", "name~", ".x.swp", ".00000000000000000001.Xq2b9Z", "ab12"]


def _forwarded_with_junk(p: Path, new_store: Any, prng: Any) -> None:
    """As ``_forwarded``, then junk names dropped in every folder of ``packs/`` and ``moved/``
    (a Finder ``.DS_Store``, an editor's swap and backup files, an rsync partial, a name too
    short for a digest)."""
    _forwarded(p, new_store, prng)
    folders = [p / "packs", p / "moved", p / "moved" / "runs", p / "moved" / "runs" / "r",
               *sorted((p / "packs").iterdir())]
    for folder in folders:
        for name in JUNK:
            (folder / name).write_bytes(b"\x00\x00\x00\x01Bud1 not an object")


def _pack_and_fork(p: Path, new_store: Any, prng: Any) -> None:
    """A pack a visible record locates (run big keeps its blob at big@2), and a stray of run r
    named only by the locator of a fork in another run (f@1 forked from r@1, then r@1
    forgotten)."""
    s, c = new_store(p)
    s.init(settings={"record_bulk_max": 4096, "pack_target": 8192})
    big = s.start_run("big")
    blob = prng("loc-pack", 12_000)
    big.checkpoint({"blob": ckptfs.Blob(blob), "n": 1})
    c.tick()
    big.checkpoint({"blob": ckptfs.Blob(blob), "n": 2})
    r = s.start_run("r")
    r.checkpoint({"x": prng("loc-fork", 1500).hex(), "i": 1})
    c.tick()
    r.checkpoint({"i": 2})
    f = s.fork("r@1", "f")
    f.checkpoint({**f.state, "i": 10})
    forget_snapshots(s.repo, {"r": {1}, "big": {1}}, now=c.tick())
    s.close()


def vectors(g: Any, new_store: Any, prng: Any, render_store: Callable[[str, int], Any],
            now: int) -> None:
    d = g.store_dir("store-valid", "v2-locator-into-stray")
    _stray_named(d, new_store, prng)
    g.vector("store-valid", "v2-locator-into-stray",
             "r@2 carries nothing of its chunk x and locates it in r@1, a stray record (r@1 is "
             "in a retired range: no snapshot, but a container its locators name). A reader "
             "MUST read the body there (spec/v2.md 3.5, 6 step 2; 9.2 keeps such a stray)",
             ["read", "{store}", str(now)],
             {"output": render_store(str(d), now), "compare": "json"}, V2 + ["lifecycle"],
             store="v2-locator-into-stray.store")
    cases = {
        "v2-gc-named-by-locator": (
            _stray_named, "Strays r@1 (named by r@2's locator), o@1 and a pack of run big "
            "(named by nothing): under complete locators gc MUST read and judge r@1 and MAY "
            "delete the other two unread (spec/v2.md 9.2)"),
        "v2-gc-named-through-forward": (
            _forwarded, "After a gc repacked r@1 (its forward names a new pack) and deleted "
            "what nothing named: the new pack is named through the forward of r@1, which "
            "r@2's locator names (spec/v2.md 8, 9.2)"),
        "v2-gc-named-pack-and-fork": (
            _pack_and_fork, "A pack the visible big@2 locates (its blob) and the stray r@1, "
            "named only by the locator of f@1, a fork of it in another run: both MUST be "
            "read and judged (spec/v2.md 9.2)"),
        "v2-gc-named-junk-ignored": (
            _forwarded_with_junk, "As v2-gc-named-through-forward, with files that are no "
            "pack and no forward (.DS_Store, name~, .x.swp, an rsync partial, a name too short "
            "for a digest) in packs/, each packs/<xx>/ and moved/: they MUST be ignored, so the "
            "answer is the same (spec/v2.md 2, format.md 3.1)"),
    }
    answers: dict[str, list[str]] = {}
    for name, (build, desc) in cases.items():
        d = g.store_dir("gc", name)
        build(d, new_store, prng)
        repo = ckptfs.open_store(str(d)).repo
        got = named_containers(repo)
        assert got, name
        if name == "v2-gc-named-junk-ignored":  # the junk changes nothing
            assert got == answers["v2-gc-named-through-forward"], got
        answers[name] = got
        g.vector("gc", name, desc, ["gc-named", "{store}"],
                 {"output": json.loads(json.dumps(got)), "compare": "json"},
                 GC + ["lifecycle"], store=f"{name}.store")
