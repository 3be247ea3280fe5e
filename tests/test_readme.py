"""The Python examples of README.md and of the guides (docs/guides/) run as written and print
what their comments say."""

from __future__ import annotations

import contextlib
import io
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
