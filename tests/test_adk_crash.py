"""Google ADK with its real Runner and a scripted model (tests/adk_scripted.py), processes
killed with SIGKILL and resumed in fresh processes (tests/adk_child.py), no network:

* a conversation spans a SIGKILL and a resume, on local disk and on moto S3;
* a confirmed, side-effecting tool killed within milliseconds after its effect: the client
  sends the confirmation again (it never saw the result). Through ckptfs (``OnceTool``) the
  effect never happens twice; ADK's own SqliteSessionService with a plain FunctionTool pays
  twice (counted; DatabaseSessionService needs SQLAlchemy, not installed here). 5 trials for
  ckptfs and 3 for SQLite by default, 20 each with ``CKPTFS_ADK_TRIALS=20`` (or --long);
* tool confirmation survives a restart;
* two processes appending to one session: exactly one commits, the other gets SessionConflict.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import new_s3_url

pytest.importorskip("google.adk")

from tests.adk_scripted import APP, USER  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
LONG = bool(os.environ.get("CKPTFS_LONG"))
TRIALS = int(os.environ.get("CKPTFS_ADK_TRIALS") or (20 if LONG else 5))
BASELINE_TRIALS = int(os.environ.get("CKPTFS_ADK_TRIALS") or (20 if LONG else 3))
#: how long after the effect the process is killed, by trial (ms; 0: inside the tool)
DELAYS = (0, 1, 3, 10, 30)


def child(kind: str, url: str, sid: str, mode: str, *args: str,
          env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    full = {**os.environ, "PYTHONPATH": path, **(env or {})}
    return subprocess.run([sys.executable, "-m", "tests.adk_child", kind, url, sid, mode, *args],
                          capture_output=True, text=True, env=full, timeout=300, cwd=ROOT)


def lines(out: str, tag: str) -> list[list[str]]:
    return [ln.split()[1:] for ln in out.splitlines() if ln.startswith(tag + " ")]


def shown(kind: str, url: str, sid: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    p = child(kind, url, sid, "show")
    assert p.returncode == 0, p.stderr[-3000:]
    state = json.loads(next(ln for ln in p.stdout.splitlines() if ln.startswith("STATE "))[6:])
    events = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    return state, events


def _texts(events: list[dict[str, Any]]) -> list[str]:
    out = []
    for ev in events:
        for part in (ev.get("content") or {}).get("parts") or []:
            if "text" in part:
                out.append(part["text"])
            elif "function_call" in part:
                out.append("call " + part["function_call"]["name"])
            elif "function_response" in part:
                out.append("response " + part["function_response"]["name"])
    return out


def _conversation(url: str) -> None:
    # turn 1: user + reply (2 appends); turn 2: user, call, response (5): killed right after
    # the tool's response was committed, before the model's answer
    p = child("ckptfs", url, "c1", "turns", "hello", "remember color blue", "never sent",
              env={"ADK_KILL_AFTER_APPENDS": "5"})
    assert p.returncode == -signal.SIGKILL, p.stderr[-3000:]
    state, events = shown("ckptfs", url, "c1")
    assert _texts(events) == ["hello", "echo: hello", "remember color blue", "call remember",
                              "response remember"]
    # the tool's state delta was committed with its event, each scope where ADK keeps it
    assert state == {"color": "blue", "user:color": "blue", "app:color": "blue"}
    p = child("ckptfs", url, "c1", "turns", "bye")  # a fresh process resumes the session
    assert p.returncode == 0, p.stderr[-3000:]
    state, events = shown("ckptfs", url, "c1")
    assert _texts(events)[5:] == ["bye", "echo: bye"]
    assert len({e["id"] for e in events}) == len(events) == 7
    # app: and user: state are shared with a new session of the user; session state is not
    p = child("ckptfs", url, "c2", "turns", "hi")
    assert p.returncode == 0, p.stderr[-3000:]
    state2, _ = shown("ckptfs", url, "c2")
    assert state2 == {"user:color": "blue", "app:color": "blue"}


def test_conversation_spans_sigkill_local(tmp_path: Path) -> None:
    _conversation(str(tmp_path / "store"))


def test_conversation_spans_sigkill_s3(s3_options: dict[str, Any]) -> None:
    _conversation(new_s3_url())


def _trials(kind: str, url: str, effects: Path, n: int) -> tuple[dict[str, int], dict[str, str]]:
    """``n`` kill trials, one process each (it resumes the previous trial, then runs its own
    and is killed); the effects per trial and the resume outcome per trial."""
    env = {"ADK_EFFECTS": str(effects)}
    outcomes: dict[str, str] = {}
    prev: tuple[str, str] = ("-", "-")
    for i in range(n + 1):
        sid = f"t{100 + i}" if i < n else "-"
        p = child(kind, url, sid if sid != "-" else "t-last", "trial", *prev, sid,
                  str(DELAYS[i % len(DELAYS)]), env=env)
        for o in lines(p.stdout, "OUTCOME"):
            outcomes[o[0]] = " ".join(o[1:])
        if sid == "-":
            assert p.returncode == 0, p.stderr[-3000:]
            break
        confirm = lines(p.stdout, "CONFIRM")
        assert confirm and confirm[0][1] != "None", (p.stdout, p.stderr[-3000:])
        survived = lines(p.stdout, "SURVIVED")
        assert p.returncode == -signal.SIGKILL or survived, (p.returncode, p.stderr[-3000:])
        prev = (sid, confirm[0][1])
    paid = collections.Counter(ln.split()[1] for ln in effects.read_text().splitlines())
    return {f"t{k}": v for k, v in paid.items()}, outcomes


def test_tool_killed_after_its_effect_runs_once(tmp_path: Path, capsys: Any) -> None:
    """Through ckptfs no trial pays twice; the resume returns the recorded result or raises
    EffectInDoubt. ADK's SQLite store with a plain FunctionTool pays again on resume."""
    paid, outcomes = _trials("ckptfs", str(tmp_path / "store"), tmp_path / "ck.txt", TRIALS)
    assert len(paid) == TRIALS and set(paid.values()) == {1}, paid
    assert set(outcomes) == set(paid)
    assert set(outcomes.values()) <= {"RESULT", "IN-DOUBT"}, outcomes
    assert outcomes["t100"] == "IN-DOUBT"  # killed inside the tool: never called again
    base, base_out = _trials("sqlite", str(tmp_path / "adk.db"), tmp_path / "sq.txt",
                             BASELINE_TRIALS)
    dup = sum(v - 1 for v in base.values())
    assert base["t100"] == 2  # killed inside the tool: the resume paid again
    with capsys.disabled():
        print(f"\nADK kill trials: ckptfs {TRIALS} trials, 0 duplicate effects "
              f"({collections.Counter(outcomes.values())}); SqliteSessionService "
              f"{BASELINE_TRIALS} trials, {dup} duplicate effects "
              f"({collections.Counter(base_out.values())})")


def test_database_session_service_pays_again_on_resume(tmp_path: Path, capsys: Any) -> None:
    """The same schedule against ADK's DatabaseSessionService (SQLAlchemy, aiosqlite): the
    baseline that ckptfs's 0 duplicates compare with. A trial killed inside the tool pays
    again when the client resends its confirmation."""
    pytest.importorskip("sqlalchemy")
    pytest.importorskip("aiosqlite")
    pytest.importorskip("greenlet")  # SQLAlchemy's asyncio extension (sqlalchemy[asyncio])
    url = f"sqlite+aiosqlite:///{tmp_path / 'adk-db.sqlite'}"
    base, base_out = _trials("database", url, tmp_path / "db.txt", BASELINE_TRIALS)
    dup = sum(v - 1 for v in base.values())
    assert base["t100"] == 2  # killed inside the tool: the resume paid again
    with capsys.disabled():
        print(f"\nADK kill trials: DatabaseSessionService(sqlite+aiosqlite) {BASELINE_TRIALS} "
              f"trials, {dup} duplicate effects ({collections.Counter(base_out.values())})")


def test_tool_confirmation_survives_a_restart(tmp_path: Path) -> None:
    url, effects = str(tmp_path / "store"), tmp_path / "fx.txt"
    env = {"ADK_EFFECTS": str(effects)}
    p = child("ckptfs", url, "s", "ask", "pay 7", env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    (cid,) = lines(p.stdout, "CONFIRM")[0]
    assert not effects.exists()  # asked, not paid
    p = child("ckptfs", url, "s", "confirm", cid, env=env)  # another process confirms
    assert p.stdout.split() == ["RESULT"], p.stderr[-3000:]
    assert effects.read_text().split()[:2] == ["paid", "7"]
    _, events = shown("ckptfs", url, "s")
    assert _texts(events)[-2:] == ["response pay", "done: pay -> {'paid': 7}"]
    p = child("ckptfs", url, "s", "confirm", cid, env=env)  # sent again: nothing happens
    assert p.returncode == 0 and len(effects.read_text().splitlines()) == 1


@pytest.mark.parametrize("where", ["local", "s3"])
def test_two_processes_append_exactly_one_commits(tmp_path: Path, where: str,
                                                  request: pytest.FixtureRequest) -> None:
    if where == "s3":
        request.getfixturevalue("s3_options")
        url = new_s3_url()
    else:
        url = str(tmp_path / "store")
    p = child("ckptfs", url, "s", "turns", "hello")
    assert p.returncode == 0, p.stderr[-3000:]
    go = tmp_path / "go"
    procs = []
    for i in range(2):
        env = {**os.environ, "PYTHONPATH": str(ROOT), "ADK_READY": str(tmp_path / f"ready{i}"),
               "ADK_GO": str(go)}
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "tests.adk_child", "ckptfs", url, "s", "append", f"from {i}"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT))
    while not all((tmp_path / f"ready{i}").exists() for i in range(2)):
        assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
        time.sleep(0.01)
    go.touch()  # both read the session at the same revision; now both append
    outs = [p.communicate(timeout=300) for p in procs]
    results = sorted(o[0].split()[0] for o in outs)
    assert results == ["COMMITTED", "CONFLICT"], outs
    loser = next(o[0] for o in outs if o[0].startswith("CONFLICT"))
    assert loser.split()[1] == "SessionConflict" and "get_session" in loser, loser
    _, events = shown("ckptfs", url, "s")
    assert _texts(events)[2:] in (["from 0"], ["from 1"])


def test_in_doubt_effect_is_settled_by_reconcile(tmp_path: Path) -> None:
    """After a kill inside the tool, ``reconcile=`` asks the outside world: the recorded
    result then comes from it, and the function is not called again."""
    from ckptfs.integrations.google_adk import CkptfsSessionService
    from tests.adk_scripted import confirm, runner, turn

    url, effects = str(tmp_path / "store"), tmp_path / "fx.txt"
    env = {"ADK_EFFECTS": str(effects)}
    p = child("ckptfs", url, "t7", "trial", "-", "-", "t7", "0", env=env)
    assert p.returncode == -signal.SIGKILL, p.stderr[-3000:]
    (sid, cid) = lines(p.stdout, "CONFIRM")[0]
    calls: list[Any] = []

    def pay(amount: int) -> dict[str, Any]:
        calls.append(amount)
        return {"paid": amount}

    def found(effect: Any) -> Any:
        return {"paid": 7, "found": True} if "paid 7" in effects.read_text() else None

    async def resume() -> list[Any]:
        svc = CkptfsSessionService(url)
        r = runner(svc, [svc.once(pay, require_confirmation=True, reconcile=found)])
        return await turn(r, sid, confirm(cid))

    events = asyncio.run(resume())
    assert calls == [] and len(effects.read_text().splitlines()) == 1
    responses = [fr.response for ev in events for fr in ev.get_function_responses()]
    assert responses == [{"paid": 7, "found": True}]
    assert APP and USER
