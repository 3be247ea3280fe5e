"""LangGraph typed state without the application's classes (issue 35 item 8): a store written
with ``allowed_types=[Ticket]`` lists and inspects without it (the stored, tagged value comes
back as a ``ckptfs.TypedValue``), and a value that does not come back as itself says which
saver argument restores it: ``CkptfsSaver(..., allowed_types=[Ticket])``, not LangGraph's
``allowed_msgpack_modules``."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pydantic
import pytest

pytest.importorskip("langgraph")

from langgraph.checkpoint.base import empty_checkpoint  # noqa: E402

import ckptfs  # noqa: E402
from ckptfs.integrations.langgraph import CkptfsSaver  # noqa: E402

NAME = f"{__name__}.Ticket"


class Ticket(pydantic.BaseModel):
    id: int
    title: str


def cfg(tid: str) -> Any:
    return {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}


def put(saver: CkptfsSaver, tid: str, value: Any) -> Any:
    cp = empty_checkpoint()
    cp["channel_values"] = {"ticket": value}
    cp["channel_versions"] = {"ticket": 1}
    saved = saver.put(cfg(tid), cp, {"source": "loop", "step": 1}, {"ticket": 1})
    saver.put_writes(saved, [("ticket", value)], "task-1")
    return saved


def test_a_typed_store_lists_and_inspects_without_the_class(tmp_path: Path,
                                                           caplog: pytest.LogCaptureFixture
                                                           ) -> None:
    url = str(tmp_path / "s")
    with CkptfsSaver.from_url(url, allowed_types=[Ticket]) as saver:
        put(saver, "t", Ticket(id=7, title="refund"))
    bare = CkptfsSaver(url)
    with pytest.warns(UserWarning, match=r"allowed_types=\[Ticket\]"), \
            caplog.at_level(logging.WARNING, logger="ckptfs.integrations.langgraph"):
        items = list(bare.list(cfg("t")))
    assert len(items) == 1
    value = items[0].checkpoint["channel_values"]["ticket"]
    assert value == ckptfs.TypedValue(NAME, {"id": 7, "title": "refund"})
    assert items[0].pending_writes[0][2] == value
    said = [r.getMessage() for r in caplog.records if r.name == "ckptfs.integrations.langgraph"]
    assert len(said) == 1 and "CkptfsSaver(..., allowed_types=[Ticket])" in said[0]
    assert NAME in said[0]
    got = bare.get_tuple(cfg("t"))  # said once per saver and class
    assert got is not None and got.checkpoint["channel_values"]["ticket"] == value
    # and with the class, the same store restores it as itself
    with CkptfsSaver.from_url(url, allowed_types=[Ticket]) as typed:
        again = typed.get_tuple(cfg("t"))
        assert again is not None
        assert again.checkpoint["channel_values"]["ticket"] == Ticket(id=7, title="refund")


def test_a_class_restored_as_a_dict_names_the_saver_argument(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with CkptfsSaver.from_url(str(tmp_path / "s")) as saver:
        put(saver, "t", Ticket(id=1, title="x"))
        with pytest.warns(UserWarning, match=r"CkptfsSaver\(\.\.\., allowed_types=\[Ticket\]\)"), \
                caplog.at_level(logging.WARNING, logger="ckptfs.integrations.langgraph"):
            got = saver.get_tuple(cfg("t"))
    assert got is not None and got.checkpoint["channel_values"]["ticket"] == {"id": 1,
                                                                             "title": "x"}
    said = [r.getMessage() for r in caplog.records if r.name == "ckptfs.integrations.langgraph"]
    assert said and "as a dict of its fields" in said[0] and NAME in said[0]


def test_known_classes_say_nothing(tmp_path: Path, recwarn: pytest.WarningsRecorder) -> None:
    with CkptfsSaver.from_url(str(tmp_path / "s"), allowed_types=[Ticket]) as saver:
        put(saver, "t", Ticket(id=1, title="x"))
        got = saver.get_tuple(cfg("t"))
    assert got is not None and got.checkpoint["channel_values"]["ticket"] == Ticket(id=1,
                                                                                    title="x")
    assert not [w for w in recwarn if "allowed_types" in str(w.message)]
