"""A LangGraph agent whose checkpoints live in a ckptfs store: interrupted for approval before a
side effect, resumed by a *new* saver (as after a restart), then inspected with the CLI.

    python examples/langgraph_agent.py [STORE]      # default: a fresh temporary directory

The graph: ``agent`` proposes a tool call, ``approve`` interrupts for a human answer, ``tool``
performs the side effect (a line in ``STORE.outbox``) through the effect ledger, ``agent``
replies; replaying the tool step from history then sends nothing.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, interrupt

import ckptfs
from ckptfs.integrations.langgraph import CkptfsSaver, effects_run_id, run_id_for


class State(TypedDict):
    messages: Annotated[list[Any], add_messages]


def build(saver: CkptfsSaver, outbox: Path) -> StateGraph[State]:
    def send_email(to: str, body: str) -> str:
        with outbox.open("a") as f:
            f.write(f"{to}\t{body}\n")
        return f"sent to {to}"

    def agent(state: State) -> dict[str, Any]:
        last = state["messages"][-1]
        if isinstance(last, ToolMessage):
            return {"messages": [AIMessage(f"Done: {last.content}")]}
        call = {"name": "send_email", "id": "call-1",
                "args": {"to": "ops@example.com", "body": "Disk 93% full on db-2"}}
        return {"messages": [AIMessage("I will email ops.", tool_calls=[call])]}

    def approve(state: State) -> dict[str, Any]:
        call = state["messages"][-1].tool_calls[0]
        answer = interrupt({"approve?": call["args"]})
        return {"messages": [HumanMessage(f"approval: {answer}")]}

    def tool(state: State, config: RunnableConfig) -> dict[str, Any]:
        call = next(m for m in reversed(state["messages"]) if isinstance(m, AIMessage)
                    and m.tool_calls).tool_calls[0]
        # The side effect goes through ckptfs's effect ledger, keyed by the tool call id: if
        # this node runs again (a crash after the email, a replay, a second resume), the
        # recorded result comes back and no second email is sent.
        result = saver.effect(config, "send_email", send_email, call["args"]["to"],
                              call["args"]["body"], key=call["id"])
        return {"messages": [ToolMessage(result, tool_call_id=call["id"])]}

    def route(state: State) -> str:
        return "approve" if getattr(state["messages"][-1], "tool_calls", None) else END

    g = StateGraph(State)
    g.add_node("agent", agent)
    g.add_node("approve", approve)
    g.add_node("tool", tool)
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", route, ["approve", END])
    g.add_edge("approve", "tool")
    g.add_edge("tool", "agent")
    return g


def main() -> int:
    store = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="ckptfs-lg-"))
    outbox = Path(f"{store}.outbox")
    config: Any = {"configurable": {"thread_id": "ticket-42"}}

    # Process 1: runs until the approval interrupt, then "exits".
    saver = CkptfsSaver(str(store))
    saver.delete_thread("ticket-42")  # rerunnable on the same store
    outbox.unlink(missing_ok=True)
    app = build(saver, outbox).compile(checkpointer=saver)
    out = app.invoke({"messages": [HumanMessage("db-2 is filling up")]}, config)
    print("interrupted, waiting for:", out["__interrupt__"][0].value)
    saver.close()

    # Process 2: a new saver on the same store resumes from the interrupt.
    saver = CkptfsSaver(str(store))
    app = build(saver, outbox).compile(checkpointer=saver)
    print("resuming at:", app.get_state(config).next)
    out = app.invoke(Command(resume="yes"), config)
    for m in out["messages"]:
        print(f"  {type(m).__name__}: {m.content}")
    print("outbox:", outbox.read_text().strip())

    # The store is plain ckptfs: one run for the thread, one snapshot per checkpoint.
    s = ckptfs.open_store(str(store))
    run_id = run_id_for("ticket-42", "")
    print(f"\nrun {run_id} (thread 'ticket-42'):")
    for snap in s.snapshots(run_id):
        lab = snap.labels
        print(f"  seq {snap.seq:2d} {snap.boundary:6s} {snap.digest.short} "
              f"checkpoint {lab['lg.checkpoint_id'][-12:]} step {lab.get('lg.meta.step', '-')}")
    ledger = s.resume(effects_run_id("ticket-42"))
    print(f"\neffect ledger (run {ledger.id}):")
    for e in ledger.effects():
        print(f"  {e.key} {e.name} {e.status} -> {e.result!r}")

    # Replaying the tool step from its checkpoint re-runs the node: the ledger answers, no email.
    before_tool = next(h for h in app.get_state_history(config) if h.next == ("tool",))
    app.invoke(None, before_tool.config)
    print("outbox after replaying the tool step:", len(outbox.read_text().splitlines()), "line")

    # ... and the ckptfs command line inspects it like any other store
    for args in (["ls"], ["effects", None], ["verify", "--read-data"]):
        argv = [a if a is not None else effects_run_id("ticket-42") for a in args]
        argv = argv[:1] + [str(store)] + argv[1:] if argv[0] != "verify" else argv + [str(store)]
        done = subprocess.run([sys.executable, "-m", "ckptfs.cli", *argv],
                              capture_output=True, text=True)
        print(f"\n$ ckptfs {' '.join(argv)}\n{done.stdout.strip()}")
        if done.returncode:
            return done.returncode
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
