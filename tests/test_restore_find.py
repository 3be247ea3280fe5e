"""Issue 35 item 5: ``ckptfs restore`` (a whole snapshot into a folder) and ``ckptfs find``
(labels and entry names across runs). CLI cases run ``ckptfs`` as a subprocess; the request
count of ``find`` is measured on a moto S3 server on loopback."""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path
from typing import Any

import pytest

import ckptfs
from ckptfs.errors import InvalidName
from ckptfs.format.digest import Digest
from ckptfs.format.models import Captured, Reference
from ckptfs.ops.restore import plan
from tests.clihelp import cli, make_demo
from tests.conftest import S3Requests, new_s3_url


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


# --- restore ---------------------------------------------------------------------------------

def test_restore_writes_every_entry(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    states = make_demo(url)
    out = tmp_path / "out"
    p = cli("restore", url, "agent@4", str(out))
    assert "restored agent@4" in p.stdout
    files = _tree(out)
    assert sorted(files) == [".ckptfs-snapshot.json", "messages.json", "plan.json", "raw.json",
                             "report"]
    assert files["report"] == states["agent@4"]["report"].read()  # a blob: its bytes
    assert json.loads(files["plan.json"]) == states["agent@4"]["plan"]
    assert json.loads(files["messages.json"]) == json.loads(
        cli("cat", url, "agent@4", "messages").stdout)  # the JSON cat prints
    assert json.loads(files[".ckptfs-snapshot.json"])["seq"] == 4
    # a reference: what it points at, not the data
    out6 = tmp_path / "out6"
    rep = json.loads(cli("restore", url, "agent@6", str(out6), "--json").stdout)
    assert {f["path"]: f["kind"] for f in rep["files"]}["web.ref.json"] == "ref"
    assert json.loads((out6 / "web.ref.json").read_text())["uri"].startswith("file://")
    assert rep["bytes"] == sum(f["bytes"] for f in rep["files"])

    # a folder that is not empty is refused, and left as it was; --force writes over it
    before = _tree(out)
    (out / "plan.json").write_text("edited")
    refused = cli("restore", url, "agent@4", str(out), check=3)
    assert "is not empty" in refused.stderr and "--force" in refused.stderr
    assert (out / "plan.json").read_text() == "edited"
    (out / "mine.txt").write_text("keep me")
    cli("restore", url, "agent@4", str(out), "--force")
    assert _tree(out) == {**before, "mine.txt": b"keep me"}
    cli("restore", url, "agent@4", str(tmp_path / "s" / "ckptfs.cbor"), check=3)  # a file


def test_restore_follows_no_link_and_nests_entries(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    run = ckptfs.open_store(url).start_run("r")
    run.checkpoint({"notes/today": {"a": 1}, "notes/raw": ckptfs.Blob(b"bytes"), "top": [1]})
    out = tmp_path / "out"
    cli("restore", url, "r", str(out))
    assert _tree(out)["notes/today.json"] == b'{\n  "a": 1\n}\n'
    assert _tree(out)["notes/raw"] == b"bytes"
    # a link planted where a file goes is never written through, even with --force
    victim = tmp_path / "victim.txt"
    victim.write_text("outside")
    (out / "top.json").unlink()
    os.symlink(victim, out / "top.json")
    p = cli("restore", url, "r", str(out), "--force", check=3)
    assert "top.json" in p.stderr and "symbolic link" in p.stderr
    assert victim.read_text() == "outside"
    os.symlink(tmp_path, tmp_path / "link")
    p = cli("restore", url, "r", str(tmp_path / "link"), "--force", check=3)
    assert "symbolic link" in p.stderr


def _value(n: int) -> Captured:
    return Captured("value", "application/cbor", 1, Digest.of(b"x"), (), "cbor", inline=b"\x01")


def test_restore_refuses_entry_names_that_would_be_path_tricks() -> None:
    """A hostile store's manifest cannot make restore write outside its folder or over its own
    files: every name is checked again and collisions are found before any write."""
    ok = plan({"a": _value(1), "b/c": _value(2)})
    assert [p.path for p in ok] == ["a.json", "b/c.json"]
    for entries, why in [
            ({"../evil": _value(1)}, "not a valid entry name"),
            ({"/abs": _value(1)}, "not a valid entry name"),
            ({"a\\b": _value(1)}, "not a valid entry name"),
            ({"x/../../y": _value(1)}, "not a valid entry name"),
            ({".hidden": _value(1)}, "not a valid entry name"),
            ({"a": _value(1), "A": _value(2)}, "would both be the file"),
            ({"x.json": Captured("blob", "application/octet-stream", 1, Digest.of(b"x"), (),
                                 inline=b"x"), "x": _value(1)}, "would both be the file"),
            ({"d": Captured("blob", "application/octet-stream", 1, Digest.of(b"x"), (),
                            inline=b"x"), "d/e": _value(2)}, "needs a folder")]:
        with pytest.raises(InvalidName) as e:
            plan(entries)
        assert why in str(e.value) and "Nothing was written" in str(e.value), e.value
    ref = Reference(uri="file:///etc/passwd")
    assert plan({"r": ref})[0].path == "r.ref.json"


def test_restore_refuses_an_expired_snapshot(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    run = ckptfs.open_store(url).start_run("r")
    run.checkpoint({"a": 1}, expires_at=datetime.timedelta(seconds=-1))
    p = cli("restore", url, "r", str(tmp_path / "out"), check=3)
    assert "expired" in p.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    cli("restore", url, "r", str(tmp_path / "out"), "--allow-expired")
    assert json.loads((tmp_path / "out" / "a.json").read_text()) == 1


# --- find ------------------------------------------------------------------------------------

def _labelled(url: str) -> ckptfs.Store:
    s = ckptfs.open_store(url)
    for i in range(6):
        r = s.start_run(f"{'agent' if i % 2 else 'batch'}-{i}")
        r.checkpoint({"plan": i}, labels={"team": "red" if i < 3 else "blue"})
        r.checkpoint({"plan": i, **({"report": ckptfs.Blob(b"r")} if i % 3 == 0 else {})},
                     labels={"team": "red" if i < 3 else "blue", **({"final": "yes"} if i == 4
                                                                    else {})},
                     entry_labels={"plan": {"pii": "no"}})
    return s


def test_find_by_label_entry_and_run(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    _labelled(url)

    def found(*args: str) -> list[str]:
        rep = json.loads(cli("find", url, *args, "--json").stdout)
        return [f"{f['run']}@{f['seq']}" for f in rep["found"]]

    assert found("--label", "team=blue") == ["agent-3@2", "agent-5@2", "batch-4@2"]
    assert found("--label", "final") == ["batch-4@2"]
    assert found("--entry", "rep*") == ["agent-3@2", "batch-0@2"]
    assert found("--run", "agent-*", "--label", "team=red") == ["agent-1@2"]
    assert found("--label", "pii=no", "--run", "batch-0") == ["batch-0@2"]  # an entry's label
    assert len(found("--label", "team=red", "--all")) == 6  # both snapshots of three runs
    assert len(found("--all", "--limit", "4")) == 4
    text = cli("find", url, "--label", "team=blue").stdout
    assert "3 matches among 6 heads of 6 runs" in text
    assert "none" not in cli("find", url, "--label", "team=green").stdout
    cli("find", url, "--label", "=x", check=2)


def test_find_a_damaged_head_is_a_problem_not_the_end(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    _labelled(url)
    p = tmp_path / "s" / "runs" / "agent-1" / f"{2:020d}"
    b = bytearray(p.read_bytes())
    b[12] ^= 1
    p.write_bytes(bytes(b))
    out = cli("find", url, "--label", "team=red", check=1)
    assert "2 matches among 5 heads of 6 runs" in out.stdout and "! agent-1" in out.stdout


def test_find_requests_per_run_on_s3(s3_options: dict[str, Any]) -> None:
    """Heads only: a bounded number of requests per run, whatever each run's length."""
    counts = []
    for steps in (2, 12):
        url = new_s3_url()
        s = ckptfs.open_store(url, **s3_options)
        for i in range(8):
            r = s.start_run(f"r{i}")
            for j in range(steps):
                r.checkpoint({"i": j}, labels={"k": str(i)})
        s.close()
        st = ckptfs.open_store(url, **s3_options)
        st.repo.storage.fs.invalidate_cache()  # type: ignore[attr-defined]
        from ckptfs.ops.find import Query, find
        with S3Requests(st) as ops:
            rep = find(st.repo, Query(labels=(("k", "3"),)))
        assert [f.snapshot.run for f in rep.found] == ["r3"] and rep.snapshots == 8
        counts.append(sum(ops.values()))
        print(steps, dict(ops))
    assert counts[0] == counts[1], counts  # not the runs' length
    assert counts[1] <= 2 + 3 * 8, counts  # config and run listing, then ~3 per run


@pytest.mark.parametrize("command", ["restore", "find"])
def test_progress_on_a_terminal_only(tmp_path: Path, command: str) -> None:
    """Bytes read on a terminal (restore streams blobs of any size), nothing in a pipe."""
    from tests.test_cli_operator_ux import _under_pty

    url = str(tmp_path / "s")
    make_demo(url)
    argv = {"restore": ["agent@4", str(tmp_path / "out")], "find": ["--all"]}[command]
    rc, out, term = _under_pty(command, url, *argv)
    assert rc == 0, (out, term)
    assert f"{command} read:" in term and "B/s" in term and "objects" in term, term
    assert "Traceback" not in term
    again = {"restore": ["agent@4", str(tmp_path / "out2")], "find": ["--all"]}[command]
    assert cli(command, url, *again).stderr == ""
