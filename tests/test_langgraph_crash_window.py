"""Issue 30 defect 6: a tool node's side effect after a crash, counted, not timed.

A graph prep -> tool -> after; the tool appends a line to a file (its side effect). A child
process runs it and SIGKILLs itself at a defined point of the saver calls (the bench's ``POINTS``), then
a fresh process resumes the thread and we count the lines: two mean the side effect ran
again. The same points run for ``CkptfsSaver`` and ``SqliteSaver`` (whose ``put_writes``
commits before it returns), so the comparison is exact: at every point after SqliteSaver's
commit of the tool's writes, neither may run the tool again.

The trials run in bench/langgraph_crash_window.py (``--points``; its ``--random`` is the
issue's experiment with random kill times), in a subprocess: it forks the children from a
process that imported LangGraph once, so a trial costs a fork, not an interpreter start.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph")

from bench.langgraph_crash_window import graph  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "langgraph_crash_window.py"
#: kill points (bench/langgraph_crash_window.py ``POINTS``) where SqliteSaver has committed the
#: tool's writes and their checkpoint: no saver may re-run the tool there. ("writes" only under
#: sync durability: under async the tool's checkpoint may not be committed yet when its writes
#: are, with either saver)
AFTER_COMMIT = {"sync": ("writes", "checkpoint+writes", "next-put"),
                "async": ("checkpoint+writes", "next-put")}


def run_driver(tmp: Path, points: list[str], durability: str, trials: int,
               fresh: bool = False) -> dict[str, dict[str, dict[str, int]]]:
    """The bench's ``drive_points`` in a subprocess (forking from pytest's process is not safe: it may hold
    threads and locks of other tests)."""
    cmd = [sys.executable, str(SCRIPT), "--dir", str(tmp), "--durability", durability,
           "--trials", str(trials), "--points", ",".join(points)] + (["--fresh"] if fresh else [])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    result: dict[str, dict[str, dict[str, int]]] = json.loads(out.stdout.splitlines()[-1])
    return result


def check(counts: dict[str, dict[str, dict[str, int]]], durability: str) -> None:
    """No trial resumes without a checkpoint; at the points after SqliteSaver's commit of the
    tool's writes, neither saver runs the tool again (``first-put`` is a race with the tool
    under async durability: only its checkpoint is checked)."""
    ck, sq = counts["ckptfs"], counts["sqlite"]
    for point in ck:
        assert ck[point].get("empty", 0) == 0 == sq[point].get("empty", 0), (point, counts)
        if point in AFTER_COMMIT[durability]:
            assert sq[point].get("rerun", 0) == 0, (point, counts)  # the point is after its commit
            assert ck[point].get("rerun", 0) == 0, (point, counts)


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_tool_reruns_no_more_often_than_sqlite(tmp_path: Path, durability: str) -> None:
    """At each kill point, CkptfsSaver re-runs the tool no more often than SqliteSaver, and
    never once SqliteSaver has committed the tool's writes (and their checkpoint)."""
    check(run_driver(tmp_path, list(AFTER_COMMIT[durability]), durability, 2), durability)


def test_fresh_store_has_a_checkpoint_once_sqlite_has(tmp_path: Path) -> None:
    """On a fresh store (one per trial): killed once the first put returned, or later, a
    resume finds a checkpoint with either saver."""
    check(run_driver(tmp_path, ["first-put", "checkpoint+writes"], "async", 2, fresh=True),
          "async")


@pytest.mark.long
@pytest.mark.parametrize("durability", ["sync", "async"])
def test_tool_reruns_many_trials(tmp_path: Path, durability: str) -> None:
    check(run_driver(tmp_path, list(AFTER_COMMIT[durability]), durability, 20), durability)
    check(run_driver(tmp_path / "fresh", ["first-put", *AFTER_COMMIT[durability]], durability,
                     10, fresh=True), durability)


@pytest.mark.parametrize("existing", [False, True])
def test_first_commit_on_a_store_is_as_quick_as_a_later_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, existing: bool) -> None:
    """The first put of a saver, on a fresh store or on one another process made, makes its
    record visible (what a process killed right after finds) after no more fsyncs than a
    later put: the store's creation (config) and the probe of the filesystem's features
    happen at the saver's first lookup (LangGraph's ``get_tuple`` before a run, when
    SqliteSaver creates its tables), not on the first checkpoint's critical path. Counted:
    os.fsync calls from each put's start to its record's link (or rename) into place, the
    calls made one at a time as LangGraph makes them."""
    from langgraph.checkpoint.base import empty_checkpoint

    from ckptfs.integrations.langgraph import CkptfsSaver

    if existing:
        other = CkptfsSaver(str(tmp_path / "store"))
        other.put({"configurable": {"thread_id": "other", "checkpoint_ns": ""}},
                  empty_checkpoint(), {"step": -1}, {})
        other.close()

    calls = [0]
    published: list[int] = []

    def counting(real: Callable[..., Any], publish: bool) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            out = real(*args, **kwargs)
            if not publish:
                calls[0] += 1
            elif "/runs/" in str(args[1]):
                published.append(calls[0])
            return out
        return call

    monkeypatch.setattr(os, "fsync", counting(os.fsync, False))
    for name in ("link", "rename", "replace"):
        monkeypatch.setattr(os, name, counting(getattr(os, name), True))
    saver = CkptfsSaver(str(tmp_path / "store"))
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    assert saver.get_tuple(config) is None
    # the probe runs in the background meanwhile: LangGraph runs the first node between
    # its get_tuple and the first put (a put right after it would wait for the probe)
    saver.store.storage.probe_features()
    before_put = []
    for step in range(3):
        before_put.append(calls[0])
        config = saver.put(config, empty_checkpoint(), {"step": step - 1}, {})
    saver.close()
    assert len(published) == 3, published
    to_visible = [p - b for p, b in zip(published, before_put)]
    assert to_visible[0] <= min(to_visible[1:]), to_visible


def test_a_first_lookup_does_not_wait_for_the_probe(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A saver's first lookup on an existing store starts the probe of the filesystem's
    features in the background: ``get_tuple`` (a fresh ``get_state``) returns while the probe
    is still running (it made a file, a link and an fsync before the read), and the first
    ``put`` waits for it, so the commit uses the probed features."""
    import threading

    from langgraph.checkpoint.base import empty_checkpoint

    from ckptfs.integrations.langgraph import CkptfsSaver
    from ckptfs.storage import local_folders

    url = str(tmp_path / "store")
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    first = CkptfsSaver(url)
    config = first.put(config, empty_checkpoint(), {"step": -1}, {})
    first.close()
    started, gate = threading.Event(), threading.Event()
    real = local_folders.probe

    def held(*args: Any, **kwargs: Any) -> Any:
        started.set()
        gate.wait(5)
        return real(*args, **kwargs)

    monkeypatch.setattr(local_folders, "probe", held)
    saver = CkptfsSaver(url)
    assert saver.get_tuple(config) is not None
    storage = saver.store.storage
    assert started.wait(5) and not storage.features.probed  # read while the probe waits
    gate.set()
    saver.put(config, empty_checkpoint(), {"step": 0}, {})
    assert storage.features.probed
    saver.close()
