"""The exact path's fast proof (issue 14, step14c): ``run.checkpoint(state)`` of a grown list
takes the list for plain data, and its committed items for unchanged, from one strict msgpack
encoding (ckptfs.format.fast_plain) instead of a Python walk and cbor2. A stale or wrong proof
would store bytes that differ from what the caller holds, or accept a value that must be
refused: every step of a random history (appends, edits made in place, values that look alike
in msgpack: bytes vs bytearray/memoryview, an ``ormsgpack.Ext`` forging a wrapped item, int vs
float vs bool, key order, tuples, big integers, typed values, deep nesting) is committed on one
run and, fresh, on a new run of another store; both must store the same entry (digest) or
refuse alike.
"""

from __future__ import annotations

import copy
import datetime
import random
from typing import Any

import cbor2
import pytest

import ckptfs
import ckptfs.errors
from ckptfs.format import fast_plain

pytestmark = pytest.mark.skipif(not fast_plain.AVAILABLE, reason="ormsgpack is not installed")

import ormsgpack  # noqa: E402


class Sub(str):
    pass


def _item(rng: random.Random, i: int, with_bytes: bool) -> dict[str, Any]:
    it: dict[str, Any] = {"id": f"m{i}", "t": rng.choice(["a", "bb", "ccc"]) * rng.randint(1, 40),
                          "n": rng.choice([0, 1, 7, 255, 2 ** 40, -3]), "f": rng.choice([0.0, 1.5]),
                          "b": rng.choice([True, False, None]),
                          "l": [rng.randint(0, 9) for _ in range(rng.randint(0, 3))]}
    if with_bytes and rng.random() < 0.3:
        it["raw"] = rng.randbytes(rng.randint(0, 5))
    return it


def _deep(n: int) -> Any:
    v: Any = 1
    for _ in range(n):
        v = [v]
    return v


OPS = ["append"] * 6 + ["ext_new", "bytearray_new", "edit", "int_float", "bool_int", "reorder", "tuple", "sub", "bytearray",
                        "memoryview", "ext", "ext_wrap", "bigint", "negbig", "datetime",
                        "deep_ok", "deep_bad", "copy", "same", "truncate", "deepcopy", "nan",
                        "negzero", "bytes", "bytes_item"]


IMPURE = {"tuple", "ext_wrap", "bigint", "negbig", "datetime", "bytes", "bytes_item"}


def _outcome(run: Any, state: dict[str, Any]) -> tuple[str, Any]:
    try:
        snap = run.checkpoint(state)
    except Exception as e:  # noqa: BLE001 - compared with the fresh run's
        return "refused", type(e).__name__
    return "stored", snap.manifest.entries["messages"].digest


@pytest.mark.parametrize("seed", range(6))
def test_fast_proof_stores_what_a_fresh_encoding_stores(tmp_path: Any, seed: int) -> None:
    _history(tmp_path, seed, fast=True)


@pytest.mark.parametrize("seed", [0, 2])
def test_without_ormsgpack_the_walk_stores_what_a_fresh_encoding_stores(
        tmp_path: Any, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """ormsgpack is an optional extra (``fast``): without it the exact path falls back to the
    Python walk and cbor2's encodings, with the same answers."""
    monkeypatch.setattr(fast_plain, "ormsgpack", None)
    _history(tmp_path, seed, fast=False)


def _history(tmp_path: Any, seed: int, *, fast: bool) -> None:
    rng = random.Random(seed)
    with_bytes = seed % 3 == 2
    store = ckptfs.open_store(str(tmp_path / "fast"))
    fresh = ckptfs.open_store(str(tmp_path / "fresh"))
    run = store.start_run("r")
    lst: list[Any] = [_item(rng, i, with_bytes) for i in range(3)]
    state = {"messages": lst, "plan": {"k": 1}}
    assert _outcome(run, state)[0] == "stored"
    proofs = steps = 0
    # seeds 0 and 3 keep the items pure (edits, forgeries put back after their refusal), so
    # the proof is taken; the others let big integers, typed values and bytes in
    ops = [o for o in OPS if o not in IMPURE] if seed % 3 == 0 else OPS
    for step in range(120):
        op = rng.choice(ops)
        items = [i for i, x in enumerate(lst) if type(x) is dict and "t" in x]
        j = rng.choice(items) if items else None
        undo = None  # (slot, the original object) put back after a refused step
        if op == "append" or j is None:
            lst.append(_item(rng, len(lst), with_bytes))
        elif op == "ext_new":
            lst.append(ormsgpack.Ext(2, b"x"))
            undo = (len(lst) - 1, None)
        elif op == "bytearray_new":
            lst.append({"raw": bytearray(b"x")})
            undo = (len(lst) - 1, None)
        elif op == "edit":
            lst[j]["t"] = lst[j]["t"] + "x"  # in place, inside a committed item
        elif op == "int_float" and type(lst[j]["n"]) is int:
            lst[j]["n"] = float(lst[j]["n"])
        elif op == "bool_int" and lst[j]["b"] is True:
            lst[j]["b"] = 1
        elif op == "reorder":
            lst[j] = dict(reversed(list(lst[j].items())))
        elif op == "tuple":
            lst[j]["l"] = tuple(lst[j]["l"])  # a typed value (built-in codec)
        elif op == "sub":
            undo = (j, lst[j])
            lst[j] = {**lst[j], "t": Sub(lst[j]["t"])}
        elif op in ("bytearray", "memoryview"):
            raw = lst[j].get("raw")
            if type(raw) is bytes:
                undo = (j, lst[j])
                lst[j] = {**lst[j], "raw": bytearray(raw) if op == "bytearray" else memoryview(raw)}
        elif op == "ext":
            undo = (j, lst[j])
            lst[j] = ormsgpack.Ext(1, cbor2.dumps(lst[j]))
        elif op == "ext_wrap":
            lst.append({"big": 2 ** 70 + step})  # fast-packed as an ext around cbor2
            assert _outcome(run, state) == _outcome(fresh.start_run(f"f{step}a"), state)
            undo = (len(lst) - 1, lst[-1])
            lst[-1] = ormsgpack.Ext(1, cbor2.dumps(lst[-1]))  # the same msgpack bytes
        elif op == "bigint":
            lst.append({"big": -(2 ** 64) + step})
        elif op == "negbig":
            lst.append({"n": -(2 ** 63) - 1 - step})
        elif op == "datetime":
            lst.append({"at": datetime.datetime(2026, 1, 1, step % 24, tzinfo=datetime.timezone.utc)})
        elif op == "deep_ok":
            lst.append(_deep(254))
        elif op == "deep_bad":
            lst.append(_deep(300))
            undo = (len(lst) - 1, None)
        elif op == "copy":
            state["messages"] = lst = list(lst)
        elif op == "truncate":
            del lst[-1]
        elif op == "deepcopy":
            lst[j] = copy.deepcopy(lst[j])
        elif op == "nan":
            lst[j]["f"] = float("nan")
        elif op == "negzero" and lst[j]["f"] == 0.0:
            lst[j]["f"] = -0.0 if str(lst[j]["f"]) == "0.0" else 0.0
        elif op == "bytes_item":
            lst.append(b"\x01\x02")
        elif op == "bytes":
            lst[j]["raw2"] = b"xy"
        proofs += run._writer.proven_plain("messages", lst) is not None
        got = _outcome(run, state)
        want = _outcome(fresh.start_run(f"f{step}"), state)
        assert got == want, (seed, step, op)
        steps += 1
        if undo is not None:
            slot, obj = undo
            if obj is None:
                del lst[slot]
            else:
                lst[slot] = obj
    assert steps == 120
    if seed % 3 == 0 and fast:
        assert proofs > 10  # the shortcut was taken (not only the exact walk)
    if not fast:
        assert proofs == 0
    # what the run stored is what it holds, read back by a fresh process's store
    again = ckptfs.open_store(str(tmp_path / "fast")).resume("r")
    assert cbor2.dumps(again.state["messages"], canonical=True) == cbor2.dumps(lst, canonical=True)


def test_a_bytearray_behind_equal_msgpack_bytes_is_refused(tmp_path: Any) -> None:
    """bytes and bytearray pack alike in msgpack: the proof must not take a committed bytes
    item that was replaced in place by an equal bytearray for unchanged."""
    store = ckptfs.open_store(str(tmp_path / "s"))
    run = store.start_run("r")
    lst: list[Any] = [{"raw": b"abc"}, {"t": "x"}]
    run.checkpoint({"messages": lst})
    lst.append({"t": "y"})
    run.checkpoint({"messages": lst})
    lst[0]["raw"] = bytearray(b"abc")
    lst.append({"t": "z"})
    with pytest.raises(ckptfs.errors.UnregisteredType):
        run.checkpoint({"messages": lst})


@pytest.mark.parametrize("odd", [2 ** 70, -(2 ** 64),
                                 datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)])
def test_an_ext_forging_a_wrapped_item_is_refused(tmp_path: Any, odd: Any) -> None:
    """A big integer's or a typed value's fast form is an ext around its cbor2 bytes: an
    ``ormsgpack.Ext`` object with those bytes must not pass for it."""
    store = ckptfs.open_store(str(tmp_path / "s"))
    run = store.start_run("r")
    lst: list[Any] = [{"t": "x"}]
    run.checkpoint({"messages": lst})
    lst.append({"t": "y"})
    run.checkpoint({"messages": lst})  # the committed items are now known pure
    lst.append(odd)
    run.checkpoint({"messages": lst})
    lst.append({"t": "w"})
    run.checkpoint({"messages": lst})
    lst[2] = ormsgpack.Ext(1, cbor2.dumps(store.codecs.encode(odd)))
    lst.append({"t": "z"})
    with pytest.raises(ckptfs.errors.UnregisteredType):
        run.checkpoint({"messages": lst})


def test_fast_items_are_self_delimiting_and_typed() -> None:
    """Distinct plain values have distinct fast forms, and an item's form never starts
    another's (the prefix comparison relies on both)."""
    vals = [0, 1, 1.0, True, False, None, "", "a", b"", b"a", [], {}, [0], {"a": 0}, {"a": 0.0},
            -0.0, 0.0, 2 ** 64 - 1, -(2 ** 63), -(2 ** 63) - 1, 2 ** 64, "\u00e9", [[]], [{}]]
    forms = [b[at:] for b, at in (fast_plain.fast_items([v]) for v in vals)]
    for i, a in enumerate(forms):
        for k, b in enumerate(forms):
            if i != k:
                assert not b.startswith(a), (vals[i], vals[k])
