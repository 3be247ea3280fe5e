"""The writer cases (README "Writer cases"): what a writer is asked to do, step by step, and
the vectors made of them: ckptfs's adapter carries each case out into a format version 2 store,
which becomes the expectation (read back, and ``-exact`` byte for byte)."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from typing import Any

from ckptfs.format.digest import Digest
from ckptfs_conformance.generate import NOW, SMALL_CBOR, T0, WRITER, Gen, prng
from ckptfs_conformance.render import canonical_json, render_store, symbolic, tagged

#: the owner the effect intents of the ledger cases name (spec/ledger.md 4.1)
OWNER = "ckptfs-conformance/owner-a"
DAY = 24 * 3_600_000


@contextlib.contextmanager
def fixed_owner() -> Iterator[None]:
    """Within the block, this process's effect intents name ``OWNER`` (the vectors are
    reproducible); its own owner name comes back after it. Left set, a generator run inside
    a test process made every later effect there name a foreign owner (found by
    tests/test_effects_owner_gone.py on the same pytest-xdist worker)."""
    from ckptfs.runtime.effects import process_owner, set_process_owner

    before = process_owner()
    set_process_owner(OWNER)
    try:
        yield
    finally:
        set_process_owner(before)


def _v(value: Any) -> dict[str, Any]:
    return {"value": tagged(value)}


def _cp(run: str, t: int, state: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return {"op": "checkpoint", "run": run, "time": t, "state": state, **kw}


WRITER_CASES: dict[str, tuple[str, bool, list[str], dict[str, Any]]] = {
    "values": ("one snapshot of every value type", True, ["writer"], {"steps": [
        {"op": "start", "run": "r1", "time": T0, "schema": {"name": "agent", "version": 2}},
        _cp("r1", T0 + 1, {"int": _v(-5), "big": _v(1 << 65), "f": _v(0.5), "s": _v("s\u00e9"),
                           "b": _v(b"\x00"), "m": _v({"z": None, "$a": [True, False]}),
                           "l": _v([1, 2, 3])}, boundary="start")]}),
    "chunked": ("a chunked blob and a chunked value with the store's chunker", True, ["writer"],
                {"chunker": SMALL_CBOR, "steps": [
                    {"op": "start", "run": "r1", "time": T0, "schema": {"name": "s", "version": 1}},
                    _cp("r1", T0 + 1, {"blob": {"blob": prng("w-blob", 7000).hex(),
                                                "type": "application/pdf"},
                                       "text": _v(prng("w-text", 3000).hex())})]}),
    "list-append": ("a list appended to over checkpoints (chunk layout is the writer's "
                    "choice)", False, ["writer"], {"chunker": SMALL_CBOR, "steps": [
                        {"op": "start", "run": "r1", "time": T0,
                         "schema": {"name": "s", "version": 1}}] + [
                        _cp("r1", T0 + i, {"msgs": _v([prng(f"m{j}", 200).hex()
                                                       for j in range(i + 1)])})
                        for i in range(1, 5)]}),
    "resume-fork": ("resume twice and fork", True, ["writer"], {"steps": [
        {"op": "start", "run": "r1", "time": T0, "schema": {"name": "s", "version": 1}},
        _cp("r1", T0 + 1, {"n": _v(1)}, boundary="start"),
        _cp("r1", T0 + 2, {"n": _v(2)}),
        {"op": "resume", "run": "r1", "time": T0 + 3},
        _cp("r1", T0 + 4, {"n": _v(3)}),
        {"op": "resume", "run": "r1", "time": T0 + 5},
        _cp("r1", T0 + 6, {"n": _v(4)}, boundary="final"),
        {"op": "fork", "from": "r1@2", "run": "r2", "time": T0 + 7},
        _cp("r2", T0 + 8, {"n": _v(20)})]}),
    "refs-labels-expiry": ("references, labels and expiry", True, ["writer"], {"steps": [
        {"op": "start", "run": "r1", "time": T0, "schema": {"name": "s", "version": 1}},
        _cp("r1", T0 + 1, {"ref": {"ref": {"uri": "s3://b/k", "digest": Digest.of(b"k").text,
                                           "size": 1, "expires": T0 + 5000}},
                           "bare": {"ref": {"uri": "https://example.invalid/x"}},
                           "v": _v(1)}, labels={"team": "a"}, expires=NOW + 10000,
            entry_labels={"v": {"unit": "n"}})]}),
    "multi-run-shared": ("two runs sharing content", True, ["writer"], {"chunker": SMALL_CBOR,
                         "steps": [
        {"op": "start", "run": "a", "time": T0, "schema": {"name": "s", "version": 1}},
        {"op": "start", "run": "b", "time": T0, "schema": {"name": "s", "version": 1}},
        _cp("a", T0 + 1, {"blob": {"blob": prng("shared-w", 5000).hex()}}),
        _cp("b", T0 + 2, {"blob": {"blob": prng("shared-w", 5000).hex()}, "x": _v(1)})]}),
    "ledger": ("effects completed, failed and in doubt, resumed and settled", True,
               ["writer", "ledger"], {"owner": "ckptfs-conformance/owner-a", "steps": [
        {"op": "start", "run": "r1", "time": T0, "schema": {"name": "s", "version": 1}},
        _cp("r1", T0 + 1, {"cart": _v(["book"])}, boundary="start"),
        {"op": "effect", "run": "r1", "time": T0 + 2, "key": "pay-1", "name": "pay",
         "args": tagged([10]), "kwargs": tagged({"currency": "EUR"}),
         "outcome": {"result": tagged({"ok": True})}},
        {"op": "effect", "run": "r1", "time": T0 + 3, "key": "pay-2", "name": "pay",
         "args": tagged([20]), "outcome": {"error": {"type": "RuntimeError",
                                                     "message": "declined"}}},
        {"op": "effect", "run": "r1", "time": T0 + 4, "key": "ship-1", "name": "ship",
         "timeout": 1, "outcome": {"crash": True}},
        {"op": "resume", "run": "r1", "time": T0 + 5},
        {"op": "settle", "run": "r1", "time": T0 + 6, "key": "ship-1",
         "outcome": {"result": tagged("shipped")}}]}),
    "default-ttl": ("the store's default_ttl_ms gives each snapshot created + TTL unless it asks "
                    "for an expiry (retention.md 2)", True, ["writer", "lifecycle"], {
        "settings": {"default_ttl_ms": 3_600_000}, "steps": [
            {"op": "start", "run": "r1", "time": T0, "schema": {"name": "s", "version": 1}},
            _cp("r1", T0 + 1, {"n": _v(1)}),
            _cp("r1", T0 + 2, {"n": _v(2)}, expires=NOW + 5),
            _cp("r1", NOW - 1_000_000, {"n": _v(3)})]}),
}


def writer_vectors(g: Gen) -> None:
    """Carry out every case with ckptfs's adapter; the store it writes is the expectation."""
    from ckptfs_conformance.adapters.case_writer import write_case

    tmp = g.out / "_tmp"
    for name, (desc, exact, requires, case) in {**WRITER_CASES, **LEASE_CASES,
                                                **LIST_APPEND_CASES}.items():
        case = dict(case, writer=WRITER)
        case_path = tmp / f"{name}.json"
        case_path.parent.mkdir(parents=True, exist_ok=True)
        case_path.write_text(canonical_json(case))
        d = g.store_dir("writer", name)
        write_case(str(case_path), str(d))
        expected = symbolic(render_store(str(d), NOW))
        files = {"case": {"json": case}}
        g.vector("writer", name, desc, ["write", "{file:case}", "{out}"],
                 {"store": expected, "now": NOW}, requires, files)
        if exact:
            g.vector("writer", f"{name}-exact", f"{desc}: the same objects, byte for byte "
                     "(reference writer profile)", ["write", "{file:case}", "{out}"],
                     {"store": expected, "now": NOW, "exact": f"{name}.store"},
                     requires + ["writer-exact"], files)
        else:
            shutil.rmtree(d)
    shutil.rmtree(tmp)


#: the writer case: leases with the owner and timeouts the case names (README "Writer cases")
LEASE_CASES: dict[str, Any] = {"ledger-lease": ("effects under leases: a completed call, a call that died with its lease "
               "running at NOW, and one whose lease ran out, reconciled and re-issued", True,
               ["writer", "ledger"], {"owner": OWNER, "steps": [
                   {"op": "start", "run": "r1", "time": T0,
                    "schema": {"name": "s", "version": 1}},
                   _cp("r1", T0 + 1, {"cart": _v(["book"])}, boundary="start"),
                   {"op": "effect", "run": "r1", "time": T0 + 2, "key": "pay-1",
                    "name": "pay", "timeout": 30_000, "outcome": {"result": 1}},
                   {"op": "effect", "run": "r1", "time": T0 + 3, "key": "ship-1",
                    "name": "ship", "timeout": 1000, "outcome": {"crash": True}},
                   {"op": "resume", "run": "r1", "time": T0 + 5000},
                   {"op": "effect", "run": "r1", "time": T0 + 5001, "key": "ship-1",
                    "name": "ship", "timeout": 1000, "reconcile": "not-done",
                    "outcome": {"result": "shipped"}},
                   {"op": "effect", "run": "r1", "time": NOW - 1000, "key": "mail-1",
                    "name": "mail", "timeout": 2 * DAY, "outcome": {"crash": True}}]})}


# -- format.md 10 "Appending to a list" (issue 16) ----------------------------------------
def _list_append_case() -> dict[str, Any]:
    """A list of 14 items (chunked), then 36 commits each appending one 9-byte item (every 16
    such pieces merge into one), resumed in the middle (the resumed writer derives the sealed
    chunks from the list), then one append of three large items (cut as fresh content)."""
    steps: list[dict[str, Any]] = [{"op": "start", "run": "r1", "time": T0,
                                    "schema": {"name": "s", "version": 1}}]
    items = [prng(f"item{j}", 75).hex() for j in range(14)]
    for i in range(38):
        if i == 20:
            steps.append({"op": "resume", "run": "r1", "time": T0 + 99})
        if 1 <= i <= 36:
            items.append(prng(f"tiny{i}", 4).hex())
        elif i == 37:
            items += [prng(f"large{k}", 75).hex() for k in range(3)]
        steps.append(_cp("r1", T0 + 100 + i, {"log": _v(list(items))}))
    return {"chunker": SMALL_CBOR, "steps": steps}


def _list_append_labels_case() -> dict[str, Any]:
    """14 items (chunked), then 24 commits each appending one 9-byte item; commit 12 changes
    only the labels (the snapshot's and the entry's), not the list."""
    steps: list[dict[str, Any]] = [{"op": "start", "run": "r1", "time": T0,
                                    "schema": {"name": "s", "version": 1}}]
    items = [prng(f"item{j}", 75).hex() for j in range(14)]
    for i in range(26):
        kw: dict[str, Any] = {}
        if i == 12:
            kw = {"labels": {"phase": "review"}, "entry_labels": {"log": {"note": "checked"}}}
        elif 1 <= i:
            items.append(prng(f"tiny{i}", 4).hex())
        steps.append(_cp("r1", T0 + 100 + i, {"log": _v(list(items))}, **kw))
    return {"chunker": SMALL_CBOR, "steps": steps}


def _ledger_append_case() -> dict[str, Any]:
    """18 effects, each appending two records to the ledger: past the inline threshold after
    about 7 (cut fresh), then one piece per commit, 21 of them (the merge rule meets 16
    trailing pieces whose sizes add up to more than ``max``). Kept short: every snapshot's
    rendering holds its whole ledger."""
    steps: list[dict[str, Any]] = [{"op": "start", "run": "r1", "time": T0,
                                    "schema": {"name": "s", "version": 1}},
                                   _cp("r1", T0 + 1, {"n": _v(0)}, boundary="start")]
    for i in range(18):
        steps.append({"op": "effect", "run": "r1", "time": T0 + 10 + i, "key": f"k-{i}",
                      "name": "tool", "timeout": 30_000, "outcome": {"result": i}})
    return {"chunker": SMALL_CBOR, "owner": OWNER, "steps": steps}


LIST_APPEND_CASES: dict[str, tuple[str, bool, list[str], dict[str, Any]]] = {
    "list-append-tiered": ("format.md 10 'Appending to a list': a list grown by one small item "
                           "per commit (pieces merge by 16), resumed in the middle, then by "
                           "three large items; the -exact variant pins the chunk lists of the "
                           "reference profile", True, ["writer"],
                           _list_append_case()),
    # issue 32, gap 26: a labels-only commit keeps the entry (and its sealed count); the
    # ledger, a cbor-seq that only grows, follows the same profile
    "list-append-labels": ("format.md 10: a list grown by one small item per commit, with a "
                           "commit in the middle that changes only the snapshot's labels and "
                           "the entry's labels (the content, its chunk list and the sealed "
                           "count stay as they were)", True, ["writer"],
                           _list_append_labels_case()),
    "list-append-ledger": ("format.md 10: the ledger, a cbor-seq that only grows, follows the "
                           "same appending profile as a list value", True,
                           ["writer", "ledger"], _ledger_append_case()),
}
