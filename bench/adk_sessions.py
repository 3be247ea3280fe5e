"""Google ADK sessions: ckptfs (CkptfsSessionService, local disk) against ADK's own SQLite
stores (SqliteSessionService, and DatabaseSessionService on ``sqlite+aiosqlite``), one run,
ratios of ckptfs to each.

A 1,000-turn conversation through ADK's real Runner and a scripted model (no network): each
turn the user sends about 1 KB of text (bench.data) and the model echoes it; every 10th turn
the model calls a tool that writes session, ``user:`` and ``app:`` state. Measured per peer:

* per turn: the wall time of ``runner.run_async`` (ADK's default reads the whole session each
  turn, so this grows with history for both), and the time spent inside the session service
  (create/get/append), which is what the store costs;
* per ``append_event``: mean and p99;
* at the end: ``get_session`` whole and with ``num_recent_events=10``; store size on disk,
  and for ckptfs again after one ``gc`` of the store (grace 0): the service forgets a
  session's old snapshots itself (``forget_every``), gc drops their records.

    python -m bench.adk_sessions [--turns 1000] [--no-database]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import AsyncGenerator
from typing import Any

from bench import common
from bench.data import message

APP, USER, SID = "bench", "user", "long"


def _agent() -> Any:
    from google.adk.agents import LlmAgent
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.adk.tools.tool_context import ToolContext
    from google.genai import types

    def text(t: str) -> LlmResponse:
        return LlmResponse(content=types.Content(role="model", parts=[types.Part(text=t)]))

    class Scripted(BaseLlm):
        model: str = "scripted"

        async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False
                                         ) -> AsyncGenerator[LlmResponse, None]:
            parts = list(llm_request.contents[-1].parts or [])
            if any(p.function_response for p in parts):
                yield text("noted")
                return
            said = next((p.text for p in parts if p.text), "") or ""
            if said.startswith("remember "):
                _, k, v = said.split(" ", 2)
                yield LlmResponse(content=types.Content(role="model", parts=[types.Part(
                    function_call=types.FunctionCall(name="remember",
                                                     args={"key": k, "value": v}))]))
                return
            yield text("echo: " + said)

    def remember(key: str, value: str, tool_context: ToolContext) -> dict[str, str]:
        """Remember a value for this session, the user and the app."""
        tool_context.state[key] = value
        tool_context.state[f"user:{key}"] = value
        tool_context.state[f"app:last"] = key
        return {"remembered": key}

    return LlmAgent(name="clerk", model=Scripted(), tools=[remember])


class Timed:
    """Wraps a session service's methods to add up the time spent in them."""

    def __init__(self, svc: Any) -> None:
        self.svc = svc
        self.spent = 0.0
        self.appends: list[float] = []
        for name in ("create_session", "get_session", "append_event"):
            setattr(svc, name, self._wrap(name, getattr(svc, name)))

    def _wrap(self, name: str, fn: Any) -> Any:
        async def timed(*a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return await fn(*a, **kw)
            finally:
                dt = time.perf_counter() - t0
                self.spent += dt
                if name == "append_event":
                    self.appends.append(dt)
        return timed


def _service(peer: str, where: str) -> Any:
    if peer == "warm-up":  # ADK imports modules lazily on the first turns: not a peer's cost
        from google.adk.sessions import InMemorySessionService

        return InMemorySessionService()
    if peer == "ckptfs":
        from ckptfs.integrations.google_adk import CkptfsSessionService

        return CkptfsSessionService(os.path.join(where, "store"))
    if peer == "database":  # SQLAlchemy's asyncio engine on aiosqlite
        from google.adk.sessions.database_session_service import DatabaseSessionService

        return DatabaseSessionService(f"sqlite+aiosqlite:///{os.path.join(where, 'adk.db')}")
    from google.adk.sessions.sqlite_session_service import SqliteSessionService

    return SqliteSessionService(os.path.join(where, "adk.db"))


def _size(peer: str, where: str) -> int:
    if peer == "warm-up":
        return 1
    if peer == "ckptfs":
        return common.tree_size(os.path.join(where, "store"))[0]
    return sum(os.path.getsize(os.path.join(where, n)) for n in os.listdir(where)
               if n.startswith("adk.db"))


async def run_peer(peer: str, turns: int, where: str, *, collect: bool = True
                   ) -> dict[str, Any]:
    from google.adk.runners import Runner
    from google.adk.sessions.base_session_service import GetSessionConfig
    from google.genai import types

    svc = _service(peer, where)
    timed = Timed(svc)
    runner = Runner(app_name=APP, agent=_agent(), session_service=svc)
    await svc.create_session(app_name=APP, user_id=USER, session_id=SID)
    wall, spent = [], []
    for i in range(turns):
        said = f"remember k{i} {message(i)['content'][:40]}" if i % 10 == 9 else \
            message(i)["content"]
        before = timed.spent
        t0 = time.perf_counter()
        async for _ in runner.run_async(user_id=USER, session_id=SID, new_message=types.Content(
                role="user", parts=[types.Part(text=said)])):
            pass
        wall.append(time.perf_counter() - t0)
        spent.append(timed.spent - before)
    out: dict[str, Any] = {"wall": wall, "spent": spent, "appends": timed.appends}
    if peer == "warm-up":
        return out
    fresh = _service(peer, where)  # a new process's first reads
    for name, cfg in (("whole", None), ("tail10", GetSessionConfig(num_recent_events=10))):
        t0 = time.perf_counter()
        got = await fresh.get_session(app_name=APP, user_id=USER, session_id=SID, config=cfg)
        out[name] = time.perf_counter() - t0
        out[name + "_events"] = len(got.events)
    for s in (svc, fresh):  # closed first: a database folds its journal in on close
        close = getattr(s, "close", None)
        if close is not None and asyncio.iscoroutine(res := close()):
            await res
    out["size"] = _size(peer, where)
    out["du"] = common.tree_size(where)[1]
    if peer == "ckptfs" and collect:  # the store's gc drops what the service forgot itself
        from ckptfs.integrations.agent_common import forgets_done
        from ckptfs.ops.gc import gc

        forgets_done()
        repo = _service(peer, where).store.repo
        gc(repo, grace_ms=0)
        out["size_kept"] = _size(peer, where)
        out["du_kept"] = common.tree_size(where)[1]
        t0 = time.perf_counter()
        got = await _service(peer, where).get_session(app_name=APP, user_id=USER,
                                                      session_id=SID)
        out["whole_after"] = time.perf_counter() - t0
        assert len(got.events) == out["whole_events"]
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=1000)
    ap.add_argument("--out", default="adk_sessions")
    ap.add_argument("--no-database", action="store_true",
                    help="skip DatabaseSessionService (needs sqlalchemy[asyncio], aiosqlite)")
    args = ap.parse_args(argv)
    results: dict[str, dict[str, Any]] = {}
    peers = ("warm-up", "ckptfs", "sqlite") + (() if args.no_database else ("database",))
    for peer in peers:
        where = tempfile.mkdtemp(prefix=f"adk-{peer}-")
        try:
            results[peer] = asyncio.run(run_peer(peer, 5 if peer == "warm-up" else args.turns,
                                                 where))
        finally:
            shutil.rmtree(where, ignore_errors=True)
    ck = results["ckptfs"]
    base = [p for p in ("sqlite", "database") if p in results]
    ms = 1000.0
    rows = []

    def row(label: str, get: Any, fmt: Any = common.fmt) -> None:
        a = get(ck)
        out = [label, fmt(a)]
        for p in base:
            b = get(results[p])
            out += [fmt(b), common.fmt(a / b)]
        rows.append(out)

    for label, key in (("turn, wall (mean ms)", "wall"),
                       ("turn, in the session service (mean ms)", "spent"),
                       ("append_event (mean ms)", "appends")):
        row(label, lambda r, k=key: common.mean(r[k]) * ms)
    row("append_event (p99 ms)", lambda r: common.pct(r["appends"], 99) * ms)
    for label, key in (("get_session, all events, fresh service (ms)", "whole"),
                       ("get_session(num_recent_events=10), fresh service (ms)", "tail10")):
        row(label, lambda r, k=key: r[k] * ms)
    row("store size (KiB)", lambda r: r["size"] / 1024)
    row("store on disk, du (KiB)", lambda r: r["du"], fmt=str)
    row("store size after the store's `gc` (KiB; ckptfs: the service forgot old snapshots "
        "itself, gc drops them)", lambda r: r.get("size_kept", r["size"]) / 1024)
    row("store on disk after `gc`, du (KiB)", lambda r: r.get("du_kept", r["du"]), fmt=str)
    n_events = ck["whole_events"]
    names = {"sqlite": "SqliteSessionService", "database": "DatabaseSessionService"}
    head = ["", "ckptfs"]
    for p in base:
        head += [names[p], f"ckptfs/{'SQLite' if p == 'sqlite' else 'Database'}"]
    verdicts = "".join(
        f"\n\nTargets (issue 34) against {names[p]}: per turn <= 1.0x: "
        + common.verdict(common.mean(ck["spent"]) / common.mean(results[p]["spent"]), 1.0)
        + "; store <= 0.1x (after gc): "
        + common.verdict(ck["size_kept"] / results[p]["size"], 0.1)
        for p in base)
    text = (f"# ADK sessions: ckptfs vs ADK's own stores, {args.turns} turns "
            f"({n_events} events), one run\n\n" + common.table(head, rows) + verdicts + "\n\n"
            + f"load average at the end: {os.getloadavg()[0]:.2f}\n\n" + common.machine_md())
    print(text)
    common.write_result(args.out, text)


if __name__ == "__main__":
    main()
