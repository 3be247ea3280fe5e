"""Pydantic AI in a ckptfs store (ckptfs.integrations.pydantic_ai), with the real agent runner
and its own FunctionModel (driven by a rule: pay unless the history shows a payment result;
a fresh tool call id per model call), no network:

* CkptfsMessageHistory: a conversation over several runs, O(limit) loads (counted);
* a conversation spans a SIGKILL and a resume in a fresh process, on local disk and moto S3;
* a paying tool killed right after its effect, N trials (CKPTFS_AGENT_TRIALS, default 5):
  ckptfs (history + once) against the harness's FileStepStore resumed as its README shows
  (and CkptfsStepStore under the same harness flow, for the record); duplicates counted;
* CkptfsStepStore under the harness's StepPersistence: runs, events, snapshots, tool effects;
  a lone ``started`` left by a killed process is reported unresolved and never re-run, where
  FileStepStore re-runs it;
* human approval (requires_approval, DeferredToolResults) survives a restart;
* two writers of one conversation: exactly one commits (the two-process race is in
  test_openai_agents.py: the same ItemLog).
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")
pytest.importorskip("pydantic_ai_harness")

from pydantic_ai import Agent, RunContext  # noqa: E402
from pydantic_ai.messages import ModelResponse, ToolCallPart  # noqa: E402
from pydantic_ai.models.function import FunctionModel  # noqa: E402
from pydantic_ai_harness import StepPersistence  # noqa: E402
from pydantic_ai_harness.step_persistence import (  # noqa: E402
    FileStepStore,
    RunRecord,
    ToolEffectRecord,
    continue_run,
)

import ckptfs  # noqa: E402
from ckptfs.errors import EffectInDoubt, SessionConflict  # noqa: E402
from ckptfs.integrations.pydantic_ai import CkptfsMessageHistory, CkptfsStepStore  # noqa: E402
from tests import agents_scenarios as sc  # noqa: E402
from tests.conftest import new_s3_url  # noqa: E402
from tests.test_agent_common import CountingStorage  # noqa: E402
from tests.test_openai_agents import TRIALS, Zygote, _run  # noqa: E402


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    z = Zygote()
    yield z
    z.close()


def test_history_over_runs(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    sc.pyd_turn("ckptfs", url, "c", str(tmp_path), "pay 5")
    assert json.loads((tmp_path / "final.json").read_text())["final"] == "payment handled"
    msgs = asyncio.run(CkptfsMessageHistory("c", url).load())
    assert len(msgs) == 4 and sc.payments(str(tmp_path)) == 1
    sc.pyd_turn("ckptfs", url, "c", str(tmp_path), "thanks")
    assert len(asyncio.run(CkptfsMessageHistory("c", url).load())) == 6
    assert sc.payments(str(tmp_path)) == 1
    last2 = asyncio.run(CkptfsMessageHistory("c", url).load(limit=2))
    assert [type(m).__name__ for m in last2] == ["ModelRequest", "ModelResponse"]


def test_load_reads_are_bounded(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    h = CkptfsMessageHistory("long", url)
    from pydantic_ai.messages import ModelRequest, UserPromptPart

    from ckptfs.integrations.pydantic_ai import _dump

    page = _dump([ModelRequest(parts=[UserPromptPart(f"m{i}")]) for i in range(100)])
    for _ in range(99):
        h.log.append(page)
    for i in range(100):
        h.log.append(_dump([ModelRequest(parts=[UserPromptPart(f"tail {i}")])]))
    counting = CountingStorage(url)
    msgs = CkptfsMessageHistory("long", ckptfs.Store(counting)).load_sync(10)
    assert [m.parts[0].content for m in msgs] == [f"tail {i}" for i in range(90, 100)]
    calls = sum(counting.calls.values())
    print(f"\nload(limit=10) on 10,000 messages: {calls} storage calls")
    assert calls <= 50


def _kill_and_resume(url: str, work: Path) -> dict[str, Any]:
    assert _run("pyd_turn", "ckptfs", url, "k", str(work), "hello") == 0
    assert _run("pyd_turn", "ckptfs", url, "k", str(work), "pay 5", 0) == -9
    assert sc.payments(str(work)) == 1
    assert _run("pyd_turn", "ckptfs", url, "k", str(work), "continue") == 0
    return dict(json.loads((work / "final.json").read_text()))


def test_kill_and_resume_local(tmp_path: Path) -> None:
    final = _kill_and_resume(str(tmp_path / "store"), tmp_path)
    assert sc.payments(str(tmp_path)) == 1
    assert final["final"] == "payment handled"


def test_kill_and_resume_s3(tmp_path: Path, s3_options: dict[str, Any]) -> None:
    final = _kill_and_resume(new_s3_url(), tmp_path)
    assert sc.payments(str(tmp_path)) == 1
    assert final["final"] == "payment handled"


def _trials(zygote: Zygote, tmp_path: Path, backend: str, n: int) -> tuple[int, int]:
    rng = random.Random(34)
    dups = kills = 0
    for i in range(n):
        work = tmp_path / f"{backend}-{i}"
        work.mkdir()
        url = str(work / "store")
        status = zygote.run("pyd_turn", backend, url, "t", str(work), "pay 5",
                            rng.choice([0, 0, 0.5, 1, 2, 3]))
        kills += status == -9
        assert zygote.run("pyd_turn", backend, url, "t", str(work), "continue") == 0
        dups += sc.payments(str(work)) - 1
    return dups, kills


def test_tool_killed_after_effect_never_runs_twice(zygote: Zygote, tmp_path: Path) -> None:
    counts = {b: _trials(zygote, tmp_path, b, TRIALS)
              for b in ("ckptfs", "file", "ckptfs-harness", "ckptfs-harness-args")}
    print(f"\nduplicate payments over {TRIALS} kill trials (duplicates, kills): {counts}")
    assert all(k == TRIALS for _, k in counts.values())
    assert counts["ckptfs"][0] == 0
    assert counts["file"][0] > 0  # the harness's own store re-pays after such a kill
    # the harness re-asks the model (a new call id): keyed on name + arguments, never twice
    assert counts["ckptfs-harness-args"][0] == 0


def test_step_store_under_the_harness(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    paid: list[int] = []

    async def main() -> None:
        store = CkptfsStepStore(url)
        agent = Agent(FunctionModel(sc._pyd_rule()),
                      capabilities=[StepPersistence(store=store, agent_name="payer")])

        @agent.tool_plain
        def pay(amount: int) -> str:
            paid.append(amount)
            return f"paid {amount}"

        result = await agent.run("pay 5", conversation_id="c1")
        assert result.output == "payment handled"
        fresh = CkptfsStepStore(url)  # what another process reads
        runs = await fresh.list_runs(conversation_id="c1")
        assert len(runs) == 1 and runs[0].agent_name == "payer"
        rid = runs[0].run_id
        assert await fresh.get_run(run_id=rid) == runs[0]
        kinds = [e.kind for e in await fresh.list_events(run_id=rid)]
        assert kinds[0] == "run_started" and kinds[-1] == "run_completed"
        assert "tool_call_started" in kinds and "tool_call_completed" in kinds
        history = await continue_run(fresh, run_id=rid)
        calls = [p for m in history for p in m.parts if isinstance(p, ToolCallPart)]
        assert len(calls) == 1
        eff = await fresh.get_tool_effect(run_id=rid, tool_call_id=calls[0].tool_call_id)
        assert eff is not None and eff.status == "completed" and eff.tool_name == "pay"
        assert await fresh.list_unresolved_tool_effects(run_id=rid) == []
        assert await fresh.get_tool_effect(run_id="other", tool_call_id="x") is None
        # a second turn of the conversation continues from the snapshot
        result = await agent.run("thanks", message_history=history, conversation_id="c1")
        assert len(await fresh.list_runs(conversation_id="c1")) == 2

    asyncio.run(main())
    assert paid == [5]


def _pending_history(call_id: str) -> list[Any]:
    from pydantic_ai.messages import ModelRequest, UserPromptPart

    return [ModelRequest(parts=[UserPromptPart("pay 5")]),
            ModelResponse(parts=[ToolCallPart("pay", {"amount": 5}, tool_call_id=call_id)])]


@pytest.mark.parametrize("kind", ["ckptfs", "file"])
def test_lone_started_is_never_rerun(zygote: Zygote, tmp_path: Path, kind: str) -> None:
    """A process records ``started`` for a call and dies. Resuming a history whose last
    message is that pending call makes the harness execute it again: CkptfsStepStore refuses
    (EffectInDoubt, the tool is not called); the harness's FileStepStore lets it run."""
    url = str(tmp_path / "store")
    if kind == "ckptfs":
        assert zygote.run("pyd_started_then_die", url, "run-1", "call_1") == -9
        store: Any = CkptfsStepStore(url)
        unresolved = asyncio.run(store.list_unresolved_tool_effects(run_id="run-1"))
        assert [(r.tool_call_id, r.status) for r in unresolved] == [("call_1", "started")]
        eff = asyncio.run(store.get_tool_effect(run_id="run-1", tool_call_id="call_1"))
        assert eff is not None and eff.status == "started"
    else:
        store = FileStepStore(url)

        async def started() -> None:
            await store.register_run(RunRecord(run_id="run-1", conversation_id="conv"))
            await store.record_tool_effect(ToolEffectRecord(
                tool_call_id="call_1", tool_name="pay", run_id="run-1", status="started"))

        asyncio.run(started())
    paid: list[int] = []
    agent = Agent(FunctionModel(sc._pyd_rule()),
                  capabilities=[StepPersistence(store=store, run_id="run-2")])

    @agent.tool_plain
    def pay(amount: int) -> str:
        paid.append(amount)
        return f"paid {amount}"

    async def resume() -> Any:
        # the resumed run shares the conversation (and so the ledger) of the dead run
        return await agent.run(message_history=_pending_history("call_1"), conversation_id="conv")

    if kind == "ckptfs":
        with pytest.raises(EffectInDoubt):
            asyncio.run(resume())
        assert paid == []
    else:
        asyncio.run(resume())
        assert paid == [5]  # run a second time


def test_two_processes_one_commits(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    a, b = CkptfsMessageHistory("r", url), CkptfsMessageHistory("r", url)
    from pydantic_ai.messages import ModelRequest, UserPromptPart

    asyncio.run(a.load())
    asyncio.run(b.load())
    asyncio.run(a.extend([ModelRequest(parts=[UserPromptPart("a")])]))
    with pytest.raises(SessionConflict):
        asyncio.run(b.extend([ModelRequest(parts=[UserPromptPart("b")])]))
    assert len(asyncio.run(b.load())) == 1


def test_approval_survives_restart(zygote: Zygote, tmp_path: Path) -> None:
    """A tool that requires approval: one process stops at the request, another approves and
    runs it, once."""
    url = str(tmp_path / "store")
    assert zygote.run("pyd_approval", url, "ap", str(tmp_path), "ask") == 0
    assert len(json.loads((tmp_path / "asked.json").read_text())) == 1
    assert sc.payments(str(tmp_path)) == 0
    assert zygote.run("pyd_approval", url, "ap", str(tmp_path), "approve") == 0
    assert json.loads((tmp_path / "final.json").read_text())["final"] == "payment handled"
    assert sc.payments(str(tmp_path)) == 1
