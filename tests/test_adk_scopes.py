"""ADK ``app:``/``user:`` state and the event that changed them: two writes in two runs, so a
process killed between them leaves the deltas pending in the session's head, and the next read
of the session, in any process, applies them (last writer wins by event time)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("google.adk")

from google.adk.events.event import Event  # noqa: E402
from google.adk.events.event_actions import EventActions  # noqa: E402

from ckptfs.integrations.google_adk import CkptfsSessionService, names  # noqa: E402
from tests.adk_scripted import APP, USER  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _event(delta: dict[str, Any], ts: float) -> Event:
    return Event(author="clerk", invocation_id="inv", timestamp=ts,
                 actions=EventActions(state_delta=delta))


def _lost_scopes(svc: CkptfsSessionService) -> None:
    """The next event's app:/user: commit never happens (its process "died" there)."""
    svc._apply_scopes = lambda *a, **kw: None  # type: ignore[method-assign]


def test_pending_scope_deltas_are_applied_by_the_next_read(tmp_path: Path) -> None:
    url = str(tmp_path / "store")

    async def go() -> None:
        a = CkptfsSessionService(url)
        s = await a.create_session(app_name=APP, user_id=USER, session_id="a")
        _lost_scopes(a)
        await a.append_event(s, _event({"app:color": "blue", "user:size": "L", "x": 1}, 10.0))
        # what the store holds without the repair: the event, not its app:/user: state
        assert a._scope_state(names.app_run(APP)) == {}
        fresh = CkptfsSessionService(url)
        got = await fresh.get_session(app_name=APP, user_id=USER, session_id="a")
        assert got is not None and len(got.events) == 1
        assert got.state == {"x": 1, "app:color": "blue", "user:size": "L"}
        other = await fresh.create_session(app_name=APP, user_id=USER, session_id="b")
        assert other.state == {"app:color": "blue", "user:size": "L"}

    asyncio.run(go())


def test_a_late_repair_keeps_a_newer_write(tmp_path: Path) -> None:
    url = str(tmp_path / "store")

    async def go() -> None:
        a = CkptfsSessionService(url)
        s = await a.create_session(app_name=APP, user_id=USER, session_id="a")
        _lost_scopes(a)
        await a.append_event(s, _event({"app:color": "blue", "app:shape": "round"}, 10.0))
        b = CkptfsSessionService(url)  # another session writes app:color later (ts 20)
        sb = await b.create_session(app_name=APP, user_id=USER, session_id="b")
        await b.append_event(sb, _event({"app:color": "red"}, 20.0))
        fresh = CkptfsSessionService(url)
        got = await fresh.get_session(app_name=APP, user_id=USER, session_id="a")
        assert got is not None
        assert {k: v for k, v in got.state.items() if k.startswith("app:")} == {
            "app:color": "red", "app:shape": "round"}
        # the next event of the session clears what was pending: a later read repairs nothing
        await fresh.append_event(got, _event({"y": 2}, 30.0))
        head = fresh.store.resume(fresh.find(names.session_base(APP, USER, "a"))[0])
        assert head.state["scopes"] == {}

    asyncio.run(go())


def test_sigkill_between_event_and_scope_state_is_repaired(tmp_path: Path) -> None:
    """The crash point: SIGKILL after the event's commit, before its app:/user: commit."""
    url = str(tmp_path / "store")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ADK_KILL_BEFORE_SCOPES": "1"}

    def child(sid: str, mode: str, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tests.adk_child", "ckptfs", url, sid,
                               mode, *args], capture_output=True, text=True, cwd=ROOT,
                              env={**env, **extra}, timeout=300)

    p = child("c1", "turns", "remember color blue")
    assert p.returncode == -signal.SIGKILL, p.stderr[-3000:]
    # the killed process committed the tool's event; its app:/user: commit never happened
    svc = CkptfsSessionService(url)
    assert svc._scope_state(names.app_run(APP)) == {}
    assert svc._scope_state(names.user_run(APP, USER)) == {}
    svc.close()
    p = child("c1", "show", ADK_KILL_BEFORE_SCOPES="")
    assert p.returncode == 0, p.stderr[-3000:]
    state = json.loads(next(ln for ln in p.stdout.splitlines() if ln.startswith("STATE "))[6:])
    assert state == {"color": "blue", "user:color": "blue", "app:color": "blue"}
    p = child("c2", "show", ADK_KILL_BEFORE_SCOPES="")  # another session of the user
    state2 = json.loads(next(ln for ln in p.stdout.splitlines() if ln.startswith("STATE "))[6:])
    assert state2 == {"user:color": "blue", "app:color": "blue"}
