"""An effect's owner SIGKILLed on this host does not block its restart until the deadline
(issue 35, item 7).

The maintenance lease is taken over at once when its holder provably no longer runs (the same
host, no process with its pid); an effect lease now is too: a restart right after the kill
reconciles (or ``ckptfs settle`` settles) at once instead of getting EffectInProgress for the
rest of the lease. A live owner still blocks, and so does an owner that cannot be proven gone
(another host, a pid that exists: maybe reused). Deadlines print as times.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import ckptfs
from ckptfs.errors import EffectInProgress
from ckptfs.runtime import effects as fx
from tests.clihelp import cli

HERE = Path(__file__).parent
KILLEE = str(HERE / "effect_killee.py")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(HERE.parent)}


def _owner_mid_call(tmp_path: Path, run_id: str) -> tuple[str, subprocess.Popen[str]]:
    """A process that issued effect k1 of ``run_id`` (600 s lease) and is inside its call."""
    url, marker = str(tmp_path / "store"), tmp_path / f"{run_id}.started"
    p = subprocess.Popen([sys.executable, KILLEE, url, run_id, str(marker)], env=_env(),
                         text=True, stderr=subprocess.PIPE)
    for _ in range(6000):  # bounded: the child writes the marker once its call has started
        if marker.exists() or p.poll() is not None:
            break
        time.sleep(0.01)
    assert marker.exists(), p.stderr.read() if p.poll() is not None and p.stderr else "no start"
    return url, p


def _kill(p: subprocess.Popen[str]) -> None:
    p.send_signal(signal.SIGKILL)
    assert p.wait(timeout=60) == -signal.SIGKILL


def test_a_restart_after_the_owner_was_killed_reconciles_at_once(tmp_path: Path) -> None:
    url, p = _owner_mid_call(tmp_path, "r")
    calls: list[str] = []
    try:
        run = ckptfs.open_store(url).resume("r")
        with pytest.raises(EffectInProgress) as live:  # alive: its lease holds
            run.effect("send", lambda: calls.append("again"), key="k1", timeout=600,
                       reconcile=lambda e: fx.NOT_DONE)
        msg = str(live.value)
        assert " UTC" in msg and " ms (" not in msg, msg  # the deadline as a time
    finally:
        _kill(p)
    seen: list[Any] = []
    run = ckptfs.open_store(url).resume("r")
    got = run.effect("send", lambda: calls.append("again") or "sent", key="k1", timeout=600,
                     reconcile=lambda e: seen.append(e.key) or fx.NOT_DONE)
    assert got == "sent" and seen == ["k1"] and calls == ["again"]  # before: EffectInProgress
    assert ckptfs.open_store(url).resume("r").ledger.effects["k1"].status == "completed"


def test_ckptfs_settle_after_the_owner_was_killed(tmp_path: Path) -> None:
    url, p = _owner_mid_call(tmp_path, "s")
    try:
        live = cli("settle", url, "s", "k1", "--failed", "not sent", check=None, env=_env())
        assert live.returncode != 0 and "wait=True" not in live.stderr, live.stderr
        assert "settle" in live.stderr and " UTC" in live.stderr, live.stderr
    finally:
        _kill(p)
    cli("settle", url, "s", "k1", "--failed", "not sent", env=_env())  # before: exit 3
    assert ckptfs.open_store(url).resume("s").ledger.effects["k1"].status == "failed"


def test_owners_that_cannot_be_proven_gone_still_hold(tmp_path: Path) -> None:
    """Only absence on this host is proof: another host's owner, a pid that exists (perhaps
    reused by another process), a name of another runtime's making all hold their lease."""
    mine = fx.process_owner()
    host, pid, nonce, tag = mine.split("/")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        assert not fx.owner_gone(f"{host}/{sleeper.pid}/{nonce}/{tag}")  # alive (or reused)
    finally:
        sleeper.kill()
        sleeper.wait(timeout=60)
    assert fx.owner_gone(f"{host}/{sleeper.pid}/{nonce}/{tag}")  # gone, on this host
    assert not fx.owner_gone(f"{host}/{sleeper.pid}/{nonce}/{'0' * 12}")  # another host
    assert not fx.owner_gone(f"{host}/{os.getpid()}/{'0' * 16}/{tag}")  # this process
    assert not fx.owner_gone(f"{host}/{sleeper.pid}/{nonce}")  # no host tag: not ours
    assert not fx.owner_gone("other-process")


def test_generating_the_vectors_gives_the_owner_name_back() -> None:
    """The conformance generator names a fixed owner while it writes the vectors; run inside a
    test process it left that name set, and every later effect on the same pytest-xdist worker
    named a foreign owner (this file's tests then failed after tests/test_conformance.py)."""
    from ckptfs_conformance.writer_cases import OWNER, fixed_owner

    mine = fx.process_owner()
    with pytest.raises(RuntimeError), fixed_owner():
        assert fx.process_owner() == OWNER
        raise RuntimeError("a generator that fails half-way")
    assert fx.process_owner() == mine
