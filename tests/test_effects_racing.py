"""Real processes racing for one effect (issue 13, defect 4): 8 processes resume one head and
call the same effect with ``reconcile=``; the effect function runs at most once and the call
that landed is recorded. ``CKPTFS_EFFECT_RACE_ROUNDS`` (default 1) sets the rounds per test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import ckptfs
from tests.effect_racer import landed

RACER = Path(__file__).with_name("effect_racer.py")
ROOT = Path(__file__).resolve().parent.parent
ROUNDS = int(os.environ.get("CKPTFS_EFFECT_RACE_ROUNDS", "1"))
PROCESSES = 8


def spawn(url: str, world: Path, go: Path, mode: str, wid: str, *extra: str
          ) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, str(RACER), url, str(world), str(go), mode, wid,
                             *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)


def report(p: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    [line] = [x for x in out.splitlines() if x.startswith("{")]
    got: dict[str, Any] = json.loads(line)
    assert got["outcome"] != "error", got
    return got


def prepared(tmp_path: Path, i: int) -> tuple[str, Path, Path]:
    url = str(tmp_path / f"store{i}")
    ckptfs.open_store(url).start_run("r").checkpoint({"step": 1})
    return url, tmp_path / f"world{i}", tmp_path / f"go{i}"


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_resumes_that_reconcile_while_the_first_call_runs_do_not_call_again(
        tmp_path: Path, round_: int) -> None:
    """The issue's schedule: A committed the intent and is inside the call (not landed yet);
    7 processes resume that head and reconcile. Before leases, one of them got NOT_DONE,
    re-issued and called again, and A then got ConflictError although its call happened."""
    url, world, go = prepared(tmp_path, round_)
    go.touch()
    a = spawn(url, world, go, "hold", "A")
    stop = time.monotonic() + 60
    while not Path(f"{world}.in-call").exists():  # A's intent is committed, A is in the call
        assert a.poll() is None and time.monotonic() < stop
        time.sleep(0.01)
    others = [spawn(url, world, go, "plain", f"B{i}") for i in range(PROCESSES - 1)]
    outs = [report(p) for p in others]
    Path(f"{world}.release").touch()
    first = report(a)
    assert landed(world) == ["A"]  # the effect function ran exactly once
    assert first["outcome"] == "result" and first["result"] == {"by": "A"}  # not lost
    assert {o["outcome"] for o in outs} == {"in-progress"}, outs
    assert all(o["calls"] == 0 and o["deadline"] for o in outs)
    eff = ckptfs.open_store(url).ledger("r").effects["k"]
    assert (eff.status, eff.via, eff.issues, eff.result) == ("completed", "call", 1, {"by": "A"})


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_eight_racing_resumes_with_wait_perform_the_effect_once(tmp_path: Path,
                                                                round_: int) -> None:
    """8 processes resume one head at once; each retries on ConflictError (resumes again, so it
    may see another's intent) and waits for a running lease: one call, and every process gets
    the recorded result."""
    url, world, go = prepared(tmp_path, round_)
    procs = [spawn(url, world, go, "plain", f"P{i}", "--wait", "--timeout", "30",
                   "--retries", "20") for i in range(PROCESSES)]
    time.sleep(0.3)  # not an assertion: lets the processes start before they race
    go.touch()
    outs = [report(p) for p in procs]
    calls = Counter(landed(world))
    assert sum(calls.values()) == 1, calls
    [winner] = calls
    assert all(o["outcome"] == "result" and o["result"] == {"by": winner} for o in outs), outs
    assert sum(o["calls"] for o in outs) == 1
    eff = ckptfs.open_store(url).ledger("r").effects["k"]
    assert (eff.status, eff.issues, eff.result) == ("completed", 1, {"by": winner})
