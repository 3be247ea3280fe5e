"""LangGraph saver parity for typed state (issue 17): the values SqliteSaver's default
serializer restores as their own types come back as the same types through CkptfsSaver (the
built-ins always, application classes once allowed), never through pickle; a real graph with
a pydantic model in state interrupted and resumed in a fresh process gives the same values on
both savers."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import logging
import pathlib
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import attrs
import pydantic
import pytest

pytest.importorskip("langgraph")
pytest.importorskip("langgraph.checkpoint.sqlite")

from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langgraph.checkpoint.base import empty_checkpoint  # noqa: E402
from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: E402

import ckptfs  # noqa: E402
from ckptfs.integrations.langgraph import CkptfsSaver, run_id_for  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


class Color(enum.Enum):
    RED = "r"


@dataclasses.dataclass
class Point:
    x: int
    at: dt.datetime


@attrs.frozen
class Box:
    size: decimal.Decimal


class Model(pydantic.BaseModel):
    total: decimal.Decimal
    points: list[Point]
    color: Color


ALLOWED = [Color, Point, Box, Model]

VALUES: dict[str, Any] = {
    "datetime": dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc),
    "naive": dt.datetime(2024, 1, 2),
    "date": dt.date(2024, 1, 2),
    "time": dt.time(3, 4),
    "timedelta": dt.timedelta(days=3, microseconds=1),
    "uuid": uuid.UUID(int=99),
    "decimal": decimal.Decimal("1.50"),
    "set": {1, 2},
    "frozenset": frozenset({"a"}),
    "path": pathlib.Path("/x/y"),
    "enum": Color.RED,
    "dataclass": Point(1, dt.datetime(2024, 1, 1)),
    "pydantic": Model(total=decimal.Decimal("2.5"), points=[Point(2, dt.datetime(2020, 1, 1))],
                      color=Color.RED),
    "messages": [HumanMessage("hi"), AIMessage("yo")],
    "nested": {"when": [dt.date(2024, 1, 1), Color.RED], "ids": {uuid.UUID(int=1)}},
}


def _roundtrip(saver: Any, value: Any, tid: str) -> Any:
    cp = empty_checkpoint()
    cp["channel_values"] = {"x": value}
    cp["channel_versions"] = {"x": 1}
    cfg: Any = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}
    saved = saver.put(cfg, cp, {"source": "loop", "step": 1}, {"x": 1})
    saver.put_writes(saved, [("x", value)], "task-1")
    got = saver.get_tuple(saved)
    return got.checkpoint["channel_values"]["x"], got.pending_writes[0][2]


def _types(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, [_types(x) for x in v])
    if isinstance(v, dict):
        return {k: _types(x) for k, x in v.items()}
    if isinstance(v, (set, frozenset)):
        return (type(v).__name__, sorted(type(x).__name__ for x in v))
    return type(v).__name__


@pytest.mark.parametrize("name", list(VALUES))
def test_values_come_back_as_sqlite_saver_returns_them(tmp_path: Path, name: str) -> None:
    logging.getLogger("langgraph").setLevel(logging.ERROR)
    sqlite = SqliteSaver(sqlite3.connect(":memory:", check_same_thread=False))
    want, want_w = _roundtrip(sqlite, VALUES[name], "t")
    with CkptfsSaver.from_url(str(tmp_path / "s"), allowed_types=ALLOWED) as saver:
        got, got_w = _roundtrip(saver, VALUES[name], "t")
    # a fresh saver (another process would be the same: nothing is cached across savers)
    with CkptfsSaver.from_url(str(tmp_path / "s"), allowed_types=ALLOWED) as fresh:
        cfg: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        t = fresh.get_tuple(cfg)
        assert t is not None
        again = t.checkpoint["channel_values"]["x"]
    assert got == want == VALUES[name] == again == got_w == want_w
    assert _types(got) == _types(want) == _types(again) == _types(got_w)


def test_tuples_stay_tuples(tmp_path: Path) -> None:
    """Where SqliteSaver's msgpack turns a tuple into a list, ckptfs keeps the tuple."""
    with CkptfsSaver.from_url(str(tmp_path / "s")) as saver:
        got, _ = _roundtrip(saver, (1, ("a", 2)), "t")
    assert got == (1, ("a", 2)) and type(got[1]) is tuple


def test_typed_values_are_stored_as_ckptfs_typed_values(tmp_path: Path) -> None:
    with CkptfsSaver.from_url(str(tmp_path / "s"), allowed_types=ALLOWED) as saver:
        _roundtrip(saver, {"m": VALUES["pydantic"], "d": dt.date(2024, 1, 1)}, "t")
    store = ckptfs.open_store(str(tmp_path / "s"), codecs=ckptfs.Codecs(unknown="raw"))
    run = run_id_for("t", "")
    head = store.head(run)
    assert "typed-values" in head.manifest.required
    assert "typed-values" in store.get(f"{run}@1").manifest.required
    state = store.read(f"{run}@1")
    value = state["channels/x"]
    # any ckptfs reader sees the type names and fields, without LangGraph or the classes
    assert isinstance(value["m"], ckptfs.TypedValue)
    assert value["m"].name == "tests.test_langgraph_typed.Model"
    assert value["m"].payload["total"] == decimal.Decimal("2.5")
    assert value["d"] == dt.date(2024, 1, 1)


def test_unallowed_classes_are_never_unpickled(tmp_path: Path) -> None:
    """Without allowed_types a dataclass goes through LangGraph's strict serializer: it comes
    back as LangGraph's allow-list makes it (a dict), never via pickle, and the README says
    how to allow it."""
    logging.getLogger("langgraph").setLevel(logging.ERROR)
    with CkptfsSaver.from_url(str(tmp_path / "s")) as saver:
        got, _ = _roundtrip(saver, Point(1, dt.datetime(2024, 1, 1)), "t")
    assert type(got) is dict and got["x"] == 1
    with CkptfsSaver.from_url(str(tmp_path / "s"), allowed_types=[Point]) as saver:
        got, _ = _roundtrip(saver, Point(1, dt.datetime(2024, 1, 1)), "t2")
    assert got == Point(1, dt.datetime(2024, 1, 1))


def test_codecs_with_a_store_object_must_be_the_stores(tmp_path: Path) -> None:
    store = ckptfs.open_store(str(tmp_path / "s"))
    with pytest.raises(ValueError, match="open_store"):
        CkptfsSaver(store, codecs=ckptfs.Codecs())
    codecs = ckptfs.Codecs()
    codecs.register(Point, name="geo.Point")
    with CkptfsSaver.from_url(str(tmp_path / "t"), codecs=codecs) as saver:
        got, _ = _roundtrip(saver, Point(3, dt.datetime(2024, 1, 1)), "t")
    assert got == Point(3, dt.datetime(2024, 1, 1))


def _graph(step: str, kind: str, path: Path) -> str:
    out = subprocess.run([sys.executable, "-m", "tests.lg_typed_graph", step, kind, str(path)],
                         cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin",
                              "LANGGRAPH_STRICT_MSGPACK": "false"})
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_graph_with_pydantic_state_resumes_in_a_fresh_process_like_sqlite(tmp_path: Path) -> None:
    results = {}
    for kind, path in (("sqlite", tmp_path / "lg.sqlite"), ("ckptfs", tmp_path / "store")):
        _graph("start", kind, path)       # runs to the interrupt, in one process
        results[kind] = _graph("resume", kind, path)  # resumes in another
    assert results["ckptfs"] == results["sqlite"]
    assert "('order', 'Order', Order(" in results["ckptfs"]
    assert "status=<Status.APPROVED: 'approved'>" in results["ckptfs"]
    assert "('due', 'date', datetime.date(2024, 5, 8))" in results["ckptfs"]
