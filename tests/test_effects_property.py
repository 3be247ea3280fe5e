"""Property: any interleaving of checkpoints, effects, crashes and resumes restores to the last
committed ledger and state, and every effect's outcome follows the rules."""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ckptfs
from ckptfs.errors import EffectFailed, EffectInDoubt
from ckptfs.runtime.effects import NOT_DONE


class Crash(BaseException):
    """The process dies inside fn (after the outside world changed)."""


KEYS = ["a", "b", "c", "d"]
ops = st.lists(st.one_of(
    st.tuples(st.just("checkpoint"), st.integers(0, 9)),
    st.tuples(st.sampled_from(["ok", "fail", "crash"]), st.sampled_from(KEYS),
              st.sampled_from([None, "found", "not-done"])),
    st.tuples(st.just("resume")),
), max_size=25)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_any_interleaving_restores_the_last_committed_ledger(steps: list[tuple[Any, ...]]) -> None:
    url = f"memory://prop-{uuid.uuid4().hex}"
    store = ckptfs.open_store(url)
    run = store.start_run("r")
    world: dict[str, int] = {}  # key -> times the outside world saw it
    model: dict[str, tuple[str, Any]] = {}  # key -> (status, result)
    state: dict[str, Any] = {}
    for step in steps:
        if step[0] == "checkpoint":
            state = {"i": step[1]}
            run.checkpoint(state)
        elif step[0] == "resume":
            if run.snapshot is not None:  # nothing committed yet: nothing to resume
                run = ckptfs.open_store(url).resume("r")
        else:
            what, key, rec = step

            def fn(k: str = key, what: str = what) -> int:
                world[k] = world.get(k, 0) + 1
                if what == "fail":
                    raise ValueError("no")
                if what == "crash":
                    raise Crash()
                return world[k]

            reconcile = None if rec is None else (
                lambda e: world.get(e.key, 0) if rec == "found" and world.get(e.key) else NOT_DONE)
            status, result = model.get(key, ("new", None))
            try:
                got = run.effect("e", fn, key=key, reconcile=reconcile)
            except Crash:
                model[key] = ("intended", None)
                run = ckptfs.open_store(url).resume("r")  # the process died; a new one resumes
            except ValueError:
                model[key] = ("failed", None)
            except EffectFailed:
                assert status == "failed"
            except EffectInDoubt:
                assert status == "intended" and reconcile is None
            else:
                if status == "completed":
                    assert got == result
                elif status == "intended" and rec == "found" and world.get(key):
                    assert got == world[key]
                else:
                    assert status in ("new", "intended")
                model[key] = ("completed", got)
            if status == "completed" or status == "failed":
                assert model[key][0] == status  # a settled effect never changes
        restored = ckptfs.open_store(url).resume("r") if run.snapshot else None
        if restored is not None:
            assert restored.ledger.items == run.ledger.items
            assert restored.state == state
            assert {k: (e.status, e.result) for k, e in restored.ledger.effects.items()} == model
        else:
            assert not model
    for key, (status, _) in model.items():  # fn ran at most once per issue, never after success
        eff = run.ledger.effects[key]
        assert world.get(key, 0) <= eff.issues
