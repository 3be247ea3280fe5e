"""The README's Python API example runs as written and prints what its comments say."""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def python_example() -> str:
    text = README.read_text()
    section = text[text.index("## The Python API"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)  # type: ignore[union-attr]


def test_the_api_example_runs_and_prints_what_it_says(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(python_example(), "README.md", "exec"), {})
    lines = out.getvalue().splitlines()
    assert re.fullmatch(r"blake3:[0-9a-f]{64} 2", lines[0])
    assert lines[1:-1] == ["{'step': 'refund'}", "b'%PDF-1.7'", "None", "True 2"]
    # a relative path is recorded absolute when the Ref is made (issue 35 item 13)
    assert lines[-1] == f"[('crm', '{tmp_path}/crm-4711.json does not exist')]"
    assert os.path.isdir(tmp_path / "store")


def test_the_typed_state_example_runs_and_prints_what_it_says(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = README.read_text()
    section = text[text.index("### Typed state"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)  # type: ignore[union-attr]
    import sys
    import types

    monkeypatch.chdir(tmp_path)
    module = types.ModuleType("readme_typed")  # dataclasses look their module up
    monkeypatch.setitem(sys.modules, "readme_typed", module)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), module.__dict__)
    assert out.getvalue().splitlines() == [
        "Order 4.50", "2024-05-08 ['email', 'sms']",
        "shop.Order {'sku': 'tea', 'price': Decimal('4.50')}"]
