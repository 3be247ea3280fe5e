"""CkptfsSession (ckptfs.integrations.openai_agents) with the SDK's real Runner and its own
test model (agents.testing.ScriptedModel driven by a rule; no network):

* the Session protocol, differentially against the SDK's SQLiteSession;
* a conversation spans a SIGKILL and a resume in a fresh process, on local disk and moto S3;
* a paying tool killed right after its effect, N trials (CKPTFS_AGENT_TRIALS, default 5; the
  issue's 20 with CKPTFS_AGENT_TRIALS=20), against ckptfs and against SQLiteSession: the
  duplicate payments of each are counted (ckptfs must have none);
* approval (needs_approval + RunState) survives a restart;
* two processes resuming one session: exactly one commits, the other gets SessionConflict;
* get_items(limit=10) on a 10,000-item session reads a bounded number of objects.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import SQLiteSession  # noqa: E402

import ckptfs  # noqa: E402
from ckptfs.errors import SessionConflict  # noqa: E402
from ckptfs.integrations.openai_agents import CkptfsSession, session_run_id  # noqa: E402
from tests import agents_scenarios as sc  # noqa: E402
from tests.conftest import new_s3_url  # noqa: E402
from tests.test_agent_common import CountingStorage  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TRIALS = int(os.environ.get("CKPTFS_AGENT_TRIALS", "5"))


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["OPENAI_AGENTS_DISABLE_TRACING"] = "1"
    return env


def _run(fn: str, *args: Any) -> int:
    """Run scenario ``fn`` in a fresh Python process; its exit code (-9: SIGKILLed)."""
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); from tests import agents_scenarios "
            f"as sc; sc.{fn}(*{json.dumps(list(args))})")
    p = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True,
                       text=True, timeout=300)
    if p.returncode not in (0, -9):
        raise AssertionError(f"{fn} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return p.returncode


class Zygote:
    """tests.agents_zygote: forks a fresh child per scenario."""

    def __init__(self) -> None:
        self.p = subprocess.Popen([sys.executable, str(ROOT / "tests" / "agents_zygote.py")],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  env=_env())

    def run(self, fn: str, *args: Any) -> int:
        assert self.p.stdin is not None and self.p.stdout is not None
        self.p.stdin.write(json.dumps({"fn": fn, "args": list(args)}) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise AssertionError("the zygote died")
        return int(json.loads(line)["status"])

    def close(self) -> None:
        assert self.p.stdin is not None
        self.p.stdin.close()
        self.p.wait(timeout=60)


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    z = Zygote()
    yield z
    z.close()


# -- the Session protocol, against SQLiteSession ------------------------------------------------
async def _script(session: Any) -> list[Any]:
    out: list[Any] = []
    items = [{"role": "user", "content": f"m{i}"} for i in range(7)]
    out.append(await session.get_items())
    await session.add_items(items[:3])
    await session.add_items([])
    await session.add_items(items[3:])
    out += [await session.get_items(), await session.get_items(limit=2),
            await session.get_items(limit=100), await session.pop_item(),
            await session.get_items(limit=1)]
    for _ in range(7):
        out.append(await session.pop_item())
    out.append(await session.get_items())
    await session.add_items(items[:2])
    await session.clear_session()
    out += [await session.get_items(), await session.pop_item()]
    await session.add_items([{"type": "message", "role": "assistant",
                              "content": [{"type": "output_text", "text": "ok",
                                           "annotations": []}]}])
    out.append(await session.get_items())
    return out


def test_session_protocol_matches_sqlite(tmp_path: Path) -> None:
    mine = asyncio.run(_script(CkptfsSession("s", str(tmp_path / "store"))))
    theirs = asyncio.run(_script(SQLiteSession("s", str(tmp_path / "db.sqlite"))))
    assert mine == theirs
    again = CkptfsSession("s", str(tmp_path / "store"))  # another reader sees the same
    assert asyncio.run(again.get_items()) == theirs[-1]


def test_settings_limit(tmp_path: Path) -> None:
    s = CkptfsSession("s", str(tmp_path / "store"), session_settings={"limit": 2})
    asyncio.run(s.add_items([{"role": "user", "content": str(i)} for i in range(5)]))
    assert [x["content"] for x in asyncio.run(s.get_items())] == ["3", "4"]
    assert len(asyncio.run(s.get_items(limit=4))) == 4


def test_runner_conversation(tmp_path: Path) -> None:
    """Turns through the real Runner: each model call sees the earlier turns."""
    work = str(tmp_path)
    url = str(tmp_path / "store")
    sc.oai_turn("ckptfs", url, "chat", work, "hello")
    sc.oai_turn("ckptfs", url, "chat", work, "pay 5")
    final = json.loads((tmp_path / "final.json").read_text())
    assert final["final"] == "payment handled"
    assert final["history"] == ["hello", "message", "pay 5", "function_call",
                                "function_call_output", "message"]
    assert sc.payments(work) == 1


# -- SIGKILL and resume in a fresh process --------------------------------------------------------
def _kill_and_resume(url: str, work: Path) -> dict[str, Any]:
    assert _run("oai_turn", "ckptfs", url, "k", str(work), "hello") == 0
    assert _run("oai_turn", "ckptfs", url, "k", str(work), "pay 5", 0) == -9  # killed
    assert sc.payments(str(work)) == 1
    assert _run("oai_turn", "ckptfs", url, "k", str(work), "continue") == 0
    return dict(json.loads((work / "final.json").read_text()))


def test_kill_and_resume_local(tmp_path: Path) -> None:
    final = _kill_and_resume(str(tmp_path / "store"), tmp_path)
    assert sc.payments(str(tmp_path)) == 1  # never paid twice
    assert final["final"] == "payment handled"
    # the first turn, the killed turn's call and its (in-doubt) outcome, the resumed turn
    assert final["history"][:3] == ["hello", "message", "pay 5"]
    assert final["history"][3:] == ["function_call", "function_call_output", "continue",
                                    "message"]


def test_kill_and_resume_s3(tmp_path: Path, s3_options: dict[str, Any]) -> None:
    url = new_s3_url()
    final = _kill_and_resume(url, tmp_path)
    assert sc.payments(str(tmp_path)) == 1
    assert final["final"] == "payment handled"
    store = ckptfs.open_store(url, **s3_options)
    assert session_run_id("k") in store.runs()


# -- duplicate effects: ckptfs against the SDK's SQLiteSession -------------------------------------
def _trials(zygote: Zygote, tmp_path: Path, backend: str, n: int) -> tuple[int, int]:
    """(duplicate payments, kills) over ``n`` trials: pay, die 0-3 ms after the effect,
    resume in a fresh process with "continue"."""
    rng = random.Random(34)
    dups = kills = 0
    for i in range(n):
        work = tmp_path / f"{backend}-{i}"
        work.mkdir()
        url = str(work / ("store" if backend == "ckptfs" else "db.sqlite"))
        status = zygote.run("oai_turn", backend, url, "t", str(work), "pay 5",
                            rng.choice([0, 0, 0.5, 1, 2, 3]))
        kills += status == -9
        assert zygote.run("oai_turn", backend, url, "t", str(work), "continue") == 0
        dups += sc.payments(str(work)) - 1
    return dups, kills


def test_tool_killed_after_effect_never_runs_twice(zygote: Zygote, tmp_path: Path) -> None:
    mine, kills = _trials(zygote, tmp_path, "ckptfs", TRIALS)
    theirs, their_kills = _trials(zygote, tmp_path, "sqlite", TRIALS)
    print(f"\nduplicate payments over {TRIALS} kill trials: ckptfs {mine} ({kills} killed), "
          f"SQLiteSession {theirs} ({their_kills} killed)")
    assert kills == TRIALS and their_kills == TRIALS
    assert mine == 0
    assert theirs > 0  # the schedule does hit the window the SDK's own store leaves open


# -- approval survives a restart ---------------------------------------------------------------------
def test_approval_survives_restart(zygote: Zygote, tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    assert zygote.run("oai_approval", url, "ap", str(tmp_path), "ask") == 0
    asked = json.loads((tmp_path / "asked.json").read_text())
    assert asked["interruptions"] == ["pay"] and asked["version"]
    assert sc.payments(str(tmp_path)) == 0  # nothing paid before the approval
    assert zygote.run("oai_approval", url, "ap", str(tmp_path), "approve") == 0
    final = json.loads((tmp_path / "final.json").read_text())
    assert final["final"] == "payment handled"
    assert sc.payments(str(tmp_path)) == 1
    assert "function_call_output" in final["types"]
    from ckptfs.integrations.openai_agents import stored_run_states

    assert stored_run_states(url, ["ap"]) == {"ap": None}  # cleared after the resume


def test_stored_state_version_is_checked(tmp_path: Path) -> None:
    from ckptfs.integrations.openai_agents import run_state_readable, stored_run_states

    url = str(tmp_path / "store")
    s = CkptfsSession("v", url)
    s.log.append([], meta={"oai_run_state": {"schema_version": "0.1", "sdk": "0.0.1",
                                             "state": {}}})
    assert stored_run_states(url, ["v", "none"]) == {"v": ("0.1", False), "none": None}
    assert not run_state_readable("0.1")


# -- two processes resume one session ----------------------------------------------------------------
def test_two_processes_one_commits(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    asyncio.run(CkptfsSession("r", url).add_items([{"role": "user", "content": "start"}]))
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); from tests import agents_scenarios "
            "as sc; sc.oai_race(*sys.argv[1:])")
    procs = [subprocess.Popen([sys.executable, "-c", code, url, "r", str(tmp_path), name],
                              env=_env()) for name in ("a", "b")]
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    outs = sorted((tmp_path / f"race-{n}").read_text() for n in ("a", "b"))
    assert outs[1] == "ok" and outs[0].startswith("conflict: ")
    assert "another process committed" in outs[0]
    items = asyncio.run(CkptfsSession("r", url).get_items())
    assert len(items) == 2  # the start and exactly one of the racers' items


def test_conflict_in_process(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    a, b = CkptfsSession("c", url), CkptfsSession("c", url)
    asyncio.run(a.get_items())
    asyncio.run(b.get_items())
    asyncio.run(a.add_items([{"role": "user", "content": "a"}]))
    with pytest.raises(SessionConflict):
        asyncio.run(b.add_items([{"role": "user", "content": "b"}]))


# -- O(limit) reads ------------------------------------------------------------------------------------
def test_get_items_reads_are_bounded(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    s = CkptfsSession("long", url)
    for p in range(99):
        s.log.append([{"role": "user", "content": f"{p}-{j}"} for j in range(100)])
    for i in range(100):
        s.log.append([{"role": "user", "content": f"tail {i}"}])
    counting = CountingStorage(url)
    fresh = CkptfsSession("long", ckptfs.Store(counting))
    items = asyncio.run(fresh.get_items(limit=10))
    assert [x["content"] for x in items] == [f"tail {i}" for i in range(90, 100)]
    calls = sum(counting.calls.values())
    print(f"\nget_items(limit=10) on 10,000 items: {calls} storage calls {dict(counting.calls)}")
    assert calls <= 50
