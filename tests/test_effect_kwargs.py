"""run.effect and keyword arguments (issue 17): the idempotency key reaches ``fn`` when asked
(``pass_key=``), and ``fn`` can take keywords named like run.effect's own (``fn_kwargs=``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import ckptfs


def test_the_idempotency_key_is_passed_to_fn_when_asked(tmp_path: Path) -> None:
    store = ckptfs.open_store(str(tmp_path / "s"))
    run = store.start_run("r")
    calls: list[dict[str, Any]] = []

    def charge(amount: int, *, idempotency_key: str) -> dict[str, Any]:
        calls.append({"amount": amount, "idempotency_key": idempotency_key})
        return {"charged": amount}

    assert run.effect("charge", charge, 5, key="order-1", pass_key="idempotency_key") == {
        "charged": 5}
    assert calls == [{"amount": 5, "idempotency_key": "order-1"}]
    # a resume gets the recorded result; the key is not part of the arguments' digest
    again = store.resume("r")
    assert again.effect("charge", charge, 5, key="order-1", pass_key="idempotency_key") == {
        "charged": 5}
    assert len(calls) == 1


def test_fn_can_take_a_key_keyword_of_its_own(tmp_path: Path) -> None:
    run = ckptfs.open_store(str(tmp_path / "s")).start_run("r")
    seen: list[Any] = []

    def lookup(*, key: str, timeout: int) -> str:
        seen.append((key, timeout))
        return f"value of {key}"

    got = run.effect("lookup", lookup, key="idem-1", fn_kwargs={"key": "user-42", "timeout": 3})
    assert got == "value of user-42" and seen == [("user-42", 3)]
    eff = run.ledger.effects["idem-1"]
    assert eff.status == "completed"


def test_conflicting_keywords_are_refused_before_anything_is_recorded(tmp_path: Path) -> None:
    run = ckptfs.open_store(str(tmp_path / "s")).start_run("r")
    with pytest.raises(TypeError, match="both"):
        run.effect("x", lambda **kw: kw, key="k", fn_kwargs={"a": 1}, a=2)
    with pytest.raises(TypeError, match="idempotency_key"):
        run.effect("x", lambda **kw: kw, key="k", pass_key="idempotency_key",
                   idempotency_key="mine")
    assert not run.ledger.records
