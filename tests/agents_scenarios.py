"""Agent-framework scenarios the kill-and-resume tests run in fresh processes (a subprocess,
or a child of ``tests.agents_zygote``). Each writes what it saw to files in ``work``; the
side effect of the tool under test is one line appended (and fsynced) to ``payments.txt``.

The models are the frameworks' own test models driven by a rule, not a fixed script: "pay
unless the history shows a payment tool result", with a fresh tool call id per model call, as
a real model would behave. So a history that lost the tool call makes the model pay again.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import uuid
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
os.environ.setdefault("OPENAI_API_KEY", "sk-test-not-used")

import ckptfs  # noqa: E402


def warm() -> None:
    """Import what the scenarios use (the zygote does, once, before it forks children)."""
    import importlib

    for mod in ("agents", "agents.testing", "agents.memory", "ckptfs.integrations.openai_agents",
                "pydantic_ai", "pydantic_ai.models.function", "pydantic_ai.models.test",
                "pydantic_ai_harness.step_persistence", "ckptfs.integrations.pydantic_ai"):
        try:
            importlib.import_module(mod)
        except ImportError:
            pass


def _effect(work: str, what: str) -> None:
    """The side effect: one line, durably."""
    fd = os.open(os.path.join(work, "payments.txt"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, (what + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _die_after(kill_ms: float) -> None:
    """SIGKILL this process ``kill_ms`` ms from now (0: now)."""
    if kill_ms <= 0:
        os.kill(os.getpid(), signal.SIGKILL)
    t = threading.Timer(kill_ms / 1000, os.kill, (os.getpid(), signal.SIGKILL))
    t.daemon = True
    t.start()


def payments(work: str) -> int:
    p = Path(work) / "payments.txt"
    return len(p.read_text().splitlines()) if p.exists() else 0


def _store(url: str) -> ckptfs.Store:
    return ckptfs.open_store(url)


# -- OpenAI Agents SDK ------------------------------------------------------------------------
def _oai_agent(session: Any, work: str, kill_ms: float | None, *, backend: str,
               approval: bool = False) -> Any:
    from agents import Agent, function_tool
    from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

    @function_tool(needs_approval=approval)
    def pay(amount: int) -> str:
        """Pay ``amount``."""
        _effect(work, f"pay {amount}")
        if kill_ms is not None:
            _die_after(kill_ms)
        return f"paid {amount}"

    def rule(call: Any) -> Any:
        items = call.input if isinstance(call.input, list) else []
        if any(isinstance(x, dict) and x.get("type") == "function_call_output" for x in items):
            return [assistant_message("payment handled")]
        last = next((x for x in reversed(items) if isinstance(x, dict) and x.get("role") == "user"),
                    {})
        if "pay" not in str(last.get("content", "")) and "continue" not in str(
                last.get("content", "")):
            return [assistant_message(f"echo: {last.get('content')}")]
        return [function_call("pay", {"amount": 5}, call_id=f"call_{uuid.uuid4().hex[:12]}")]

    model = ScriptedModel([ModelStep.respond(rule) for _ in range(20)])
    tool = session.once(pay) if backend == "ckptfs" else pay
    return Agent(name="payer", instructions="pay when asked", model=model, tools=[tool])


def _oai_session(backend: str, url: str, sid: str) -> Any:
    if backend == "ckptfs":
        from ckptfs.integrations.openai_agents import CkptfsSession

        return CkptfsSession(sid, _store(url))
    from agents import SQLiteSession

    return SQLiteSession(sid, url)


def oai_turn(backend: str, url: str, sid: str, work: str, text: str,
             kill_ms: float | None = None) -> None:
    """One ``Runner.run`` of ``text`` in session ``sid``; the payment tool kills the process
    ``kill_ms`` after its effect (None: never). Writes ``<work>/final.json``."""
    from agents import Runner

    async def main() -> None:
        session = _oai_session(backend, url, sid)
        agent = _oai_agent(session, work, kill_ms, backend=backend)
        result = await Runner.run(agent, text, session=session)
        items = await session.get_items()
        Path(work, "final.json").write_text(json.dumps(
            {"final": result.final_output, "items": len(items),
             "history": [x.get("content") if isinstance(x.get("content"), str) else x.get("type")
                         for x in items]}))

    asyncio.run(main())


def oai_approval(url: str, sid: str, work: str, phase: str) -> None:
    """Phase ``ask``: a run interrupted for the tool's approval, its RunState stored in the
    session. Phase ``approve`` (another process): load, approve, finish the run."""
    from agents import Runner

    from ckptfs.integrations.openai_agents import CkptfsSession

    async def main() -> None:
        session = CkptfsSession(sid, _store(url))
        agent = _oai_agent(session, work, None, backend="ckptfs", approval=True)
        if phase == "ask":
            result = await Runner.run(agent, "pay 5", session=session)
            assert result.interruptions, "expected an approval interruption"
            await session.save_state(result.to_state())
            Path(work, "asked.json").write_text(json.dumps(
                {"interruptions": [i.name for i in result.interruptions],
                 "version": await session.stored_state_version()}))
            return
        state = await session.load_state(agent)
        assert state is not None
        for item in state.get_interruptions():
            state.approve(item)
        result = await Runner.run(agent, state, session=session)
        await session.clear_state()
        items = await session.get_items()
        Path(work, "final.json").write_text(json.dumps(
            {"final": result.final_output, "types": [x.get("type", x.get("role")) for x in items]}))

    asyncio.run(main())


def oai_race(url: str, sid: str, work: str, name: str) -> None:
    """Read the session, wait until the other racer has read it too, then add an item;
    writes ``<work>/race-<name>`` with ``ok`` or ``conflict: <message>``."""
    from ckptfs.errors import SessionConflict
    from ckptfs.integrations.openai_agents import CkptfsSession

    async def main() -> None:
        session = CkptfsSession(sid, _store(url))
        await session.get_items()
        Path(work, f"ready-{name}").touch()
        while len(list(Path(work).glob("ready-*"))) < 2:
            await asyncio.sleep(0.005)
        try:
            await session.add_items([{"role": "user", "content": f"from {name}"}])
            out = "ok"
        except SessionConflict as e:
            out = f"conflict: {e}"
        Path(work, f"race-{name}").write_text(out)

    asyncio.run(main())


# -- Pydantic AI --------------------------------------------------------------------------------
def _pyd_rule() -> Any:
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart

    def rule(messages: list[Any], info: Any) -> Any:
        prompts = [p.content for m in messages for p in m.parts if p.part_kind == "user-prompt"]
        for m in messages:
            for p in m.parts:
                if isinstance(p, ToolReturnPart) and p.tool_name == "pay":
                    return ModelResponse(parts=[TextPart("payment handled")])
        if prompts and not any(w in str(prompts[-1]) for w in ("pay", "continue")):
            return ModelResponse(parts=[TextPart(f"echo: {prompts[-1]}")])
        return ModelResponse(parts=[ToolCallPart("pay", {"amount": 5},
                                                 tool_call_id=f"call_{uuid.uuid4().hex[:12]}")])

    return rule


def pyd_turn(backend: str, url: str, conv: str, work: str, text: str,
             kill_ms: float | None = None) -> None:
    """One ``agent.run(text)`` continuing conversation ``conv``: ``ckptfs`` keeps the messages
    in CkptfsMessageHistory with the tool wrapped by ``once``; ``file`` / ``ckptfs-harness``
    (/ ``ckptfs-harness-args``: the tool wrapped by ``CkptfsStepStore.once_by_args``) use the
    harness (StepPersistence on FileStepStore / CkptfsStepStore) and continue from
    the conversation's latest complete snapshot (``continue_run``), as its README shows."""
    from pydantic_ai import Agent, RunContext
    from pydantic_ai.models.function import FunctionModel

    globals()["RunContext"] = RunContext  # the tool's annotations are read in this module

    def pay(ctx: RunContext[None], amount: int) -> str:
        """Pay ``amount``."""
        _effect(work, f"pay {amount}")
        if kill_ms is not None:
            _die_after(kill_ms)
        return f"paid {amount}"

    async def main() -> None:
        model = FunctionModel(_pyd_rule())
        if backend == "ckptfs":
            from ckptfs.integrations.pydantic_ai import CkptfsMessageHistory

            history = CkptfsMessageHistory(conv, _store(url))
            agent = Agent(model)
            agent.tool(history.once(pay))
            result = await agent.run(text, message_history=await history.load())
            await history.extend(result.new_messages())
            n = len(await history.load())
        else:
            from pydantic_ai_harness import StepPersistence
            from pydantic_ai_harness.step_persistence import FileStepStore, continue_run

            from ckptfs.integrations.pydantic_ai import CkptfsStepStore

            store: Any = FileStepStore(url) if backend == "file" else CkptfsStepStore(_store(url))
            agent = Agent(model, capabilities=[StepPersistence(store=store, agent_name="payer")])
            # ckptfs-harness-args: the opt-in wrapper keyed on the tool's name and arguments
            agent.tool(store.once_by_args(pay) if backend == "ckptfs-harness-args" else pay)
            runs = await store.list_runs(conversation_id=conv)
            prior: list[Any] = []
            for r in reversed(runs):
                try:
                    prior = await continue_run(store, run_id=r.run_id)
                    break
                except LookupError:
                    continue
            result = await agent.run(text, message_history=prior, conversation_id=conv)
            n = len(result.all_messages())
        Path(work, "final.json").write_text(json.dumps({"final": result.output, "messages": n}))

    asyncio.run(main())


def pyd_started_then_die(url: str, run_id: str, call_id: str) -> None:
    """Register a harness run, record a tool call's ``started`` in CkptfsStepStore, die."""
    from pydantic_ai_harness.step_persistence import RunRecord, ToolEffectRecord

    from ckptfs.integrations.pydantic_ai import CkptfsStepStore

    async def main() -> None:
        store = CkptfsStepStore(_store(url))
        await store.register_run(RunRecord(run_id=run_id, conversation_id="conv"))
        await store.record_tool_effect(ToolEffectRecord(tool_call_id=call_id, tool_name="pay",
                                                        run_id=run_id, status="started"))
        os.kill(os.getpid(), signal.SIGKILL)

    asyncio.run(main())


def pyd_approval(url: str, conv: str, work: str, phase: str) -> None:
    """Pydantic AI human approval across processes: phase ``ask`` runs until the paying tool
    (``requires_approval``) waits, keeping the messages in CkptfsMessageHistory; phase
    ``approve`` (another process) loads them and runs on with the approval."""
    from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, RunContext
    from pydantic_ai.models.function import FunctionModel

    from ckptfs.integrations.pydantic_ai import CkptfsMessageHistory

    globals()["RunContext"] = RunContext

    def pay(ctx: RunContext[None], amount: int) -> str:
        """Pay ``amount``."""
        _effect(work, f"pay {amount}")
        return f"paid {amount}"

    async def main() -> None:
        history = CkptfsMessageHistory(conv, _store(url))
        agent = Agent(FunctionModel(_pyd_rule()), output_type=[str, DeferredToolRequests])
        agent.tool(history.once(pay), requires_approval=True)
        if phase == "ask":
            result = await agent.run("pay 5", message_history=await history.load())
            assert isinstance(result.output, DeferredToolRequests)
            await history.extend(result.new_messages())
            Path(work, "asked.json").write_text(json.dumps(
                [c.tool_call_id for c in result.output.approvals]))
            return
        asked = json.loads(Path(work, "asked.json").read_text())
        result = await agent.run(message_history=await history.load(),
                                 deferred_tool_results=DeferredToolResults(
                                     approvals={cid: True for cid in asked}))
        await history.extend(result.new_messages())
        Path(work, "final.json").write_text(json.dumps({"final": result.output}))

    asyncio.run(main())
