"""Helpers for driving the ``ckptfs`` CLI as a subprocess, and a small demo-like store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import ckptfs


def cli(*args: str, check: int | None = 0, env: dict[str, str] | None = None,
        text: bool = True) -> subprocess.CompletedProcess[Any]:
    """Run ``python -m ckptfs.cli ARGS``; assert the exit code when ``check`` is not None."""
    p = subprocess.run([sys.executable, "-m", "ckptfs.cli", *args], capture_output=True,
                       text=text, timeout=120, env=env)
    if check is not None:
        assert p.returncode == check, (p.returncode, p.stdout, p.stderr)
    return p


def cli_json(*args: str) -> Any:
    return json.loads(cli(*args, "--json").stdout)


def make_demo(url: str) -> dict[str, Any]:
    """Run ``agent`` 4 steps, resume it for 2 more, fork ``debug`` from agent@2.

    Returns the states by ``RUN@SEQ`` so tests compare what the CLI prints with what was saved.
    """
    store = ckptfs.open_store(url)
    page = os.path.join(os.path.dirname(os.path.abspath(url)), "page.txt")
    with open(page, "w") as f:
        f.write("an external page the run only references\n")
    states: dict[str, Any] = {}
    run = store.start_run("agent", schema=("agent", 2))
    msgs: list[dict[str, Any]] = []
    for i in range(1, 5):
        msgs.append({"role": "user", "content": f"step {i} " * 5000, "n": i})
        state = {"messages": list(msgs), "plan": {"step": i, "tools": ["search"]},
                 "raw": b"\x00\xffbytes", "report": ckptfs.Blob(os.urandom(3000) * 30)}
        run.checkpoint(state, "step")
        states[f"agent@{i}"] = state
    run = store.resume("agent")
    for i in range(5, 7):
        msgs.append({"role": "assistant", "content": f"answer {i} " * 5000, "n": i})
        state = {"messages": list(msgs), "plan": {"step": i, "tools": []},
                 "web": ckptfs.Ref(f"file://{page}", size=os.path.getsize(page))}
        run.checkpoint(state, "approval" if i == 6 else "step")
        states[f"agent@{i}"] = state
    fork = store.fork("agent@2", "debug")
    fork.checkpoint(fork.state, "step")
    states["debug@1"] = states["agent@2"]
    return states
