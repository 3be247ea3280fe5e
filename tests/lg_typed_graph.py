"""A StateGraph whose state holds a pydantic model, a dataclass, an Enum and built-in types,
run to an interrupt and resumed in another process (tests/test_langgraph_typed.py).

    python -m tests.lg_typed_graph start|resume sqlite|ckptfs PATH

prints, after ``resume``, the final state as ``repr`` lines of (key, type, value)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import sqlite3
import sys
import uuid
from typing import Any, TypedDict

import pydantic
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt


class Status(enum.Enum):
    NEW = "new"
    APPROVED = "approved"


@dataclasses.dataclass
class Line:
    sku: str
    qty: int


class Order(pydantic.BaseModel):
    id: uuid.UUID
    total: decimal.Decimal
    placed: dt.datetime
    lines: list[Line]
    status: Status = Status.NEW


class State(TypedDict, total=False):
    order: Order
    status: Status
    due: dt.date
    audit: list[Any]


ALLOWED = [Order, Line, Status]


def build() -> StateGraph[State]:
    def take(state: State) -> dict[str, Any]:
        order = Order(id=uuid.UUID(int=42), total=decimal.Decimal("19.90"),
                      placed=dt.datetime(2024, 5, 1, 12, tzinfo=dt.timezone.utc),
                      lines=[Line("a", 2), Line("b", 1)])
        return {"order": order, "status": Status.NEW, "due": dt.date(2024, 5, 8),
                "audit": [dt.timedelta(minutes=5), {"at": dt.datetime(2024, 5, 1, 12)}]}

    def approve(state: State) -> dict[str, Any]:
        answer = interrupt({"question": "approve?", "total": state["order"].total})
        order = state["order"].model_copy(update={"status": Status.APPROVED})
        return {"order": order, "status": Status(answer),
                "audit": [*state["audit"], state["order"].total * 2]}

    g = StateGraph(State)
    g.add_node("take", take)
    g.add_node("approve", approve)
    g.add_edge(START, "take")
    g.add_edge("take", "approve")
    g.add_edge("approve", END)
    return g


def saver(kind: str, path: str) -> Any:
    if kind == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        return SqliteSaver(sqlite3.connect(path, check_same_thread=False))
    from ckptfs.integrations.langgraph import CkptfsSaver

    return CkptfsSaver(path, allowed_types=ALLOWED)


def main(argv: list[str]) -> None:
    step, kind, path = argv
    graph = build().compile(checkpointer=saver(kind, path))
    config: Any = {"configurable": {"thread_id": "order-42"}}
    if step == "start":
        graph.invoke({}, config)
        return
    state = graph.invoke(Command(resume="approved"), config)
    for key in sorted(state):
        print(repr((key, type(state[key]).__qualname__, state[key])))
    snap = graph.get_state(config)
    print(repr(("next", snap.next, type(snap.values["order"]).__qualname__)))


if __name__ == "__main__":
    main(sys.argv[1:])
