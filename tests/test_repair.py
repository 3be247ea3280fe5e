"""Issue 35 item 3: a run whose head record is damaged (one byte flipped) is recoverable.

Before: ``resume("r")`` and ``resume("r@4")`` both failed with no way out but ``fork``; ``ls``
and ``log`` exited 0 without a word; ``verify`` advised "Commit the run again" (impossible on
that run) and printed "(the file may be truncated or edited)" twice. Now ``ckptfs repair``
commits the last good snapshot again above the damaged record (format.md 8.4), keeping the
record as evidence; every command says what to do, and the advice works. Every CLI case runs
``ckptfs`` as a subprocess."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import ckptfs
from ckptfs.errors import CorruptSnapshot, FormatError
from ckptfs.format.names import record_path
from tests.clihelp import cli


def _damage(root: Path, run: str, seq: int) -> None:
    """Flip one byte of the record's header."""
    p = root / record_path(run, seq)
    b = bytearray(p.read_bytes())
    b[min(12, len(b) // 2)] ^= 0x01
    p.write_bytes(bytes(b))


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and "leases" not in p.parts}


def _store(root: Path, *, steps: int = 5) -> ckptfs.Store:
    s = ckptfs.open_store(str(root))
    r = s.start_run("r")
    for i in range(1, steps + 1):
        r.checkpoint({"step": i, "doc": ckptfs.Blob(bytes([i]) * 20_000)}, f"b{i}",
                     labels={"k": str(i)})
    return s


def test_damaged_head_is_flagged_and_repaired(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _store(root)
    _damage(root, "r", 5)
    url = str(root)
    s = ckptfs.open_store(url)
    for ref in ("r", "r@4"):  # both fail, and say how to get out
        with pytest.raises((CorruptSnapshot, FormatError)) as e:
            s.resume(ref)
        assert f"ckptfs repair {url} r" in str(e.value), e.value
    ls = cli("ls", url, check=1)  # was 0
    assert f"ckptfs repair {url} r" in ls.stderr
    assert json.loads(cli("ls", url, "--json", check=1).stdout)["runs"][0]["status"] == "damaged"
    log = cli("log", url, "r", check=1)  # was 0
    assert f"'ckptfs repair {url} r'" in log.stdout and "@5" in log.stdout
    assert "forgotten" not in log.stdout  # an unreadable record is no forgotten one
    v = cli("verify", url, check=1)
    assert v.stdout.count("truncated or edited") <= 1, v.stdout  # was twice
    assert "Commit the run again" not in v.stdout  # advice that cannot be followed
    assert f"'ckptfs repair {url} r'" in v.stdout
    assert v.stdout.count("r@5") == 1, v.stdout  # one problem, not the same one twice

    before = _files(root)
    dry = cli("repair", url, "r", "--dry-run")
    assert "would commit it again as r@6" in dry.stdout and "r@4" in dry.stdout
    assert _files(root) == before  # a dry run writes nothing

    out = cli("repair", url, "r")
    assert "committed it again as r@6" in out.stdout, out.stdout
    assert (root / record_path("r", 5)).read_bytes() == before[record_path("r", 5)]  # evidence

    s = ckptfs.open_store(url)
    r = s.resume("r")
    assert r.seq == 6 and r.state["step"] == 4 and r.state["doc"].read() == bytes([4]) * 20_000
    head = s.head("r")
    assert head.parent == s.repo.resolve("r@4").id and head.labels == {"k": "4"}
    assert head.boundary == "b4"
    r.checkpoint({"step": 7}, "b7")
    assert s.head("r").seq == 7

    cli("ls", url)
    log = cli("log", url, "r")
    assert "repair: @5 damaged, set aside; @6 holds the last good snapshot" in log.stdout
    v = cli("verify", url)  # a repaired record is a note, kept as evidence
    assert "repaired" in v.stdout and f"ckptfs repair {url} r --forget" in v.stdout
    rep = json.loads(cli("verify", url, "--json").stdout)
    assert rep["ok"] and [p["seq"] for p in rep["repaired"]] == [5]
    again = cli("repair", url, "r")
    assert "nothing to repair" in again.stdout

    # the advice given: forget the evidence, and gc frees space again
    gone = cli("repair", url, "r", "--forget")
    assert "forgot the damaged record @5" in gone.stdout
    gc = cli("gc", url, "--grace", "0s")
    assert "problem" not in gc.stdout, gc.stdout
    assert not (root / record_path("r", 5)).exists()
    rep = json.loads(cli("verify", url, "--json").stdout)
    assert rep["ok"] and rep["repaired"] == [] and rep["problems"] == []


def test_repair_keeps_the_effect_ledger_and_forgets_at_once(tmp_path: Path) -> None:
    root = tmp_path / "s"
    s = ckptfs.open_store(str(root))
    r = s.start_run("r")
    r.checkpoint({"n": 1})
    assert r.effect("send", lambda: "sent-1", key="mail-1") == "sent-1"
    r.checkpoint({"n": 2})
    top = s.head("r").seq
    _damage(root, "r", top)
    out = cli("repair", str(root), "r", "--forget", "--json")
    res = json.loads(out.stdout)
    assert res["needed"] and res["forgotten"] == [top] and res["new_seq"] == top + 1
    r = ckptfs.open_store(str(root)).resume("r")
    calls: list[int] = []
    # the effect recorded before the damage is done: not run again
    assert r.effect("send", lambda: calls.append(1) or "again", key="mail-1") == "sent-1"
    assert calls == [] and r.state == {"n": 1}
    rep = json.loads(cli("verify", str(root), "--json").stdout)
    assert rep["ok"], rep


def test_repair_refuses_what_it_cannot_do(tmp_path: Path) -> None:
    root = tmp_path / "s"
    s = ckptfs.open_store(str(root))
    s.start_run("one").checkpoint({"n": 1})
    _store(root, steps=2)
    before = _files(root)
    ok = cli("repair", str(root), "r")
    assert "reads fine; nothing to repair" in ok.stdout
    assert _files(root) == before
    cli("repair", str(root), "nope", check=3)
    _damage(root, "one", 1)
    bad = cli("repair", str(root), "one", check=3)  # nothing good to make the head
    assert "none of its 1 records can be read" in bad.stderr
    assert "ckptfs erase" in bad.stderr
