"""Naming rules: run ids, entry names, label keys, boundaries, and the store path layout."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import ckptfs
from ckptfs.errors import InvalidName
from ckptfs.format import names
from ckptfs.format.digest import Digest
from ckptfs.storage.base import check_path

PATH_TRICKS = ["../x", "..", ".", "/abs", "a/../../b", "", "a\x00b", "\x00", "a\n", "x/", "/",
               "a//b", "a\\b", "..\\x", " a", "a b", "\u00e9t\u00e9", "a\tb"]


@pytest.mark.parametrize("bad", PATH_TRICKS + ["a/b", ".hidden", "-x", "_x", "x.", "r" * 129, "a:b"])
def test_bad_run_ids(bad: str) -> None:
    with pytest.raises(InvalidName):
        names.check_run_id(bad)


@pytest.mark.parametrize("good", ["r", "run-1", "R.2_b-c", "0", "a" * 128, "a..b"])
def test_good_run_ids(good: str) -> None:
    assert names.check_run_id(good) == good
    assert names.run_dir(good) == f"runs/{good}"


@pytest.mark.parametrize("bad", PATH_TRICKS + ["a/.x", "a/-x", "." * 3, "x" * 129,
                                               "/".join(["abcdefgh"] * 29), 1, None])
def test_bad_entry_names(bad: object) -> None:
    with pytest.raises(InvalidName):
        names.check_entry_name(bad)


@pytest.mark.parametrize("good", ["messages", "_private", "a/b/c", "tools/search.v2", "x" * 128,
                                  "/".join(["abcdefg"] * 32)])
def test_good_entry_names(good: str) -> None:
    assert len(good.encode()) <= 255
    assert names.check_entry_name(good) == good


@pytest.mark.parametrize("bad", ["", "/x", "-x", ".x", "a b", "a\n", "k" * 129, "é"])
def test_bad_label_keys(bad: str) -> None:
    with pytest.raises(InvalidName):
        names.check_label_key(bad)


@pytest.mark.parametrize("bad", ["", "Step", "1step", "_x", "step\n", "a" * 65, "a b", "a/b"])
def test_bad_boundaries(bad: str) -> None:
    with pytest.raises(InvalidName):
        names.check_boundary(bad)


@given(st.text(max_size=140))
def test_every_accepted_run_id_is_one_safe_segment(s: str) -> None:
    try:
        names.check_run_id(s)
    except InvalidName:
        return
    check_path(names.run_dir(s))
    assert "/" not in s and s not in (".", "..") and s.isascii() and s.isprintable()


@given(st.text(max_size=300))
def test_every_accepted_entry_name_is_a_safe_relative_path(s: str) -> None:
    try:
        names.check_entry_name(s)
    except InvalidName:
        return
    check_path(s)
    assert all(seg and not seg.startswith((".", "-")) for seg in s.split("/"))


def test_paths_of_objects_and_records() -> None:
    d = Digest.of(b"x")
    assert names.chunk_path(d) == f"chunks/{d.hex[:2]}/{d.hex}"
    assert names.snapshot_path(d) == f"snapshots/{d.hex[:2]}/{d.hex}"
    assert names.record_path("r", 7) == "runs/r/00000000000000000007"
    assert names.seq_name((1 << 64) - 1) == "18446744073709551615"
    with pytest.raises(InvalidName):
        names.record_path("../r", 1)


@pytest.mark.parametrize("name,seq", [("00000000000000000001", 1), ("18446744073709551615", (1 << 64) - 1),
                                      ("1", None), ("0000000000000000001x", None),
                                      ("000000000000000000001", None), ("٠" * 20, None), ("", None)])
def test_parse_seq_name(name: str, seq: int | None) -> None:
    assert names.parse_seq_name(name) == seq


@pytest.mark.parametrize("bad", ["../x", "/abs", "a/../../b", "", "a\x00b", "x" * 129, "run\n"])
def test_public_api_refuses_bad_names(tmp_path: object, bad: str) -> None:
    store = ckptfs.open_store(str(tmp_path))
    with pytest.raises(InvalidName):
        store.start_run(bad)
    run = store.start_run("ok")
    with pytest.raises(InvalidName):
        run.checkpoint({bad: 1})
    assert store.runs() == []  # nothing was committed
    run.checkpoint({"x": 1})
    with pytest.raises(InvalidName):
        store.fork("ok", bad)
    assert store.runs() == ["ok"]
