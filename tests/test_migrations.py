"""State schema migrations through the public API: resume, fork and read migrate in memory."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import ckptfs
from ckptfs.errors import MigrationError, MissingReference, SchemaError
from ckptfs.format.names import chunk_path
from ckptfs.runtime.migrations import apply_to_result, as_schema


def agent_migrations(calls: list[str] | None = None) -> ckptfs.Migrations:
    """agent@1 -> 2 renames and splits entries, 2 -> 3 drops one and reshapes messages."""
    m = ckptfs.Migrations()
    log = calls if calls is not None else []

    @m.register("agent", 1)
    def split_plan(state: dict[str, Any]) -> dict[str, Any]:
        log.append("1->2")
        plan = state.pop("plan")
        state["goal"] = plan["goal"]
        state["steps"] = plan["steps"]
        state["history"] = state.pop("messages")
        return state

    @m.register("agent", 2, ledger_results=lambda effect, r: {"amount_cents": r["amount"] * 100}
                if effect == "pay" else r)
    def drop_scratch(state: dict[str, Any]) -> dict[str, Any]:
        log.append("2->3")
        del state["scratch"]
        state["history"] = [{"role": h[0], "text": h[1]} for h in state["history"]]
        return state

    return m


def v1_state(n: int = 3) -> dict[str, Any]:
    return {"plan": {"goal": "book a trip", "steps": ["search", "pay"]},
            "messages": [["user", f"hello {i}"] for i in range(n)],
            "scratch": {"tmp": True}}


def test_chain_1_to_3_on_resume_records_migrated_from(store: ckptfs.Store) -> None:
    run = store.start_run("r", schema=("agent", 1))
    run.checkpoint(v1_state(2))
    old = run.checkpoint(v1_state(3))
    calls: list[str] = []
    resumed = store.resume("r", schema=("agent", 3), migrations=agent_migrations(calls))
    assert calls == ["1->2", "2->3"]
    assert resumed.schema == ckptfs.Schema("agent", 3)
    assert resumed.state == {"goal": "book a trip", "steps": ["search", "pay"],
                             "history": [{"role": "user", "text": f"hello {i}"} for i in range(3)]}
    snap = resumed.checkpoint({**resumed.state, "steps": ["pay"]})
    assert snap.manifest.schema == ckptfs.Schema("agent", 3)
    assert snap.migrated_from == ckptfs.Schema("agent", 1)
    assert snap.resumed_from == old.id
    # the field is written once, by the first commit after the migration
    later = resumed.checkpoint(resumed.state)
    assert later.migrated_from is None and later.manifest.schema.version == 3
    # re-read from the store, not from the in-memory Snapshot
    assert store.get("r@3").migrated_from == ckptfs.Schema("agent", 1)
    assert store.read("r@3")["steps"] == ["pay"]
    # resuming at the current schema migrates nothing and records nothing
    again = store.resume("r", schema=("agent", 3), migrations=agent_migrations(calls))
    assert calls == ["1->2", "2->3"]
    assert again.checkpoint(again.state).migrated_from is None


def test_partial_chain_from_middle_version(tmp_path: Path) -> None:
    store = ckptfs.open_store(str(tmp_path / "s"))
    run = store.start_run("r", schema=("agent", 2))
    run.checkpoint({"history": [["a", "b"]], "scratch": 1, "goal": "g", "steps": []})
    calls: list[str] = []
    resumed = store.resume("r", schema="agent@3", migrations=agent_migrations(calls))
    assert calls == ["2->3"]
    assert resumed.state["history"] == [{"role": "a", "text": "b"}]
    assert resumed.checkpoint(resumed.state).migrated_from == ckptfs.Schema("agent", 2)


def test_blobs_and_refs_pass_through_a_migration(tmp_path: Path) -> None:
    store = ckptfs.open_store(str(tmp_path / "s"))
    run = store.start_run("r", schema=("agent", 1))
    payload = os.urandom(200_000)
    run.checkpoint({"upload": ckptfs.Blob(payload), "doc": ckptfs.Ref("file:///nonexistent/x"),
                    "keep": 1})
    m = ckptfs.Migrations()

    @m.register("agent", 1)
    def rename(state: dict[str, Any]) -> dict[str, Any]:
        return {"attachment": state["upload"], "source": state["doc"], "keep": state["keep"]}

    with pytest.raises(MissingReference):
        store.resume("r", schema=("agent", 2), migrations=m)
    resumed = store.resume("r", schema=("agent", 2), migrations=m, lenient_refs=True)
    assert isinstance(resumed.state["attachment"], ckptfs.StoredBlob)
    assert resumed.state["source"].missing is not None
    snap = resumed.checkpoint(resumed.state)
    assert resumed._writer.bytes_new == 0  # the renamed blob reuses its chunks
    assert store.read(snap.id)["attachment"].read() == payload
    assert store.read(snap.id)["source"].uri == "file:///nonexistent/x"


def test_missing_step_raises_before_anything_runs(tmp_path: Path) -> None:
    store = ckptfs.open_store(str(tmp_path / "s"))
    run = store.start_run("r", schema=("agent", 1))
    snap = run.checkpoint({"plan": {"goal": "g", "steps": []}, "messages": [], "scratch": 0})
    calls: list[str] = []
    m = ckptfs.Migrations()
    m.register("agent", 1)(lambda s: calls.append("1->2") or s)  # type: ignore[func-returns-value]
    # remove the data: a plan that read the state first would fail with MissingObject instead
    for entry in snap.manifest.entries.values():
        for c in getattr(entry, "chunks", ()):
            os.remove(tmp_path / "s" / chunk_path(c.digest))
    with pytest.raises(SchemaError) as ei:
        store.resume("r", schema=("agent", 3), migrations=m)
    msg = str(ei.value)
    assert "agent@2->3" in msg and "agent@1" in msg and "agent@3" in msg and snap.id in msg
    assert "1->2" in msg  # says what is registered
    assert not isinstance(ei.value, MigrationError)
    assert calls == []
    with pytest.raises(SchemaError, match="no step agent@1->2"):
        store.resume("r", schema=("agent", 2))  # no registry at all = empty chain


def test_newer_than_known_schema_is_refused(tmp_path: Path) -> None:
    store = ckptfs.open_store(str(tmp_path / "s"))
    store.start_run("r", schema=("agent", 4)).checkpoint({"x": 1})
    calls: list[str] = []
    with pytest.raises(SchemaError) as ei:
        store.resume("r", schema=("agent", 3), migrations=agent_migrations(calls))
    assert "agent@4" in str(ei.value) and "agent@3" in str(ei.value)
    assert "newer" in str(ei.value)
    assert calls == []
    with pytest.raises(SchemaError, match="newer"):
        store.read("r", schema=("agent", 3), migrations=agent_migrations(calls))


def test_different_schema_name_is_refused(tmp_path: Path) -> None:
    store = ckptfs.open_store(str(tmp_path / "s"))
    store.start_run("r", schema=("planner", 1)).checkpoint({"x": 1})
    with pytest.raises(SchemaError) as ei:
        store.resume("r", schema=("agent", 3), migrations=agent_migrations())
    assert "planner@1" in str(ei.value) and "agent@3" in str(ei.value)
    assert "name" in str(ei.value)


def test_migration_raising_names_snapshot_and_step(tmp_path: Path) -> None:
    store = ckptfs.open_store(str(tmp_path / "s"))
    run = store.start_run("r", schema=("agent", 1))
    snap = run.checkpoint({"plan": {"goal": "g", "steps": []}, "messages": [["u", "x"]]})
    with pytest.raises(MigrationError) as ei:  # no 'scratch' entry: drop_scratch raises KeyError
        store.resume("r", schema=("agent", 3), migrations=agent_migrations())
    msg = str(ei.value)
    assert snap.id in msg and "seq 1" in msg
    assert "agent@2->3" in msg and "drop_scratch" in msg and "KeyError" in msg
    assert isinstance(ei.value.__cause__, KeyError)
    assert [s.seq for s in store.snapshots("r")] == [1]  # nothing was committed


def test_step_must_return_the_state(tmp_path: Path) -> None:
    store = ckptfs.open_store(str(tmp_path / "s"))
    store.start_run("r", schema=("agent", 1)).checkpoint({"x": 1})
    m = ckptfs.Migrations()

    @m.register("agent", 1)
    def forgot_return(state: dict[str, Any]) -> dict[str, Any]:
        state["y"] = state.pop("x")
        return None  # type: ignore[return-value]

    with pytest.raises(MigrationError, match="forgot_return.*returned NoneType"):
        store.resume("r", schema=("agent", 2), migrations=m)


def test_fork_and_read_migrate_too(tmp_path: Path) -> None:
    store = ckptfs.open_store(str(tmp_path / "s"))
    run = store.start_run("r", schema=("agent", 1))
    run.checkpoint(v1_state(1))
    run.checkpoint(v1_state(2))
    m = agent_migrations()
    assert store.read("r@1", schema=("agent", 3), migrations=m)["history"] == [
        {"role": "user", "text": "hello 0"}]
    assert "plan" in store.read("r@1")  # reading without a schema gives the stored shape
    fork = store.fork("r@1", "f", schema=("agent", 3), migrations=m)
    snap = fork.checkpoint(fork.state)
    assert snap.migrated_from == ckptfs.Schema("agent", 1) and snap.parent == store.get("r@1").id
    assert snap.manifest.schema == ckptfs.Schema("agent", 3)


def test_ledger_results_hook_reshapes_results_in_chain_order() -> None:
    m = agent_migrations()
    chain = m.plan(ckptfs.Schema("agent", 1), ckptfs.Schema("agent", 3))
    assert apply_to_result(chain, "pay", {"amount": 12}) == {"amount_cents": 1200}
    assert apply_to_result(chain, "search", ["x"]) == ["x"]
    with pytest.raises(MigrationError, match="ledger_results.*agent@2->3.*'pay'"):
        apply_to_result(chain, "pay", {"no-amount": 1})


def test_registry_rules(tmp_path: Path) -> None:
    m = agent_migrations()
    with pytest.raises(ValueError, match="already registered"):
        m.register("agent", 1)(lambda s: s)
    with pytest.raises(ValueError):
        m.register("agent", -1)(lambda s: s)
    assert [s.version for s in m.steps("agent")] == [1, 2] and len(m) == 2
    assert m.plan(ckptfs.Schema("agent", 3), ckptfs.Schema("agent", 3)) == []
    assert as_schema("my.app@12") == ckptfs.Schema("my.app", 12)
    with pytest.raises(ValueError):
        as_schema("agent")
    store = ckptfs.open_store(str(tmp_path / "s"))
    store.start_run("r", schema=("agent", 1)).checkpoint({"x": 1})
    with pytest.raises(ValueError, match="needs schema"):
        store.resume("r", migrations=m)


def test_migrate_convenience_runs_plan_and_steps() -> None:
    out = agent_migrations().migrate(v1_state(1), ckptfs.Schema("agent", 1),
                                     ckptfs.Schema("agent", 3), what="test state")
    assert out == {"goal": "book a trip", "steps": ["search", "pay"],
                   "history": [{"role": "user", "text": "hello 0"}]}


@pytest.mark.parametrize("junk", ["agent@1", {"name": "agent"}, {"name": 1, "version": 1},
                                  {"name": "agent", "version": -1}])
def test_malformed_migrated_from_is_ignored(tmp_path: Path, junk: Any) -> None:
    store = ckptfs.open_store(str(tmp_path / "s"))
    run = store.start_run("r", schema=("agent", 2))
    run._next_extra = {"migrated_from": junk}  # as another writer might have written it
    run.checkpoint({"x": 1})
    snap = store.get("r@1")
    assert snap.manifest.extra["migrated_from"] == junk and snap.migrated_from is None
    assert store.read("r") == {"x": 1}


def test_ledger_results_are_migrated_on_resume(tmp_path: Path) -> None:
    """Completed effects return their *migrated* result after a resume, and are not re-run."""
    store = ckptfs.open_store(str(tmp_path / "s"))
    run = store.start_run("r", schema=("agent", 1))
    run.checkpoint(v1_state(1))
    calls: list[int] = []

    def pay(amount: int) -> dict[str, Any]:
        calls.append(amount)
        return {"amount": amount, "receipt": "x" * (100_000 if amount > 100 else 1)}

    assert run.effect("pay", pay, 12, key="pay-1")["amount"] == 12
    assert run.effect("pay", pay, 500, key="pay-2")["amount"] == 500  # a large result
    before = run.checkpoint(run.state)
    resumed = store.resume("r", schema=("agent", 3), migrations=agent_migrations())
    assert resumed.effect("pay", pay, 12, key="pay-1") == {"amount_cents": 1200}
    assert resumed.effect("pay", pay, 500, key="pay-2") == {"amount_cents": 50000}
    assert calls == [12, 500]
    snap = resumed.checkpoint(resumed.state)
    assert snap.migrated_from == ckptfs.Schema("agent", 1)
    again = store.resume("r", schema=("agent", 3))  # already migrated: no registry needed
    assert again.effect("pay", pay, 12, key="pay-1") == {"amount_cents": 1200}
    assert again.effect("pay", pay, 500, key="pay-2") == {"amount_cents": 50000}
    assert calls == [12, 500]
    assert again.ledger.get("pay-1").result == {"amount_cents": 1200}  # type: ignore[union-attr]
    assert again.ledger.get("pay-2").result_content is None  # small now: back inline
    # stored snapshots are never rewritten: the old head keeps the old shape
    old = store.ledger(before.id).get("pay-1")
    assert old is not None and old.result["amount"] == 12
    assert store.ledger(before.id).get("pay-2").result_content is not None  # type: ignore[union-attr]
    # reading migrates in memory too
    assert store.ledger(before.id, schema=("agent", 3), migrations=agent_migrations()).get(
        "pay-1").result == {"amount_cents": 1200}  # type: ignore[union-attr]


def test_large_migrated_result_goes_to_result_content(tmp_path: Path) -> None:
    store = ckptfs.open_store(str(tmp_path / "s"))
    run = store.start_run("r", schema=("agent", 1))
    run.checkpoint({"x": 1})
    run.effect("fetch", lambda: {"rows": 3}, key="f-1")
    m = ckptfs.Migrations()
    m.register("agent", 1, ledger_results=lambda effect, r: {**r, "blob": "y" * 100_000})(
        lambda s: s)
    resumed = store.resume("r", schema=("agent", 2), migrations=m)
    resumed.checkpoint(resumed.state)
    eff = store.ledger("r").get("f-1")
    assert eff is not None and eff.result_content is not None and eff.result is None
    assert resumed.effect("fetch", lambda: {"rows": 0}, key="f-1")["rows"] == 3
    assert store.resume("r").effect("fetch", lambda: {}, key="f-1")["blob"] == "y" * 100_000


def test_ledger_hook_raising_or_returning_non_plain_is_a_migration_error(tmp_path: Path) -> None:
    store = ckptfs.open_store(str(tmp_path / "s"))
    run = store.start_run("r", schema=("agent", 1))
    run.checkpoint({"x": 1})
    run.effect("pay", lambda: {"amount": 1}, key="p")
    bad = ckptfs.Migrations()
    bad.register("agent", 1, ledger_results=lambda effect, r: r["missing"])(lambda s: s)
    with pytest.raises(MigrationError, match="ledger_results.*agent@1->2.*KeyError.*'pay'"):
        store.resume("r", schema=("agent", 2), migrations=bad)
    odd = ckptfs.Migrations()
    odd.register("agent", 1, ledger_results=lambda effect, r: {1, 2})(lambda s: s)
    with pytest.raises(MigrationError, match="migrated result of effect 'p'"):
        store.resume("r", schema=("agent", 2), migrations=odd)
    head = store.head("r")
    assert [s.seq for s in store.snapshots("r")][-1] == head.seq  # nothing committed


def test_small_restored_blob_can_be_checkpointed_again(tmp_path: Path) -> None:
    """An inline (small) blob comes back as a StoredBlob without chunks; committing it again
    (after a migration moved it, or just run.state) keeps it inline and readable."""
    store = ckptfs.open_store(str(tmp_path / "s"))
    run = store.start_run("r", schema=("agent", 1))
    run.checkpoint({"note": ckptfs.Blob(b"tiny", type="text/plain")})
    run.checkpoint(run.state)
    m = ckptfs.Migrations()
    m.register("agent", 1)(lambda s: {"memo": s["note"]})
    resumed = store.resume("r", schema=("agent", 2), migrations=m)
    snap = resumed.checkpoint(resumed.state)
    got = store.read(snap.id)["memo"]
    assert got.read() == b"tiny" and got.type == "text/plain"


def test_written_schema_fields_match_the_spec_cddl(tmp_path: Path) -> None:
    import pycddl

    from ckptfs.format import cbor

    cddl = (Path(__file__).parent.parent / "spec" / "ckptfs.cddl").read_text()
    block = cddl[cddl.index("; --- schema migrations ---"):cddl.index("; --- effect ledger ---")]
    schema = pycddl.Schema("root = migrations-schema\n" + block)
    store = ckptfs.open_store(str(tmp_path / "s"))
    store.start_run("r", schema=("agent", 1)).checkpoint(v1_state(1))
    run = store.resume("r", schema=("agent", 3), migrations=agent_migrations())
    m = run.checkpoint(run.state).manifest.to_cbor()
    schema.validate_cbor(cbor.encode(m["schema"]))
    schema.validate_cbor(cbor.encode(m["migrated_from"]))
    with pytest.raises(pycddl.ValidationError):
        schema.validate_cbor(cbor.encode({"name": "agent", "version": -1}))
