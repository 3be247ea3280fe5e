"""The Python examples of README.md and of the guides (docs/guides/) run as written and print
what their comments say."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
GUIDES = ROOT / "docs" / "guides"


def python_example(path: Path = GUIDES / "python-api.md", after: str = "# The Python API") -> str:
    text = path.read_text()
    section = text[text.index(after):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)  # type: ignore[union-attr]


def test_the_readme_example_runs_and_pays_once(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(python_example(README, "## In your code"), "README.md", "exec"), {})
    assert out.getvalue().splitlines() == [
        "refunding inv-9", "{'step': 'refund'} 2", "{'amount': 120, 'refund_id': 're_inv-9'}"]


def test_the_api_example_runs_and_prints_what_it_says(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(python_example(), "python-api.md", "exec"), {})
    lines = out.getvalue().splitlines()
    assert re.fullmatch(r"blake3:[0-9a-f]{64} 2", lines[0])
    assert lines[1:-1] == ["{'step': 'refund'}", "b'%PDF-1.7'", "None", "True 2"]
    # a relative path is recorded absolute when the Ref is made (issue 35 item 13)
    assert lines[-1] == f"[('crm', '{tmp_path}/crm-4711.json does not exist')]"
    assert os.path.isdir(tmp_path / "store")


def test_the_typed_state_example_runs_and_prints_what_it_says(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = python_example(GUIDES / "typed-state.md", "# Typed state")
    import sys
    import types

    monkeypatch.chdir(tmp_path)
    module = types.ModuleType("readme_typed")  # dataclasses look their module up
    monkeypatch.setitem(sys.modules, "readme_typed", module)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "typed-state.md", "exec"), module.__dict__)
    assert out.getvalue().splitlines() == [
        "Order 4.50", "2024-05-08 ['email', 'sms']",
        "shop.Order {'sku': 'tea', 'price': Decimal('4.50')}"]


def test_the_readme_backup_cycle_runs_as_written(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 35: README's backup cycle (copy, forget at the source, copy again, restore from
    the copy), each line run as the ``ckptfs`` command, over the store the API example made."""
    import shlex
    import subprocess
    import sys

    monkeypatch.chdir(tmp_path)
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(python_example(README, "## In your code"), "README.md", "exec"), {})
    text = README.read_text()
    block = re.search(r"```sh\n(.*?)```", text[text.index("The backup cycle:"):], re.S)
    assert block is not None
    lines = [ln.split("#")[0].split() for ln in block.group(1).splitlines() if ln.strip()]
    assert [ln[:2] for ln in lines] == [["ckptfs", "copy"], ["ckptfs", "forget"],
                                        ["ckptfs", "copy"], ["ckptfs", "copy"],
                                        ["ckptfs", "restore"]]
    outs = []
    for ln in lines:
        done = subprocess.run([sys.executable, "-m", "ckptfs", *ln[1:]], capture_output=True,
                              text=True, timeout=120, cwd=tmp_path)
        assert done.returncode == 0, (shlex.join(ln), done.stdout, done.stderr)
        outs.append(done.stdout)
    assert "forgot 3 snapshots" in outs[1]
    assert "would copy 0 snapshots" in outs[2] and "dry run, nothing changed" in outs[2]
    import ckptfs
    backup, source = ckptfs.open_store("./backup"), ckptfs.open_store("./store")
    assert [s.seq for s in source.snapshots("ticket-4711")] == [4]
    assert [s.seq for s in backup.snapshots("ticket-4711")] == [1, 2, 3, 4]  # its own history
    restored = tmp_path / "restored"
    assert json.loads((restored / "plan.json").read_text()) == {"step": "refund"}
    assert len(json.loads((restored / "messages.json").read_text())) == 1
