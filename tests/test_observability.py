"""Observability (issue 35 item 14): commits, conflicts, in-doubt effects and maintenance are
logged under ``ckptfs.`` with no state plaintext in any line, and reported as OpenTelemetry
spans and metrics (extra ``otel``), checked with the SDK's in-memory exporter and reader."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

import ckptfs
from ckptfs import observe
from ckptfs.errors import ConflictError, EffectInDoubt
from ckptfs.ops.copy import copy_runs
from ckptfs.ops.erase import erase
from ckptfs.ops.gc import gc
from ckptfs.ops.retention import Policy, forget

SECRET = "s3cr3t-PLAINTEXT-7d1f"


class Crash(BaseException):
    """The process dying inside an effect's function: the effect stays in doubt."""


def _workload(tmp_path: Path) -> None:
    """Every kind of event, each with the secret in the state, arguments, results, labels,
    entry names' values, erase reasons."""
    url = str(tmp_path / "s")
    store = ckptfs.open_store(url)
    run = store.start_run("r")
    run.checkpoint({"msg": SECRET, "blob": ckptfs.Blob(SECRET.encode() * 100)},
                   labels={"note": SECRET})
    run.checkpoint({"msg": SECRET, "log": [SECRET]})
    run.append("log", SECRET)
    assert run.effect("send", lambda to: {"sent": SECRET}, SECRET, key="k1") == {"sent": SECRET}

    def dies(to: str) -> None:
        raise Crash

    with pytest.raises(Crash):
        run.effect("send", dies, SECRET, key="k2")
    again = ckptfs.open_store(url).resume("r")
    with pytest.raises(EffectInDoubt):
        again.effect("send", dies, SECRET, key="k2")
    # a conflict: two handles of one head
    a, b = ckptfs.open_store(url).resume("r"), ckptfs.open_store(url).resume("r")
    a.checkpoint({"msg": SECRET})
    with pytest.raises(ConflictError):
        b.checkpoint({"msg": SECRET + "2"})
    store.start_run("other").checkpoint({"x": SECRET})
    repo = store.repo
    forget(repo, Policy(keep_last=1))
    erase(repo, "other", reason=f"asked by {SECRET}")
    gc(repo, grace_ms=0)
    copy_runs(repo, ckptfs.open_store(str(tmp_path / "copy")).repo)


def test_events_are_logged_without_state_plaintext(tmp_path: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="ckptfs"):
        _workload(tmp_path)
    ours = [r for r in caplog.records if r.name.startswith("ckptfs")]
    lines = [r.getMessage() for r in ours]
    assert not [x for x in lines if SECRET in x]
    assert not [r for r in ours if r.exc_info]  # no tracebacks either (they quote values)
    commits = [r for r in ours if r.name == "ckptfs.commit"]
    assert any("run=r seq=1 boundary=step" in r.getMessage() and "outcome=ok" in r.getMessage()
               and r.levelno == logging.DEBUG for r in commits)
    assert any("outcome=conflict" in r.getMessage() and r.levelno == logging.WARNING
               for r in commits)
    doubt = [r.getMessage() for r in ours if r.name == "ckptfs.effects"]
    assert doubt and "key=k2" in doubt[0] and "name=send" in doubt[0]
    actions = {r.getMessage().split()[1] for r in ours if r.name == "ckptfs.maintenance"}
    assert {"action=forget", "action=erase", "action=gc", "action=copy"} <= actions


def test_a_failing_listener_does_not_fail_a_commit(tmp_path: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    def broken(event: observe.Event) -> None:
        raise RuntimeError("exporter down")

    stop = observe.add_listener(broken)
    try:
        with caplog.at_level(logging.WARNING, logger="ckptfs"):
            snap = ckptfs.open_store(str(tmp_path / "s")).start_run("r").checkpoint({"a": 1})
    finally:
        stop()
    assert snap.seq == 1 and "an event listener failed" in caplog.text


@pytest.fixture
def otel() -> Any:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from ckptfs.integrations.otel import instrument

    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    stop = instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)
    yield spans, reader, tracer_provider.get_tracer("app")
    stop()


def _metrics(reader: Any) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                out[m.name] = list(m.data.data_points)
    return out


def test_spans_and_metrics(tmp_path: Path, otel: Any) -> None:
    from opentelemetry.trace import StatusCode

    spans, reader, app = otel
    with app.start_as_current_span("agent.step") as step:
        _workload(tmp_path)
    got = spans.get_finished_spans()
    commits = [s for s in got if s.name == "ckptfs.commit"]
    first = commits[0]
    assert first.parent is not None and first.parent.span_id == step.get_span_context().span_id
    assert first.attributes["ckptfs.run"] == "r" and first.attributes["ckptfs.seq"] == 1
    assert first.attributes["ckptfs.bytes"] > 0 and first.end_time >= first.start_time
    lost = [s for s in commits if s.attributes["ckptfs.outcome"] == "conflict"]
    assert len(lost) == 1 and lost[0].status.status_code == StatusCode.ERROR
    assert {s.name for s in got} >= {"ckptfs.commit", "ckptfs.effect.in_doubt",
                                     "ckptfs.maintenance"}
    for s in got:  # no state plaintext in any attribute
        assert not [v for v in s.attributes.values() if SECRET in str(v)]
    m = _metrics(reader)
    assert sum(p.value for p in m["ckptfs.conflicts"]) == 1
    assert sum(p.value for p in m["ckptfs.effects.in_doubt"]) == 1
    by = {p.attributes["ckptfs.outcome"]: p.value for p in m["ckptfs.commits"]}
    assert by["conflict"] == 1 and by["ok"] == len(commits) - 1
    assert sum(p.value for p in m["ckptfs.commit.bytes"]) == sum(
        s.attributes["ckptfs.bytes"] for s in commits if s.attributes["ckptfs.outcome"] == "ok")
    assert sum(p.count for p in m["ckptfs.commit.duration"]) == len(commits)
    assert {p.attributes["ckptfs.action"] for p in m["ckptfs.maintenance.actions"]} >= {
        "gc", "forget", "erase", "copy"}


def test_async_commits_are_children_of_the_callers_span(tmp_path: Path, otel: Any) -> None:
    spans, _, app = otel
    store = ckptfs.open_store(str(tmp_path / "s"))

    async def main() -> int:
        run = await store.astart_run("r")
        with app.start_as_current_span("agent.step") as step:
            await run.acheckpoint({"a": 1})
        return step.get_span_context().span_id

    parent = asyncio.run(main())
    commit = [s for s in spans.get_finished_spans() if s.name == "ckptfs.commit"][0]
    assert commit.parent is not None and commit.parent.span_id == parent


def test_nothing_is_printed_until_the_application_configures_logging(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = ("import ckptfs, sys\n"
            f"url = {str(tmp_path / 's')!r}\n"
            "ckptfs.open_store(url).start_run('r').checkpoint({'a': 1})\n"
            "a, b = ckptfs.open_store(url).resume('r'), ckptfs.open_store(url).resume('r')\n"
            "a.checkpoint({'a': 2})\n"
            "try:\n    b.checkpoint({'a': 3})\nexcept ckptfs.errors.ConflictError:\n"
            "    print('conflict handled')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=Path(__file__).resolve().parent.parent)
    assert out.stdout == "conflict handled\n" and out.stderr == "", out.stderr
