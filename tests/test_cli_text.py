"""Nothing a store holds reaches the terminal as a control sequence (issue 13, "Terminal
escapes"): labels, ledger keys and names, entry URIs and error messages with ESC, CSI, DEL,
C1 controls and bidi overrides are printed escaped (``\\u001b``) by every text command, as a
subprocess sees them; ``--json`` output keeps the exact values (escaped by JSON)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import ckptfs
from tests.clihelp import cli

#: C0 (but newline and tab, which the CLI's own layout uses), DEL, C1, bidi and other
#: invisible format characters
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
EVIL = "\x1b]0;pwned\x07\x1b[2J\x9b31m\u202eevil\x7f"


def _store(tmp_path: Path) -> str:
    url = str(tmp_path / "store")
    store = ckptfs.open_store(url)
    run = store.start_run("r")
    run.checkpoint({"x": 1, "doc": ckptfs.Ref(f"file:///nowhere/{EVIL}")},
                   labels={"note": EVIL, "multi": "line one\nfake: line two"})
    run.effect(f"pay{EVIL}", lambda: {"ok": EVIL}, key=f"key{EVIL}")
    with_fail = store.resume("r", lenient_refs=True)
    try:
        with_fail.effect("boom", _raise, key="k2")
    except RuntimeError:
        pass
    return url


def _raise() -> None:
    raise RuntimeError(f"failed {EVIL}")


def _assert_clean(p: object, *must: str) -> None:
    out = p.stdout + p.stderr  # type: ignore[attr-defined]
    assert not RAW.findall(out), (RAW.findall(out), out)
    assert "Traceback" not in out, out
    for m in must:
        assert m in out, (m, out)


def test_text_commands_escape_what_the_store_holds(tmp_path: Path) -> None:
    url = _store(tmp_path)
    esc = "\\u001b]0;pwned\\u0007\\u001b[2J\\u009b31m\\u202eevil\\u007f"
    _assert_clean(cli("show", url, "r@1"), f"note={esc}", "line one\\u000afake: line two")
    _assert_clean(cli("log", url, "r"), f"key{esc}", f"pay{esc}")
    _assert_clean(cli("effects", url, "r"), f"key{esc}", f"pay{esc}")
    _assert_clean(cli("ls", url))
    _assert_clean(cli("check", url, "--strict-refs", check=1), esc)
    _assert_clean(cli("cat", url, "r", "x"))
    _assert_clean(cli("verify", url))
    _assert_clean(cli("du", url, "--snapshots"))
    _assert_clean(cli("diff", url, "r@1", "r"))


def test_error_messages_are_escaped(tmp_path: Path) -> None:
    url = _store(tmp_path)
    _assert_clean(cli("cat", url, "r", f"no{EVIL}", check=3), "error (not-found)")
    _assert_clean(cli("log", url, f"r{EVIL}", check=3))
    _assert_clean(cli("show", url, f"r@{EVIL}", check=3))
    _assert_clean(cli("check", url, "--schema", f"a@{EVIL}", check=2))
    _assert_clean(cli("show", str(tmp_path / f"none{EVIL}"), "r", check=3))


def test_cat_of_a_value_escapes_but_stays_exact_json(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    value = {"s": EVIL, EVIL: [EVIL, "\u2066iso\u2069"]}
    ckptfs.open_store(url).start_run("r").checkpoint({"v": value})
    p = cli("cat", url, "r", "v")
    _assert_clean(p)
    assert json.loads(p.stdout) == value


def test_json_output_keeps_exact_values(tmp_path: Path) -> None:
    url = _store(tmp_path)
    p = cli("show", url, "r@1", "--json")
    _assert_clean(p)
    assert json.loads(p.stdout)["labels"]["note"] == EVIL
    effects = json.loads(cli("effects", url, "r", "--json").stdout)["effects"]
    assert {e["key"] for e in effects} == {f"key{EVIL}", "k2"}
    assert [e["result"] for e in effects if e["key"] == f"key{EVIL}"] == [{"ok": EVIL}]


def test_local_output_errors_are_clean(tmp_path: Path) -> None:
    url = _store(tmp_path)
    p = cli("cat", url, "r@1", "x", "--output", str(tmp_path / "no" / "such" / "dir"), check=3)
    _assert_clean(p, "error (storage)")
    p = cli("check", url, "--allow-refs", "simplecache::file:///tmp", check=2)
    _assert_clean(p, "error (usage)", "chain")
    p = cli("fork", url, "r@1", "f", "--allow-refs", "zip://x", check=None)
    assert p.returncode in (2, 3)
    _assert_clean(p, "never followed")


def test_no_help_text_prints_a_doubled_percent_sign() -> None:
    """issue 35 item 6: ``verify --help`` printed a literal ``%%`` (argparse formats help
    strings, not descriptions, so only help strings may double it). Every command's help, as
    the parser renders it (the same text ``--help`` prints)."""
    import argparse

    from ckptfs.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    texts = {"ckptfs": parser.format_help(),
             **{name: p.format_help() for name, p in sub.choices.items()}}
    assert len(texts) > 20
    assert [name for name, text in texts.items() if "%%" in text] == []


def test_verify_of_inline_data_says_what_it_checked(tmp_path: Path) -> None:
    """issue 35 item 6: a v2 store whose data is all inline said '0 chunks checked', as if
    nothing had been verified; its entries are checked with their manifests (a snapshot's id is
    their digest), and the summary says so (and counts in the right number)."""
    url = str(tmp_path / "s")
    run = ckptfs.open_store(url).start_run("r")
    run.checkpoint({"a": [1, 2, 3]})
    run.checkpoint({"a": [1, 2, 3, 4], "b": "x"})
    last = cli("verify", url, "--read-data").stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"1 run, 2 snapshots \(2 records read, \d+ B of manifests hashed\), "
                        r"3 entries held in their manifests \(checked with them\), no chunks: "
                        r"all data is inline, 0 problem\(s\)", last), last
    rep = json.loads(cli("verify", url, "--json").stdout)
    assert rep["inline_entries"] == 3 and rep["chunks_checked"] == 0
