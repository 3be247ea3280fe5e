"""Every interleaving of intent commit, call, reconcile and result commit across 2-3 actors
(issue 13, defect 4): the effect function runs at most once per key per deadline, and no
call that landed is lost.

Each actor is a thread with its own Store object and owner on one local-disk store, resuming
run "r" and calling ``run.effect("charge", ..., key="k", reconcile=...)`` (some first commit a
checkpoint on top). It stops at every step that matters (resume, each commit, reconcile, the
call before it lands); a scheduler lets exactly one actor run to its next step at a time, and
may instead let the lease run out ("expire": the shared clock jumps past every deadline) once.
A depth-first search over the scheduler's choices runs every schedule, each from a fresh store.
A call that has not landed when its lease runs out overran it: only then may a re-issue call
again. After each schedule a recovery process resumes (after the deadline) with reconcile.

Three actors have too many schedules to run them all (about 13!/(4!^3) = 450,000): a seeded
sample of ``CKPTFS_EFFECT_SAMPLES`` schedules per 3-actor program runs instead (each choice
drawn from a PRNG seeded by the schedule's number, so every run draws the same schedules):
20 by default, 1000 with ``CKPTFS_EFFECT_SCHEDULES=full``.
"""

from __future__ import annotations

import os
import random
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

import ckptfs
from ckptfs.errors import ConflictError, EffectInDoubt, EffectInProgress, EffectSuperseded
from ckptfs.runtime.effects import NOT_DONE

LEASE = 10.0  # seconds; the clock only moves by "expire"
T0 = 1_700_000_000_000
FULL = os.environ.get("CKPTFS_EFFECT_SCHEDULES") == "full"
EXPIRE = "expire"


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> int:
        return self.t


class Scheduler:
    """Runs actors one step at a time in the order ``choose`` picks."""

    def __init__(self, choose: Callable[[list[str]], str]) -> None:
        self.cv = threading.Condition()
        self.waiting: dict[str, str] = {}
        self.done: set[str] = set()
        self.granted: str | None = None
        self.choose = choose
        self.steps: list[tuple[str, str]] = []

    def point(self, actor: str, name: str) -> None:
        """Called by an actor: wait here until the scheduler lets it go on."""
        with self.cv:
            self.waiting[actor] = name
            self.cv.notify_all()
            if not self.cv.wait_for(lambda: self.granted == actor, timeout=60):
                raise RuntimeError(f"{actor} never scheduled at {name}")
            self.granted = None
            del self.waiting[actor]
            self.cv.notify_all()

    def finished(self, actor: str) -> None:
        with self.cv:
            self.done.add(actor)
            self.cv.notify_all()

    def run(self, actors: dict[str, Callable[[], None]], events: list[str],
            on_event: Callable[[str], None]) -> None:
        threads = [threading.Thread(target=self._body, args=(a, f), daemon=True)
                   for a, f in actors.items()]
        for t in threads:
            t.start()
        pending = list(events)
        while True:
            with self.cv:
                if not self.cv.wait_for(lambda: self.granted is None and all(
                        a in self.waiting or a in self.done for a in actors), timeout=60):
                    raise RuntimeError(f"actors stuck: waiting {self.waiting}")
                ready = sorted(self.waiting)
                if not ready:
                    break
                options = ready + pending
                pick = self.choose(options)
                if pick in pending:
                    pending.remove(pick)
                    self.steps.append((pick, ""))
                    on_event(pick)
                    continue
                self.steps.append((pick, self.waiting[pick]))
                self.granted = pick
                self.cv.notify_all()
        for t in threads:
            t.join(60)

    def _body(self, actor: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        finally:
            self.finished(actor)


@attrs.define
class World:
    """The outside world: the calls that landed, and whether each had overrun its lease."""

    landed: list[tuple[str, bool]] = attrs.Factory(list)
    expired: bool = False


@attrs.define
class Outcome:
    kind: str = "none"
    value: Any = None
    called: bool = False
    landed: bool = False
    overran: bool = False
    intent_committed: bool = False
    expired_at_call: bool = False
    error: str = ""


def actor(url: str, name: str, program: str, sched: Scheduler, clock: Clock, world: World,
          out: Outcome) -> Callable[[], None]:
    def body() -> None:
        store = ckptfs.open_store(url, clock=clock)
        real = store.repo.commit

        def commit(manifest: Any, chunks: Any = None, **kw: Any) -> Any:
            sched.point(name, f"commit:{manifest.boundary}")
            snap = real(manifest, chunks, **kw)
            if manifest.boundary == "before_effect":
                out.intent_committed = True
            return snap

        setattr(store.repo, "commit", commit)

        def charge() -> str:
            out.called, out.expired_at_call = True, world.expired
            sched.point(name, "call")  # inside the call, not landed yet
            # the lease ran out between this call's intent and its landing: it overran
            out.landed, out.overran = True, world.expired and not out.expired_at_call
            world.landed.append((name, out.overran))
            return f"paid-by-{name}"

        def reconcile(eff: Any) -> Any:
            sched.point(name, "reconcile")
            return f"paid-by-{world.landed[0][0]}" if world.landed else NOT_DONE

        sched.point(name, "resume")
        try:
            run = store.resume("r")
            run.owner = f"actor-{name}"
            if program == "checkpoint":
                run.checkpoint({"by": name})
            out.value = run.effect("charge", charge, key="k", reconcile=reconcile,
                                   timeout=LEASE)
            out.kind = "result"
        except ConflictError as e:
            out.kind, out.error = "conflict", str(e)
        except EffectInProgress as e:
            out.kind, out.error = "in-progress", str(e)
        except EffectInDoubt as e:  # the lease ran out before the call could start
            out.kind, out.error = "in-doubt", str(e)
        except EffectSuperseded as e:
            out.kind, out.value, out.error = "superseded", e.result, str(e)
        except Exception as e:  # the test fails on it
            out.kind, out.error = "error", f"{type(e).__name__}: {e}"

    return body


def run_schedule(root: Path, programs: dict[str, str], choose: Callable[[list[str]], str]
                 ) -> tuple[list[tuple[str, str]], World, dict[str, Outcome], Any]:
    url = str(root)
    if root.exists():
        shutil.rmtree(root)
    clock = Clock()
    ckptfs.open_store(url, clock=clock).start_run("r").checkpoint({"by": "start"})
    sched, world = Scheduler(choose), World()
    outs = {a: Outcome() for a in programs}

    def on_event(ev: str) -> None:
        assert ev == EXPIRE
        clock.t += int(LEASE * 1000) * 10
        world.expired = True

    sched.run({a: actor(url, a, p, sched, clock, world, outs[a]) for a, p in programs.items()},
              [EXPIRE], on_event)
    # a process that resumes after every deadline and reconciles by key
    if not world.expired:
        on_event(EXPIRE)
    rec = ckptfs.open_store(url, clock=clock).resume("r")
    before = len(world.landed)

    def recovery_call() -> str:
        world.landed.append(("recovery", False))
        return "paid-by-recovery"

    final = rec.effect("charge", recovery_call, key="k", timeout=LEASE,
                       reconcile=lambda eff: f"paid-by-{world.landed[0][0]}" if world.landed
                       else NOT_DONE)
    assert before == 0 or len(world.landed) == before, "recovery called although it landed"
    return sched.steps, world, outs, final


def check(steps: list[tuple[str, str]], world: World, outs: dict[str, Outcome], final: Any
          ) -> None:
    where = f"schedule {steps}: world {world.landed}, outcomes {outs}"
    overran = [a for a, o in outs.items() if o.overran and o.landed]
    for a, o in outs.items():
        assert o.kind != "error", where
        if o.landed:  # a call that happened is recorded, or reported as superseded
            assert o.kind in ("result", "superseded"), where
            if o.kind == "superseded":
                assert a in overran, where
        else:
            assert o.kind != "superseded", where
    if not overran:  # at most once per key per deadline
        assert len(world.landed) <= 1, where
    for o in outs.values():
        if o.kind == "result":
            assert o.value == final, where  # every caller sees the one recorded outcome
    assert final in [f"paid-by-{a}" for a, _ in world.landed], where


def schedules(programs: dict[str, str], root: Path) -> Iterator[tuple[
        list[tuple[str, str]], World, dict[str, Outcome], Any]]:
    """Every schedule, depth first: replay a prefix of choices, then take the first option."""
    prefix: list[int] = []
    while True:
        trail: list[tuple[int, int]] = []

        def choose(options: list[str]) -> str:
            i = prefix[len(trail)] if len(trail) < len(prefix) else 0
            trail.append((i, len(options)))
            return options[i]

        yield run_schedule(root, programs, choose)
        while trail and trail[-1][0] + 1 >= trail[-1][1]:
            trail.pop()
        if not trail:
            return
        prefix = [i for i, _ in trail[:-1]] + [trail[-1][0] + 1]


def sampled(programs: dict[str, str], root: Path, n: int) -> Iterator[tuple[
        list[tuple[str, str]], World, dict[str, Outcome], Any]]:
    """``n`` schedules, each drawn by a PRNG seeded with its number."""
    for i in range(n):
        rng = random.Random(f"effect-schedule-{i}")
        yield run_schedule(root, programs, lambda options: options[rng.randrange(len(options))])


PROGRAMS = {
    "two-effects": {"A": "effect", "B": "effect"},
    "effect-and-checkpoint": {"A": "effect", "B": "checkpoint"},
}
THREE = {
    "three-effects": {"A": "effect", "B": "effect", "C": "effect"},
    "two-effects-one-checkpoint": {"A": "effect", "B": "effect", "C": "checkpoint"},
}
SAMPLES = int(os.environ.get("CKPTFS_EFFECT_SAMPLES", "1000" if FULL else "20"))
COUNTS: dict[str, dict[str, int]] = {}


def _tally(name: str, runs: Iterator[tuple[list[tuple[str, str]], World, dict[str, Outcome],
                                            Any]]) -> int:
    n = calls = overrun = 0
    for steps, world, outs, final in runs:
        check(steps, world, outs, final)
        n += 1
        calls = max(calls, len([w for w in world.landed if w[0] != "recovery"]))
        overrun += any(o.overran and o.landed for o in outs.values())
    COUNTS[name] = {"schedules": n, "max_calls": calls, "overrun_schedules": overrun}
    print(f"{name}: {COUNTS[name]}")
    return n


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_every_interleaving_performs_the_effect_at_most_once(tmp_path: Path, name: str) -> None:
    assert _tally(name, schedules(PROGRAMS[name], tmp_path / "store")) >= 100  # it branches


@pytest.mark.timeout(7200 if FULL else 300)
@pytest.mark.parametrize("name", sorted(THREE))
def test_sampled_three_actor_schedules_perform_the_effect_at_most_once(tmp_path: Path,
                                                                       name: str) -> None:
    assert _tally(name, sampled(THREE[name], tmp_path / "store", SAMPLES)) == SAMPLES
