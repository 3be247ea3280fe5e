"""Leases on effect intents (issue 13, defect 4) and failures whose text cannot be read.

An intent carries its owner and a deadline; before the deadline no other process reconciles or
re-issues it (EffectInProgress, or it waits when asked); the owner whose call returned records
the result even when another process committed on top, unless the effect was re-issued (then
EffectSuperseded). Stores on local disk; "processes" are Store objects with their own owner.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import ckptfs
from ckptfs.errors import (
    ConflictError,
    EffectFailed,
    EffectInDoubt,
    EffectInProgress,
    EffectSuperseded,
)
from ckptfs.runtime.effects import DEFAULT_TIMEOUT, NOT_DONE


class Crash(BaseException):
    """The process dies inside the call: nothing is recorded."""


class Clock:
    def __init__(self) -> None:
        self.t = 1_700_000_000_000

    def __call__(self) -> int:
        return self.t


def process(url: str, clock: Clock | None = None, owner: str | None = None) -> ckptfs.Run:
    """Another process resuming run r: its own Store object, clock and owner."""
    run = ckptfs.open_store(url, clock=clock).resume("r")
    if owner is not None:
        run.owner = owner
    return run


@pytest.fixture
def url(tmp_path: Path) -> str:
    u = str(tmp_path / "s")
    ckptfs.open_store(u).start_run("r").checkpoint({"x": 1})
    return u


def test_reconciling_while_the_first_call_runs_does_not_call_again(url: str) -> None:
    """The issue's schedule, in one process: A is inside the call, B resumes A's intent and
    reconciles. Before leases B got NOT_DONE, re-issued and called again; A then got
    ConflictError although its call happened."""
    world: list[str] = []
    caught: list[EffectInProgress] = []

    def a_call() -> dict[str, str]:
        b = process(url)
        with pytest.raises(EffectInProgress) as e:
            b.effect("charge", lambda: world.append("B"), key="k",
                     reconcile=lambda eff: {"by": world[0]} if world else NOT_DONE)
        caught.append(e.value)
        world.append("A")
        return {"by": "A"}

    a = process(url)
    assert a.effect("charge", a_call, key="k", reconcile=lambda eff: NOT_DONE) == {"by": "A"}
    assert world == ["A"]
    [e] = caught
    assert e.owner == a.owner and e.deadline == a.ledger.effects["k"].deadline
    assert "in progress" in str(e) and "wait=True" in str(e)
    eff = ckptfs.open_store(url).ledger("r").effects["k"]
    assert (eff.status, eff.via, eff.issues, eff.owner) == ("completed", "call", 1, a.owner)


def test_a_foreign_lease_blocks_reconcile_and_settle_until_its_deadline(url: str) -> None:
    clock = Clock()
    a = process(url, clock, owner="proc-a")
    with pytest.raises(Crash):  # A dies in the call; its lease runs 2 s
        a.effect("charge", lambda: (_ for _ in ()).throw(Crash()), key="k", timeout=2)
    intent = a.ledger.effects["k"]
    assert (intent.owner, intent.deadline) == ("proc-a", clock.t + 2000)
    asked: list[str] = []
    b = process(url, clock, owner="proc-b")
    with pytest.raises(EffectInProgress, match="proc-a"):
        b.effect("charge", lambda: 1, key="k", reconcile=lambda eff: asked.append("b"))
    with pytest.raises(EffectInProgress):
        b.effect("charge", lambda: 1, key="k")  # no reconcile: still in progress, not in doubt
    with pytest.raises(EffectInProgress):
        b.settle_effect("k", result=1)
    assert asked == [] and intent.running(clock.t) and not intent.running(clock.t + 2000)
    clock.t += 2000  # the deadline: in doubt, as before leases
    with pytest.raises(EffectInDoubt):
        b.effect("charge", lambda: 1, key="k")
    assert b.effect("charge", lambda: 2, key="k", reconcile=lambda eff: NOT_DONE) == 2
    eff = ckptfs.open_store(url).ledger("r").effects["k"]
    assert (eff.status, eff.issues, eff.owner, eff.deadline) == (
        "completed", 2, "proc-b", clock.t + DEFAULT_TIMEOUT * 1000)


def test_the_owner_itself_knows_its_call_ended(url: str) -> None:
    """A process whose own call died (BaseException) treats its intent as in doubt at once."""
    run = process(url)
    with pytest.raises(Crash):
        run.effect("charge", lambda: (_ for _ in ()).throw(Crash()), key="k")
    with pytest.raises(EffectInDoubt):
        run.effect("charge", lambda: 1, key="k")
    again = process(url)  # another handle in the same process: the call is not in flight
    assert again.effect("charge", lambda: 3, key="k", reconcile=lambda eff: NOT_DONE) == 3


def test_result_is_recorded_on_top_of_a_commit_made_during_the_call(url: str) -> None:
    """B commits on top of A's intent while A is in the call: A's result commit conflicts, A
    re-reads the head (the intent is still its own) and records the result on top."""
    a = process(url, owner="proc-a")

    def call() -> str:
        b = process(url, owner="proc-b")
        b.checkpoint({"x": 2})
        return "paid"

    assert a.effect("charge", call, key="k") == "paid"
    store = ckptfs.open_store(url)
    head = store.head("r")
    eff = store.ledger("r").effects["k"]
    assert (eff.status, eff.result, eff.owner) == ("completed", "paid", "proc-a")
    assert store.read("r") == {"x": 2} and head.boundary == "after_effect"
    with pytest.raises(ConflictError, match="resume"):  # A is fenced: the run moved on
        a.checkpoint({"x": 3})
    assert process(url).effect("charge", lambda: 1 / 0, key="k") == "paid"


def test_failure_is_recorded_on_top_too(url: str) -> None:
    a = process(url, owner="proc-a")

    def call() -> None:
        process(url, owner="proc-b").checkpoint({"x": 2})
        raise ValueError("declined")

    with pytest.raises(ValueError, match="declined"):
        a.effect("charge", call, key="k")
    with pytest.raises(EffectFailed, match="declined"):
        process(url).effect("charge", lambda: 1, key="k")


def test_a_call_that_overran_its_deadline_is_not_recorded_over_a_reissue(url: str) -> None:
    clock = Clock()
    world: list[str] = []

    def slow() -> str:
        clock.t += 5000  # overran its 1 s lease; C re-issues after the deadline
        c = process(url, clock, owner="proc-c")
        assert c.effect("charge", lambda: world.append("C") or "C", key="k",
                        reconcile=lambda eff: NOT_DONE) == "C"
        world.append("A")
        return "A"

    a = process(url, clock, owner="proc-a")
    with pytest.raises(EffectSuperseded, match="re-issued") as e:
        a.effect("charge", slow, key="k", timeout=1)
    assert e.value.result == "A" and world == ["C", "A"]
    eff = ckptfs.open_store(url).ledger("r").effects["k"]
    assert (eff.status, eff.result, eff.issues, eff.owner) == ("completed", "C", 2, "proc-c")


def test_an_overrun_nobody_reissued_is_recorded(url: str) -> None:
    clock = Clock()

    def slow() -> str:
        clock.t += 5000
        return "late"

    a = process(url, clock, owner="proc-a")
    assert a.effect("charge", slow, key="k", timeout=1) == "late"
    assert ckptfs.open_store(url).ledger("r").effects["k"].result == "late"


def test_an_overrun_settled_by_reconcile_returns_the_call_result(url: str) -> None:
    clock = Clock()

    def slow() -> str:
        clock.t += 5000
        c = process(url, clock, owner="proc-c")
        assert c.effect("charge", lambda: 1 / 0, key="k", reconcile=lambda eff: "A") == "A"
        return "A"

    assert process(url, clock, owner="proc-a").effect("charge", slow, key="k", timeout=1) == "A"
    eff = ckptfs.open_store(url).ledger("r").effects["k"]
    assert (eff.status, eff.via, eff.result) == ("completed", "reconcile", "A")


def test_wait_returns_the_outcome_the_owner_records(url: str) -> None:
    inside, release = threading.Event(), threading.Event()
    a = process(url, owner="proc-a")

    def call() -> str:
        inside.set()
        release.wait(30)
        return "paid"

    t = threading.Thread(target=lambda: a.effect("charge", call, key="k"))
    t.start()
    try:
        assert inside.wait(30)
        b = process(url, owner="proc-b")
        threading.Timer(0.2, release.set).start()
        assert b.effect("charge", lambda: 1 / 0, key="k", wait=True) == "paid"
    finally:
        release.set()
        t.join(30)
    with pytest.raises(ConflictError, match="resume"):  # b waited on a stale head
        b.checkpoint({"x": 2})


def test_wait_then_reconcile_after_the_deadline(url: str) -> None:
    a = process(url, owner="proc-a")
    with pytest.raises(Crash):
        a.effect("charge", lambda: (_ for _ in ()).throw(Crash()), key="k", timeout=0.2)
    b = process(url, owner="proc-b")
    assert b.effect("charge", lambda: 1 / 0, key="k", wait=True,
                    reconcile=lambda eff: "found") == "found"


def test_a_bounded_wait_that_ends_before_the_deadline_raises_in_progress(url: str) -> None:
    a = process(url, owner="proc-a")
    with pytest.raises(Crash):
        a.effect("charge", lambda: (_ for _ in ()).throw(Crash()), key="k", timeout=60)
    with pytest.raises(EffectInProgress):
        process(url, owner="proc-c").effect("charge", lambda: 1, key="k", wait=0.05)


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), True, "5", 10 ** 12])
def test_timeout_must_be_a_positive_number_of_seconds(url: str, bad: Any) -> None:
    with pytest.raises((ValueError, TypeError), match="timeout"):
        process(url).effect("charge", lambda: 1, key="k", timeout=bad)


# -- an exception whose text cannot be read (issue 13, "Escapes") ------------------------------
class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


def test_a_failure_whose_str_raises_is_recorded_and_reraised(url: str) -> None:
    """Before: the failed record was never committed (str() raised inside the recording), the
    effect stayed in doubt and the caller got RuntimeError instead of its own exception."""
    run = process(url)
    boom = Unprintable()

    def call() -> None:
        raise boom

    with pytest.raises(Unprintable) as e:
        run.effect("charge", call, key="k")
    assert e.value is boom
    eff = ckptfs.open_store(url).ledger("r").effects["k"]
    assert eff.status == "failed" and eff.error is not None
    assert eff.error["type"] == "Unprintable" and "cannot be shown" in eff.error["message"]
    with pytest.raises(EffectFailed, match="Unprintable"):
        process(url).effect("charge", call, key="k")


def test_a_call_is_not_started_when_its_intent_commit_outlasted_the_lease(url: str) -> None:
    """Found by the interleaving enumeration: the intent's time is taken before its commit; a
    commit slower than the lease lands an intent another process may already re-issue."""
    clock = Clock()
    run = process(url, clock, owner="proc-a")
    real = run.store.repo.commit

    def slow_commit(manifest: Any, chunks: Any = None, **kw: Any) -> Any:
        if manifest.boundary == "before_effect":
            clock.t += 2000  # longer than the 1 s lease
        return real(manifest, chunks, **kw)

    setattr(run.store.repo, "commit", slow_commit)
    calls: list[int] = []
    with pytest.raises(EffectInDoubt, match="not started"):
        run.effect("charge", lambda: calls.append(1), key="k", timeout=1)
    assert calls == []
    assert process(url, clock, owner="proc-b").effect(
        "charge", lambda: calls.append(2) or "ok", key="k", reconcile=lambda eff: NOT_DONE) == "ok"
    assert calls == [2]


@pytest.mark.parametrize("make", [
    lambda: ValueError("bad byte \udc80 in the reply"),          # text CBOR cannot hold
    lambda: type("E" * 5000, (Exception,), {})("long type name"),  # longer than a record allows
])
def test_any_failure_is_recorded_readably_and_reraised(url: str, make: Any) -> None:
    run = process(url)
    boom = make()

    def call() -> None:
        raise boom

    with pytest.raises(type(boom)) as e:
        run.effect("charge", call, key="k")
    assert e.value is boom
    eff = ckptfs.open_store(url).ledger("r").effects["k"]  # the run stays readable
    assert eff.status == "failed" and eff.error is not None
    assert all(len(v) <= 4096 for v in eff.error.values())


def test_a_fork_taken_while_the_call_runs_sees_it_running(url: str) -> None:
    store = ckptfs.open_store(url)
    run = store.resume("r")

    def call() -> str:
        fork = ckptfs.open_store(url).fork("r", "r2")
        with pytest.raises(EffectInProgress):
            fork.effect("charge", lambda: "again", key="k", reconcile=lambda eff: NOT_DONE)
        return "once"

    assert run.effect("charge", call, key="k") == "once"
