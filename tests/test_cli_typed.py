"""The CLI on typed values and LangGraph threads (issue 17): ``ckptfs cat`` prints a typed
value as its name and payload, a LangGraph channel decoded instead of base64 msgpack, and
``ckptfs log --thread`` finds a thread by its LangGraph id."""

from __future__ import annotations

import datetime as dt
import decimal
import json
from pathlib import Path
from typing import Any

import pytest

import ckptfs
from tests.clihelp import cli


def test_cat_prints_typed_values_as_name_and_payload(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    ckptfs.open_store(url).start_run("r").checkpoint(
        {"when": {"at": dt.datetime(2024, 5, 1, 9, tzinfo=dt.timezone.utc),
                  "total": decimal.Decimal("9.90"), "tags": ("a", "b")},
         "raw": ckptfs.TypedValue("shop.Order", {"id": 7})})
    out = json.loads(cli("cat", url, "r@1", "when").stdout)
    assert out == {"at": {"$typed": ["datetime", {"wall": "2024-05-01T09:00:00", "offset": 0}]},
                   "total": {"$typed": ["decimal", "9.90"]},
                   "tags": {"$typed": ["tuple", ["a", "b"]]}}
    assert json.loads(cli("cat", url, "r@1", "raw").stdout) == {
        "$typed": ["shop.Order", {"id": 7}]}


def _lg_store(url: str) -> None:
    pytest.importorskip("langgraph")
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.checkpoint.base import empty_checkpoint

    from ckptfs.integrations.langgraph import CkptfsSaver

    saver = CkptfsSaver(url)
    cp = empty_checkpoint()
    cp["channel_values"] = {"messages": [HumanMessage("hi", id="1"), AIMessage("yo", id="2")]}
    cp["channel_versions"] = {"messages": 1}
    cfg: Any = {"configurable": {"thread_id": "speed", "checkpoint_ns": ""}}
    saver.put(cfg, cp, {"source": "input", "step": 0}, {"messages": 1})


def test_cat_of_a_langgraph_channel_is_decoded(tmp_path: Path) -> None:
    from ckptfs.integrations.lg_names import run_id_for

    url = str(tmp_path / "s")
    _lg_store(url)
    run = run_id_for("speed", "")
    out = json.loads(cli("cat", url, run, "channels/messages").stdout)
    assert [m["$lg"] for m in out] == ["langchain_core.messages.human.HumanMessage",
                                       "langchain_core.messages.ai.AIMessage"]
    assert out[0]["data"]["content"] == "hi" and out[1]["data"]["content"] == "yo"
    assert "$bytes" not in json.dumps(out)
    raw = json.loads(cli("cat", url, run, "channels/messages", "--raw").stdout)
    assert "$bytes" in json.dumps(raw)  # the stored form, as before


def test_log_and_cat_find_a_thread_by_its_langgraph_id(tmp_path: Path) -> None:
    from ckptfs.integrations.lg_names import run_id_for

    url = str(tmp_path / "s")
    _lg_store(url)
    out = cli("log", url, "--thread", "speed").stdout
    assert run_id_for("speed", "") in out.splitlines()[0]
    cat = json.loads(cli("cat", url, "--thread", "speed", "@1", "channels/messages").stdout)
    assert cat[0]["data"]["content"] == "hi"
    missing = cli("log", url, "--thread", "nope", check=None)
    assert missing.returncode != 0 and "nope" in missing.stderr


def test_show_and_effects_take_a_thread_too(tmp_path: Path) -> None:
    """issue 35 item 11: ``log`` and ``cat`` took --thread, ``show`` and ``effects`` did not,
    and a thread's effect ledger is a run of its own (``lgfx-...``)."""
    from ckptfs.integrations.langgraph import CkptfsSaver
    from ckptfs.integrations.lg_names import effects_run_id, run_id_for

    url = str(tmp_path / "s")
    _lg_store(url)
    shown = json.loads(cli("show", url, "--thread", "speed", "@1", "--json").stdout)
    assert shown["run"] == run_id_for("speed", "") and shown["seq"] == 1
    head = json.loads(cli("show", url, "--thread", "speed", "head", "--json").stdout)
    assert head["snapshot"] == shown["snapshot"]
    none = cli("effects", url, "--thread", "speed", check=3)
    assert "speed" in none.stderr and "saver.effect" in none.stderr
    saver = CkptfsSaver(url)
    cfg: Any = {"configurable": {"thread_id": "speed", "checkpoint_ns": ""}}
    assert saver.effect(cfg, "mail.send", lambda: "sent", key="m-1") == "sent"
    saver.close()
    fx = json.loads(cli("effects", url, "--thread", "speed", "--json").stdout)
    assert fx["run"] == effects_run_id("speed")
    assert [(e["key"], e["name"], e["status"]) for e in fx["effects"]] == [
        ("m-1", "mail.send", "completed")]
    both = cli("effects", url, fx["run"], "--thread", "speed", check=2)
    assert "one of the two" in both.stderr
    # ls names the thread a run holds (its run id is a hash of it), from the head's labels
    lines = cli("ls", url).stdout.splitlines()
    assert lines[0].split()[:2] == ["RUN", "THREAD"]
    row = next(x for x in lines if x.startswith(run_id_for("speed", "")))
    assert row.split()[1] == "speed"


def test_check_loads_application_types_raw_unless_given_the_codecs(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    ckptfs.open_store(url).start_run("r").checkpoint(
        {"a": [dt.date(2024, 1, 1)], "b": ckptfs.TypedValue("shop.Order", {"id": 1})})
    ckptfs.open_store(url).start_run("bad").checkpoint(
        {"when": ckptfs.TypedValue("date", "not a date")})
    out = cli("check", url, "--run", "r").stdout
    assert out.startswith("ok    r@1")
    bad = cli("check", url, "--run", "bad", check=1).stdout
    assert "FAIL  bad@1" in bad and "'date'" in bad  # built-in payloads are checked
    (tmp_path / "appcodecs.py").write_text("import ckptfs\ncodecs = ckptfs.Codecs()\n")
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-m", "ckptfs.cli", "check", url, "--run", "r",
                        "--codecs", "appcodecs:codecs"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 1 and "shop.Order" in p.stdout, (p.stdout, p.stderr)
