"""``Run.begin_effect``/``end_effect``: the effect ledger for a caller that makes the call itself
(a framework that runs its tools and reports start and end), with ``effect``'s records and rules."""

from __future__ import annotations

import pytest

import ckptfs
from ckptfs.errors import EffectFailed, EffectInDoubt, EffectMismatch


def test_begin_end_records_the_intent_then_the_result(store: ckptfs.Store) -> None:
    run = store.start_run("r")
    run.checkpoint({"step": 0})
    intent = run.begin_effect("pay", 7, key="call-1", to="al")
    assert store.resume("r").ledger.effects["call-1"].status == "intended"
    run.checkpoint({"step": 1})  # not held at a boundary: the framework may commit meanwhile
    assert run.end_effect(intent, result={"id": "ch1"}) == {"id": "ch1"}
    resumed = store.resume("r")
    eff = resumed.ledger.effects["call-1"]
    assert (eff.status, eff.name) == ("completed", "pay")
    assert resumed.state == {"step": 1}
    # the same ledger as ``effect``: the same call replays its result without calling
    assert resumed.effect("pay", lambda *a, **k: pytest.fail("called again"), 7, to="al",
                          key="call-1") == {"id": "ch1"}
    with pytest.raises(EffectMismatch, match="completed already"):
        resumed.begin_effect("pay", 7, key="call-1", to="al")
    with pytest.raises(EffectMismatch, match="other arguments"):
        resumed.begin_effect("pay", 8, key="call-1", to="al")


def test_a_failure_given_as_text_is_recorded_and_raised_again(store: ckptfs.Store) -> None:
    run = store.start_run("r")
    run.end_effect(run.begin_effect("pay", key="k"), failed="card declined")
    resumed = store.resume("r")
    assert resumed.ledger.effects["k"].status == "failed"
    with pytest.raises(EffectFailed) as e:
        resumed.begin_effect("pay", key="k")
    assert e.value.record.error["message"] == "card declined"
    run.end_effect(run.begin_effect("pay", key="k2"), failed=ValueError("no funds"))
    assert store.resume("r").ledger.effects["k2"].error["message"] == "no funds"


def test_begun_and_never_ended_is_in_doubt_and_never_begun_again(store: ckptfs.Store) -> None:
    run = store.start_run("r")
    run.begin_effect("pay", 7, key="k")  # the process "dies" here: no end_effect
    resumed = store.resume("r")
    assert resumed.ledger.effects["k"].in_doubt
    with pytest.raises(EffectInDoubt):
        resumed.begin_effect("pay", 7, key="k")
    with pytest.raises(EffectInDoubt):
        resumed.effect("pay", lambda *a: pytest.fail("called again"), 7, key="k")
    resumed.settle_effect("k", result="paid")
    assert store.resume("r").ledger.effects["k"].status == "completed"
