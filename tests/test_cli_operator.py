"""The operator's command line (issue 18): wrong answers an operator could be misled by.

Every case runs ``ckptfs`` as a subprocess against a real store on local disk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import ckptfs
from tests.clihelp import cli


def _store(tmp_path: Path, runs: tuple[str, ...] = ("loop",), steps: int = 3) -> str:
    url = str(tmp_path / "store")
    store = ckptfs.open_store(url)
    for run_id in runs:
        run = store.start_run(run_id)
        for i in range(steps):
            run.checkpoint({"x": i, "text": f"step {i} " * 400}, "step")
    return url


# --- 1. an unknown --run is an error everywhere -------------------------------------------

@pytest.mark.parametrize("argv", [
    ["verify"], ["verify", "--read-data"], ["check"], ["du"],
    ["forget", "--keep-last", "1"], ["forget", "--keep-last", "1", "--dry-run"],
    ["copy"], ["export"],
])
def test_unknown_run_is_an_error(tmp_path: Path, argv: list[str]) -> None:
    url = _store(tmp_path)
    extra = {"copy": [str(tmp_path / "dst")], "export": [str(tmp_path / "out.zip")]}
    args = [argv[0], url, *extra.get(argv[0], []), *argv[1:], "--run", "loop1"]
    p = cli(*args, check=3)
    assert "no run 'loop1'" in p.stderr and "ckptfs ls" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
    # the known run alongside does not make the typo pass either
    p = cli(*args, "--run", "loop", check=3)
    assert "no run 'loop1'" in p.stderr


def test_known_run_still_works(tmp_path: Path) -> None:
    url = _store(tmp_path, runs=("loop", "other"))
    out = json.loads(cli("verify", url, "--run", "loop", "--json").stdout)
    assert out["snapshots"] == 3
    out = json.loads(cli("du", url, "--run", "other", "--json").stdout)
    assert [r["run"] for r in out["runs"]] == ["other"]
