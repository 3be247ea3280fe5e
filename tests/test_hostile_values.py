"""Values a writer accepts must be readable, and text a user types or a store holds is parsed
strictly (issue 13, "Hostile stores": values and names).

- Depth: the writer's nesting check is the reader's exact limit (spec/format.md 5.3): 256
  levels, every array, map and tag (a bignum) counted, the array of a ``cbor-seq`` value
  included; a ledger record's result or request sits two levels down (the ledger array, the
  record map), so it may be at most 254 deep. Each boundary is tested at the limit (writes,
  reads back) and one past it (refused at write time, nothing committed).
- ``RUN@SEQ``: ASCII digits only, no sign, no leading zeros except ``0``, at most 2^64-1;
  anything else is InvalidName (category ``path``), never a raw ValueError.
- Big integers: ``ckptfs cat`` of a value past Python's 4300-digit str() limit prints it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import ckptfs
from ckptfs.errors import CkptfsError, InvalidName, NotFound
from ckptfs.format import cbor
from ckptfs.format.names import parse_uint
from tests.clihelp import cli

LIMIT = cbor.MAX_DEPTH  # 256


def nest(n: int, leaf: Any = 1, *, kind: str = "list") -> Any:
    """``n`` containers around ``leaf``: nest(0) is the leaf, nest(1) is [leaf]."""
    v = leaf
    for _ in range(n):
        v = [v] if kind == "list" else {"k": v}
    return v


@pytest.fixture
def store(tmp_path: Path) -> ckptfs.Store:
    return ckptfs.open_store(str(tmp_path / "store"))


# -- state values ------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["list", "map"])
def test_state_value_at_the_limit_round_trips(store: ckptfs.Store, kind: str) -> None:
    value = nest(LIMIT, kind=kind)
    store.start_run("r").checkpoint({"v": {"wrap": nest(LIMIT - 1, kind=kind)}, "w": value})
    got = store.read("r")
    assert got["w"] == value and got["v"] == {"wrap": nest(LIMIT - 1, kind=kind)}


@pytest.mark.parametrize("kind", ["list", "map"])
def test_state_value_past_the_limit_is_refused_at_write(store: ckptfs.Store, kind: str) -> None:
    with pytest.raises(TypeError, match="deeper than 256"):
        store.start_run("r").checkpoint({"w": nest(LIMIT + 1, kind=kind)})
    assert store.runs() == []


def test_appended_list_item_counts_the_list_level(store: ckptfs.Store) -> None:
    """A top-level list is a cbor-seq value; an appended item is checked with the list's level
    counted (before: checked alone, so a 256-deep item made a 257-deep value that no reader
    accepts and the run unreadable)."""
    run = store.start_run("r")
    run.checkpoint({"msgs": ["a"]})
    run.checkpoint({"msgs": ["a", nest(LIMIT - 1)]})  # the list makes it 256: fine
    assert store.read("r")["msgs"][1] == nest(LIMIT - 1)
    with pytest.raises(TypeError, match="deeper than 255"):  # the list takes a level
        run.checkpoint({"msgs": ["a", nest(LIMIT - 1), nest(LIMIT)]})
    assert store.head("r").seq == 2
    assert store.read("r")["msgs"][1] == nest(LIMIT - 1)


def test_bignum_counts_as_a_level(store: ckptfs.Store) -> None:
    """An integer outside 64 bits is CBOR tag 2/3, which the reader counts as one level."""
    big = 2 ** 70
    store.start_run("ok").checkpoint({"v": nest(LIMIT - 1, big), "n": nest(LIMIT - 1, -big)})
    assert store.read("ok")["v"] == nest(LIMIT - 1, big)
    with pytest.raises(TypeError, match="deeper than 256"):
        store.start_run("deep").checkpoint({"v": nest(LIMIT, big)})
    with pytest.raises(TypeError, match="deeper than 256"):
        store.start_run("deep").checkpoint({"v": nest(LIMIT, -(2 ** 64) - 1)})
    assert store.runs() == ["ok"]


# -- effect results and approval requests ------------------------------------------------------
RESULT_LIMIT = getattr(cbor, "LEDGER_VALUE_DEPTH", 254)


@pytest.mark.parametrize("size", ["inline", "large"])
def test_effect_result_at_the_limit_is_readable_on_resume(store: ckptfs.Store, size: str) -> None:
    leaf = "x" * (70_000 if size == "large" else 1)
    result = nest(RESULT_LIMIT, leaf)
    run = store.start_run("r")
    assert run.effect("fetch", lambda: result, key="k1") == result
    resumed = store.resume("r")
    assert resumed.effect("fetch", lambda: pytest.fail("called twice"), key="k1") == result
    assert store.ledger("r").effects["k1"].status == "completed"


def test_effect_result_past_the_limit_is_refused_and_the_run_stays_readable(
        store: ckptfs.Store) -> None:
    """Before: a 255-deep result was committed and every later resume raised FormatError."""
    run = store.start_run("r")
    with pytest.raises(TypeError, match="deeper than 254"):
        run.effect("fetch", lambda: nest(RESULT_LIMIT + 1), key="k1")
    resumed = store.resume("r")  # readable: the intent is there, the result was not recorded
    assert resumed.effects()[0].status == "intended"


def test_approval_request_depth_boundary(store: ckptfs.Store) -> None:
    run = store.start_run("r")
    with pytest.raises(ckptfs.errors.ApprovalPending):
        run.wait_for_approval(nest(RESULT_LIMIT), key="a1")
    with pytest.raises(TypeError, match="deeper than 254"):
        run.wait_for_approval(nest(RESULT_LIMIT + 1), key="a2")
    resumed = store.resume("r")
    assert [e.key for e in resumed.pending_approvals()] == ["a1"]


# -- RUN@SEQ and other integers typed by people ------------------------------------------------
@pytest.mark.parametrize("text", ["²", "١", "٣", "１", "01", "00", "+1", "-1", " 1", "1 ",
                                  "1_0", "0x1", "", "18446744073709551616", "9" * 30])
def test_parse_uint_refuses_everything_but_plain_ascii(text: str) -> None:
    with pytest.raises(InvalidName):
        parse_uint(text, what="SEQ")


@pytest.mark.parametrize("text,n", [("0", 0), ("7", 7), ("18446744073709551615", 2 ** 64 - 1)])
def test_parse_uint_accepts_plain_ascii(text: str, n: int) -> None:
    assert parse_uint(text, what="SEQ") == n


@pytest.mark.parametrize("seq", ["²", "٣", "01", "-1", "18446744073709551616", "1e3"])
def test_run_at_seq_grammar_is_strict(store: ckptfs.Store, seq: str) -> None:
    store.start_run("r").checkpoint({"x": 1})
    with pytest.raises(InvalidName, match="RUN@SEQ"):
        store.get(f"r@{seq}")
    with pytest.raises(NotFound):
        store.get("r@0")
    assert store.get("r@1").seq == 1


def test_show_with_a_unicode_digit_is_a_clean_error(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    ckptfs.open_store(url).start_run("r").checkpoint({"x": 1})
    p = cli("show", url, "r@²", check=3)
    assert "error (path)" in p.stderr and "Traceback" not in p.stderr
    p = cli("erase", url, "r", "--snapshot", "²", "--reason", "t", check=None)
    assert p.returncode in (2, 3) and "Traceback" not in p.stderr
    assert ckptfs.open_store(url).get("r@1").seq == 1


def test_schema_and_duration_text_are_ascii_only() -> None:
    from ckptfs.ops.retention import parse_duration
    from ckptfs.runtime.migrations import as_schema

    for bad in ("agent@²", "agent@٣", "agent@01", "agent@-1"):
        with pytest.raises(ValueError) as e:
            as_schema(bad)
        assert isinstance(e.value, CkptfsError), bad
    assert as_schema("agent@3").version == 3
    for bad in ("٣d", "²", "٣", "1٣s"):
        with pytest.raises(ValueError):
            parse_duration(bad)
    assert parse_duration("90s") == 90_000 and parse_duration("2") == 2000


# -- big integers in text output ---------------------------------------------------------------
def test_cat_prints_a_bignum_beyond_the_str_limit(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    huge = 7 ** 20_000  # ~16,900 decimal digits: str() refuses it by default
    ckptfs.open_store(url).start_run("r").checkpoint(
        {"n": huge, "m": {"neg": -huge, "small": 2 ** 70}})
    p = cli("cat", url, "r", "n")
    assert json.loads(p.stdout) == {"$int": hex(huge)}
    got = json.loads(cli("cat", url, "r", "m").stdout)
    assert got == {"neg": {"$int": hex(-huge)}, "small": 2 ** 70}
