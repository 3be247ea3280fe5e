"""``ckptfs check`` (run as a subprocess) and ``ckptfs.testing.assert_stores_load``."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import ckptfs
from ckptfs.ops.check import check
from ckptfs.testing import assert_stores_load, copy_store, find_stores

APP = textwrap.dedent('''
    """A user's state module: migrations agent@1 -> 2 -> 3 and a validation function."""
    import ckptfs

    migrations = ckptfs.Migrations()

    @migrations.register("agent", 1)
    def rename(state):
        state["history"] = state.pop("messages")
        return state

    @migrations.register("agent", 2)
    def split(state):
        plan = state.pop("plan")
        state["goal"], state["steps"] = plan["goal"], plan["steps"]
        return state

    def validate(state):
        assert set(state) >= {"history", "goal", "steps"}, sorted(state)
        if state["goal"] == "invalid":
            return False
''')


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ckptfs.cli", *args], capture_output=True,
                          text=True, cwd=cwd)


def _v(version: int, i: int, goal: str = "g") -> dict[str, Any]:
    plan = {"goal": goal, "steps": [f"s{i}"]}
    if version == 1:
        return {"messages": [f"m{j}" for j in range(i)], "plan": plan}
    if version == 2:
        return {"history": [f"m{j}" for j in range(i)], "plan": plan}
    return {"history": [f"m{j}" for j in range(i)], "goal": goal, "steps": [f"s{i}"]}


@pytest.fixture(scope="module")
def app_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Many runs across schema versions, with failures only in *old* snapshots of some runs."""
    root = tmp_path_factory.mktemp("check")
    (root / "myapp_state.py").write_text(APP)
    store = ckptfs.open_store(str(root / "store"))
    for r in range(6):  # six healthy runs at agent@1, three snapshots each
        run = store.start_run(f"old-{r}", schema=("agent", 1))
        for i in range(3):
            run.checkpoint(_v(1, i))
    run = store.start_run("mid", schema=("agent", 2))
    run.checkpoint(_v(2, 1))
    run = store.start_run("current", schema=("agent", 3))
    run.checkpoint(_v(3, 1))
    # an old snapshot the migration cannot handle (no 'plan'), then a healthy head
    run = store.start_run("broken-old", schema=("agent", 1))
    run.checkpoint({"messages": []})
    run.checkpoint(_v(1, 2))
    # an old snapshot whose migrated state fails validation, then a healthy head
    run = store.start_run("invalid-old", schema=("agent", 1))
    run.checkpoint(_v(1, 1, goal="invalid"))
    run.checkpoint(_v(1, 2))
    store.start_run("expired", schema=("agent", 1)).checkpoint(_v(1, 1), expires_at=1)
    store.start_run("future", schema=("agent", 4)).checkpoint({"x": 1})
    store.start_run("planner", schema=("planner", 1)).checkpoint({"x": 1})
    return root


def test_check_json_reports_every_snapshot(app_store: Path) -> None:
    p = _cli("check", "store", "--migrations", "myapp_state:migrations", "--schema", "agent@3",
             "--validate", "myapp_state:validate", "--json", cwd=app_store)
    assert p.returncode == 1, p.stderr
    rep = json.loads(p.stdout)
    assert rep["runs"] == 13 and rep["snapshots"] == 6 * 3 + 1 + 1 + 2 + 2 + 1 + 1 + 1
    by = {(r["run"], r["seq"]): r for r in rep["results"]}
    assert not rep["ok"] and rep["failed"] == 4
    assert by["old-0", 1]["ok"] and by["old-0", 1]["steps"] == 2
    assert by["old-0", 1]["schema"] == "agent@1" and by["old-0", 1]["target"] == "agent@3"
    assert by["mid", 1]["steps"] == 1 and by["current", 1]["steps"] == 0
    bad = by["broken-old", 1]
    assert (bad["stage"], bad["category"]) == ("migrate", "schema")
    assert "agent@2->3" in bad["message"] and bad["snapshot"] in bad["message"]
    assert by["broken-old", 2]["ok"]  # the head alone would have looked fine
    assert by["expired", 1]["ok"] and by["expired", 1]["steps"] == 2  # retained, so checked
    assert by["invalid-old", 1]["stage"] == "validate" and by["invalid-old", 2]["ok"]
    assert by["future", 1]["stage"] == "schema" and "newer" in by["future", 1]["message"]
    assert by["planner", 1]["stage"] == "schema" and "planner@1" in by["planner", 1]["message"]


def test_check_text_and_exit_codes(app_store: Path) -> None:
    base = ["check", "store", "--migrations", "myapp_state:migrations", "--schema", "agent@3"]
    p = _cli(*base, "--run", "old-1", "--run", "mid", cwd=app_store)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "ok    old-1@1  blake3:" in p.stdout and "agent@1 -> agent@3 (2 steps)" in p.stdout
    assert p.stdout.strip().endswith("2 runs, 4 snapshots: 4 ok, 0 failed")
    p = _cli(*base, "--run", "broken-old", cwd=app_store)
    assert p.returncode == 1
    assert "FAIL  broken-old@1" in p.stdout and "migrate:" in p.stdout
    # without migrations every agent@1 snapshot fails at the schema stage
    p = _cli("check", "store", "--schema", "agent@3", "--run", "old-2", cwd=app_store)
    assert p.returncode == 1 and p.stdout.count("schema: ") == 3
    # without --schema: loaded as stored
    p = _cli("check", "store", "--run", "future", cwd=app_store)
    assert p.returncode == 0 and "agent@4" in p.stdout


@pytest.mark.parametrize("args, needle", [
    (["--migrations", "myapp_state:migrations"], "needs --schema"),
    (["--migrations", "myapp_state:nope", "--schema", "agent@3"], "no attribute 'nope'"),
    (["--migrations", "no_such_module:m", "--schema", "agent@3"], "cannot import"),
    (["--migrations", "myapp_state:validate", "--schema", "agent@3"], "not a ckptfs.Migrations"),
    (["--schema", "agent"], "NAME@VERSION"),
    (["--schema", "agent@1", "--schema", "agent@2"], "one --schema per schema name"),
])
def test_check_usage_errors(app_store: Path, args: list[str], needle: str) -> None:
    p = _cli("check", "store", *args, cwd=app_store)
    assert p.returncode == 2 and needle in p.stderr, p.stderr


def test_check_not_a_store_is_a_store_error(tmp_path: Path) -> None:
    p = _cli("check", str(tmp_path / "nothing"), cwd=tmp_path)
    assert p.returncode == 3 and "no ckptfs store" in p.stderr


def test_check_on_memory_backend_in_process() -> None:
    store = ckptfs.open_store("memory://ckptfs-check-test")
    run = store.start_run("r", schema=("agent", 1))
    run.checkpoint({"a": 1})
    run.checkpoint({"a": 2})
    m = ckptfs.Migrations()
    m.register("agent", 1)(lambda s: {"b": s["a"]})
    seen: list[Any] = []
    rep = check(store, schemas=[ckptfs.Schema("agent", 2)], migrations=m, validate=seen.append)
    assert rep.ok and seen == [{"b": 1}, {"b": 2}]


def test_check_runs_ledger_hooks_and_reports_their_failure() -> None:
    store = ckptfs.open_store("memory://ckptfs-check-ledger")
    run = store.start_run("r", schema=("agent", 1))
    run.checkpoint({"a": 1})
    run.effect("pay", lambda: {"cents": 5}, key="p1")
    m = ckptfs.Migrations()
    m.register("agent", 1, ledger_results=lambda effect, r: {"amount": r["euros"]})(lambda s: s)
    rep = check(store, schemas=[ckptfs.Schema("agent", 2)], migrations=m)
    by = {r.seq: r for r in rep.results}
    assert by[1].ok and by[2].ok  # no ledger yet; then only the intent, no result to migrate
    assert [r.seq for r in rep.failed] == [3] and by[3].stage == "migrate"
    assert "'pay'" in by[3].message and "KeyError" in by[3].message  # type: ignore[operator]


def test_assert_stores_load_passes_and_fails(app_store: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(app_store))
    import myapp_state  # type: ignore[import-not-found]  # written by the fixture

    good = copy_store(app_store / "store", tmp_path / "nested" / "good")
    assert find_stores(tmp_path) == [good]
    with pytest.raises(AssertionError) as ei:
        assert_stores_load(tmp_path, schema=("agent", 3), migrations=myapp_state.migrations,
                           validate=myapp_state.validate)
    msg = str(ei.value)
    assert "4 of 27 snapshots" in msg and "broken-old@1" in msg and "invalid-old@1" in msg
    assert "broken-old@2" not in msg
    # a store that only holds healthy runs passes, and the reports are returned
    healthy = ckptfs.open_store(str(tmp_path / "healthy"))
    healthy.start_run("r", schema=("agent", 1)).checkpoint(_v(1, 2))
    reports = assert_stores_load(tmp_path / "healthy", schema="agent@3",
                                 migrations=myapp_state.migrations, validate=myapp_state.validate)
    assert [len(r.results) for r in reports] == [1]
    with pytest.raises(AssertionError, match="no ckptfs store found"):
        assert_stores_load(tmp_path / "empty-dir")


def test_pytest_plugin_fixture_is_registered(ckptfs_store: ckptfs.Store) -> None:
    assert ckptfs_store.runs() == []
    ckptfs_store.start_run("r").checkpoint({"x": 1})
    assert ckptfs_store.read("r") == {"x": 1}
