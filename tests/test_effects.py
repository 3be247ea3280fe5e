"""The effect API in one process: replay, failures, in-doubt, reconcile, approvals, ledger bytes."""

from __future__ import annotations

from typing import Any

import pytest

import ckptfs
from ckptfs.errors import (
    ApprovalPending,
    BoundaryError,
    ConflictError,
    EffectFailed,
    EffectInDoubt,
    EffectMismatch,
)
from ckptfs.format import containers as ct
from ckptfs.format.ledger import LedgerRef
from ckptfs.runtime.effects import NOT_DONE


class Crash(BaseException):
    """Stands in for the process dying inside fn: not an Exception, so nothing is recorded."""


def counter() -> tuple[list[Any], Any]:
    calls: list[Any] = []

    def pay(amount: int, *, to: str) -> dict[str, Any]:
        calls.append((amount, to))
        return {"id": f"ch{len(calls)}", "amount": amount}

    return calls, pay


def test_completed_effect_replays_its_result_after_resume(store: ckptfs.Store) -> None:
    calls, pay = counter()
    run = store.start_run("r")
    run.checkpoint({"step": 1})
    assert run.effect("pay", pay, 5, to="bob", key="k") == {"id": "ch1", "amount": 5}
    assert run.effect("pay", pay, 5, to="bob", key="k") == {"id": "ch1", "amount": 5}
    resumed = ckptfs.open_store(store.url).resume("r")
    assert resumed.effect("pay", pay, 5, to="bob", key="k") == {"id": "ch1", "amount": 5}
    assert calls == [(5, "bob")]
    assert resumed.state == {"step": 1}
    assert [s.boundary for s in store.snapshots("r")] == ["step", "before_effect", "after_effect"]
    eff = resumed.ledger.effects["k"]
    assert (eff.status, eff.issued_by, eff.settled_by, eff.via) == ("completed", 1, 1, "call")
    with pytest.raises(EffectMismatch, match="other arguments"):
        resumed.effect("pay", pay, 6, to="bob", key="k")
    with pytest.raises(EffectMismatch, match="kind or name"):
        resumed.effect("refund", pay, 5, to="bob", key="k")


def test_failure_is_recorded_reraised_and_replayed(store: ckptfs.Store) -> None:
    run = store.start_run("r")

    def declined() -> None:
        raise ValueError("card declined")

    with pytest.raises(ValueError, match="card declined"):
        run.effect("pay", declined, key="k")
    resumed = store.resume("r")
    with pytest.raises(EffectFailed, match="ValueError: card declined") as e:
        resumed.effect("pay", declined, key="k")
    assert e.value.record.error == {"type": "ValueError", "message": "card declined"}


def test_intent_without_result_is_in_doubt_until_reconciled(store: ckptfs.Store) -> None:
    calls, pay = counter()
    run = store.start_run("r")

    def dies(amount: int, *, to: str) -> Any:
        pay(amount, to=to)
        raise Crash()

    with pytest.raises(Crash):
        run.effect("pay", dies, 7, to="al", key="k")
    assert run.ledger.effects["k"].in_doubt  # this process also knows it is in doubt
    resumed = store.resume("r")
    with pytest.raises(EffectInDoubt) as e:
        resumed.effect("pay", pay, 7, to="al", key="k")
    assert e.value.record.key == "k" and calls == [(7, "al")]
    seen: list[str] = []
    got = resumed.effect("pay", pay, 7, to="al", key="k",
                         reconcile=lambda eff: seen.append(eff.key) or {"id": "ch1", "amount": 7})
    assert got == {"id": "ch1", "amount": 7} and seen == ["k"] and calls == [(7, "al")]
    eff = store.resume("r").ledger.effects["k"]
    assert (eff.status, eff.via, eff.issued_by, eff.settled_by) == ("completed", "reconcile", 1, 2)


def test_reconcile_not_done_issues_again_with_the_same_key(store: ckptfs.Store) -> None:
    calls, pay = counter()
    run = store.start_run("r")
    with pytest.raises(Crash):
        run.effect("pay", lambda a, to: (_ for _ in ()).throw(Crash()), 1, to="x", key="k")
    resumed = store.resume("r")
    assert resumed.effect("pay", pay, 1, to="x", key="k", reconcile=lambda e: NOT_DONE) == {
        "id": "ch1", "amount": 1}
    eff = store.resume("r").ledger.effects["k"]
    assert (eff.status, eff.issues, eff.issued_by) == ("completed", 2, 2)


def test_settle_effect_by_hand(store: ckptfs.Store) -> None:
    run = store.start_run("r")
    with pytest.raises(Crash):
        run.effect("pay", lambda: (_ for _ in ()).throw(Crash()), key="a")
    with pytest.raises(Crash):
        run.effect("pay", lambda: (_ for _ in ()).throw(Crash()), key="b")
    r = store.resume("r")
    assert [e.key for e in r.effects() if e.in_doubt] == ["a", "b"]
    r.settle_effect("a", result={"id": "found-by-hand"})
    r.settle_effect("b", failed="the bank says it never arrived")
    with pytest.raises(EffectMismatch):
        r.settle_effect("a", result=1)
    r = store.resume("r")
    assert r.effect("pay", lambda: 1 / 0, key="a") == {"id": "found-by-hand"}
    with pytest.raises(EffectFailed, match="never arrived"):
        r.effect("pay", lambda: 1 / 0, key="b")
    assert r.ledger.effects["a"].via == "manual"


def test_no_checkpoint_or_nested_effect_inside_an_effect(store: ckptfs.Store) -> None:
    run = store.start_run("r")
    run.checkpoint({"x": 1})

    def sneaky() -> int:
        run.checkpoint({"x": 2})
        return 1

    with pytest.raises(BoundaryError, match="while effect 'k'"):
        run.effect("e", sneaky, key="k")
    with pytest.raises(BoundaryError, match="do not nest"):
        run.effect("e", lambda: run.effect("f", lambda: 1, key="inner"), key="k2")
    assert store.read("r") == {"x": 1}
    assert run.ledger.effects["k"].status == "failed"  # fn raised: recorded as failed
    run.checkpoint({"x": 3})  # closed again afterwards


def test_effect_commits_carry_the_last_checkpointed_state(store: ckptfs.Store) -> None:
    run = store.start_run("r")
    run.checkpoint({"messages": ["a"] * 3, "blob": ckptfs.Blob(b"x" * 5000)})
    run.effect("e", lambda: 1, key="k")
    for snap in store.snapshots("r"):
        assert store.read(snap)["messages"] == ["a"] * 3
    assert store.read("r")["blob"].read() == b"x" * 5000


def test_approval_is_recorded_exposed_on_resume_and_never_asked_twice(store: ckptfs.Store) -> None:
    run = store.start_run("r")
    run.checkpoint({"plan": "refund"})
    with pytest.raises(ApprovalPending):
        run.wait_for_approval({"refund": 300}, key="ok-refund")
    assert store.head("r").boundary == "approval"
    human = store.resume("r")
    [pending] = human.pending_approvals()
    assert pending.request == {"refund": 300}
    human.approve("ok-refund", {"by": "ana"})
    with pytest.raises(EffectMismatch, match="already decided"):
        human.reject("ok-refund")
    agent = store.resume("r")
    d = agent.wait_for_approval({"refund": 300}, key="ok-refund")
    assert d.approved and d.decision == {"by": "ana"}
    n = len(list(store.snapshots("r")))
    assert agent.wait_for_approval({"refund": 300}, key="ok-refund") == d
    assert len(list(store.snapshots("r"))) == n and not agent.pending_approvals()
    with pytest.raises(ApprovalPending):
        agent.wait_for_approval({"x": 1}, key="second")
    store.resume("r").reject("second", "no")
    assert not store.resume("r").wait_for_approval({"x": 1}, key="second").approved


def test_fork_inherits_the_ledger(store: ckptfs.Store) -> None:
    calls, pay = counter()
    run = store.start_run("r")
    run.effect("pay", pay, 1, to="x", key="k")
    fork = store.fork("r", "r2")
    assert fork.effect("pay", pay, 1, to="x", key="k") == {"id": "ch1", "amount": 1}
    assert calls == [(1, "x")]


def test_large_result_is_stored_as_chunks(store: ckptfs.Store) -> None:
    big = [f"row {i} " * 20 for i in range(2000)]
    run = store.start_run("r")
    assert run.effect("query", lambda: big, key="q") == big
    eff = store.resume("r").ledger.effects["q"]
    assert eff.result is None and eff.result_content is not None
    assert store.resume("r").effect("query", lambda: 1 / 0, key="q") == big


def test_a_fenced_effect_never_calls_fn(store: ckptfs.Store) -> None:
    calls, pay = counter()
    store.start_run("r").checkpoint({"x": 1})
    a, b = store.resume("r"), store.resume("r")
    a.effect("pay", pay, 1, to="x", key="k")
    with pytest.raises(ConflictError):
        b.effect("pay", pay, 1, to="x", key="k")
    assert calls == [(1, "x")] and "k" not in b.ledger.effects


def test_appending_a_record_writes_only_the_new_bytes(tmp_path: Any) -> None:
    store = ckptfs.open_store(str(tmp_path / "s"))
    run = store.start_run("r")
    run.checkpoint({"x": 1})
    written: list[tuple[str, int]] = []
    real = store.repo.storage.commit

    def commit(objects: list[tuple[str, bytes]], path: str, data: bytes) -> None:
        # chunk bodies written: packs, and the bodies the record carries (its body area)
        written.extend((p, len(b)) for p, b in objects)
        written.append((path, ct.decode(data, what=path).header.body_length))
        real(objects, path, data)

    setattr(store.repo.storage, "commit", commit)
    sizes, chunk_bytes, kept_prefix = [], [], 0
    prev: tuple[Any, ...] = ()
    for i in range(100):
        written.clear()
        before = run.ledger.items
        run.effect("note", lambda i=i: {"n": i, "text": f"line {i} " * 50}, key=f"k{i:04d}")
        ref = LedgerRef.from_cbor(store.head("r").manifest.ledger)
        sizes.append(ref.size)
        chunk_bytes.append(sum(n for _, n in written))
        assert run.ledger.items[:len(before)] == before
        kept_prefix += ref.chunks[:len(prev)] == prev
        prev = ref.chunks
    final = sizes[-1]
    # appends never re-encode earlier records: total ledger bytes written stay linear
    assert sum(chunk_bytes) < 3 * final
    # most appends write about one record (two commits per effect: intent and result) and
    # keep every earlier ledger chunk as it was
    record = final / 200
    assert sorted(chunk_bytes)[50] < 3 * record
    assert kept_prefix >= 80
