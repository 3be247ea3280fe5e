"""Tools that never run twice, for the agent adapters (``ckptfs.integrations.agent_common``
re-exports ``ToolEffects``): a framework's tool calls through the ckptfs effect ledger, keyed by
the framework's tool call id.

``ToolEffects(store, run_id)``: ``call(call_id, name, fn, *args)`` runs ``fn`` through
``Run.effect``: the intent is committed before the call and the result after; a call id seen
before returns its recorded result (or raises ``EffectFailed``), and one whose process died
between the two commits raises ``EffectInDoubt``: the tool is never called again by itself.
``acall`` does the same for async tools; ``begin``/``finish`` record the start and end of a
call that the framework itself runs (pydantic-ai-harness reports them so).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ckptfs.errors import (
    ConflictError,
    EffectFailed,
    EffectInDoubt,
    EffectInProgress,
    EffectMismatch,
    InvalidArgument,
    NotFound,
)
from ckptfs.format.ledger import Effect, Record, args_digest
from ckptfs.runtime import effects as fx
from ckptfs.runtime.run import Run
from ckptfs.runtime.store import Store

#: how often ``ToolEffects.call`` resumes and tries again when another process committed
#: to the ledger run first (the ledger then tells what was done: never a second call)
CONFLICT_RETRIES = 3


class ToolEffects:
    """Tools that never run twice, keyed by the framework's tool call id, in run ``run_id``'s
    effect ledger (module docstring). Thread-safe."""

    def __init__(self, store: Store, run_id: str, *,
                 schema: tuple[str, int] = ("agent-effects", 1)) -> None:
        self.store = store
        self.run_id = run_id
        self.schema = schema
        self._run: Run | None = None
        self._lock = threading.RLock()
        #: intents this object committed whose outcome it has not recorded yet
        self._begun: dict[str, Record] = {}

    def _ledger_run(self, fresh: bool = False) -> Run:
        if self._run is None or fresh:
            if self.store.repo.load_config() is None:  # no store yet: the first commit makes it
                self._run = self.store.start_run(self.run_id, schema=self.schema)
                return self._run
            try:
                self._run = self.store.resume(self.run_id)
            except NotFound:
                self._run = self.store.start_run(self.run_id, schema=self.schema)
        return self._run

    def call(self, call_id: str, name: str, fn: Callable[..., Any], *args: Any,
             reconcile: Callable[[Effect], Any] | None = None,
             timeout: float = fx.DEFAULT_TIMEOUT, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` at most once per ``call_id``: the recorded result when the
        call id completed before, EffectFailed when it failed, EffectInDoubt when a process
        died between intent and outcome (``reconcile``, if given, is asked instead: it returns
        the result found in the outside world, or ``ckptfs.NOT_DONE`` to call ``fn`` now).
        Arguments and result must be plain data (JSON-like). ``timeout`` is the lease in
        seconds (``Run.effect``)."""
        with self._lock:
            for attempt in range(CONFLICT_RETRIES + 1):
                run = self._ledger_run(fresh=attempt > 0)
                try:
                    return run.effect(name, fn, *args, key=call_id, reconcile=reconcile,
                                      timeout=timeout, fn_kwargs=kwargs)
                except ConflictError:
                    self._run = None  # another process moved the ledger: read it again
                    if attempt == CONFLICT_RETRIES:
                        raise
            raise AssertionError("unreachable")  # pragma: no cover

    async def acall(self, call_id: str, name: str, fn: Callable[..., Any], *args: Any,
                    reconcile: Callable[[Effect], Any] | None = None,
                    timeout: float = fx.DEFAULT_TIMEOUT, **kwargs: Any) -> Any:
        """``call`` for an async caller: the ledger's commits run in a worker thread, and
        ``fn`` (a coroutine function or a plain one) runs on the caller's event loop."""
        loop = asyncio.get_running_loop()

        def bridge(*a: Any, **kw: Any) -> Any:
            out = fn(*a, **kw)
            if isinstance(out, Awaitable):
                return asyncio.run_coroutine_threadsafe(_awaited(out), loop).result()
            return out

        return await asyncio.to_thread(self.call, call_id, name, bridge, *args,
                                       reconcile=reconcile, timeout=timeout, **kwargs)

    # -- for frameworks that report a call's start and end themselves (the harness) ------
    def begin(self, call_id: str, name: str, *, scope: str = "",
              timeout: float = fx.DEFAULT_TIMEOUT) -> None:
        """Commit the intent of ``call_id`` before the framework calls its tool (no function
        is called here). Again for a call this object began and has not finished: nothing
        (an annotation). For a call already issued elsewhere: EffectInDoubt when its process
        stopped before recording the outcome, EffectInProgress while another process may
        still be calling it, EffectFailed or EffectMismatch when it ended already: the tool is
        never run a second time. ``scope`` (e.g. the framework's run id) is digested into the
        intent's arguments (``in_scope``)."""
        with self._lock:
            if call_id in self._begun:
                return
            for attempt in range(CONFLICT_RETRIES + 1):
                run = self._ledger_run(fresh=attempt > 0)
                eff = run.ledger.effects.get(call_id)
                if eff is not None:
                    _refuse_again(run, eff)
                try:
                    intent = run.begin_effect(name, scope, key=call_id, timeout=timeout)
                except ConflictError:
                    self._run = None
                    if attempt == CONFLICT_RETRIES:
                        raise
                    continue
                self._begun[call_id] = intent
                return

    def finish(self, call_id: str, *, result: Any = None, failed: str | None = None) -> None:
        """Commit the outcome of a call this object began (``begin``): its result, or the
        failure's text."""
        with self._lock:
            intent = self._begun.pop(call_id, None)
            if intent is None:
                raise InvalidArgument(f"tool call {call_id!r} was not begun by this process "
                                      "(ToolEffects.begin); its outcome cannot be recorded here")
            run = self._ledger_run()
            if failed is not None:
                run.end_effect(intent, failed=failed)
            else:
                run.end_effect(intent, result=result)

    @staticmethod
    def in_scope(eff: Effect, scope: str) -> bool:
        """Whether ``eff`` was begun with this ``scope`` (``begin``)."""
        return eff.args == args_digest((scope,), {})

    def effects(self, *, fresh: bool = True) -> list[Effect]:
        """Every call in the ledger, in the order first issued."""
        with self._lock:
            return self._ledger_run(fresh=fresh).effects()

    def outcomes(self, call_ids: Sequence[str]) -> dict[str, tuple[str, Any]]:
        """Where each call id stands, from one fresh read of the ledger: ``("none", None)``
        never issued, ``("running", None)`` issued by a process that may still be calling it,
        ``("completed", result)``, ``("failed", error message)``, ``("in_doubt", None)``
        issued by a process that stopped before recording the outcome."""
        with self._lock:
            run = self._ledger_run(fresh=True)
            out: dict[str, tuple[str, Any]] = {}
            for cid in call_ids:
                eff = run.ledger.effects.get(cid)
                if eff is None:
                    out[cid] = ("none", None)
                elif eff.status == "completed":
                    out[cid] = ("completed", fx.result_of(run, eff))
                elif eff.status == "failed":
                    out[cid] = ("failed", (eff.error or {}).get("message", ""))
                elif fx.held_elsewhere(run, eff):
                    out[cid] = ("running", None)
                else:
                    out[cid] = ("in_doubt", None)
            return out

    def get(self, call_id: str) -> Effect | None:
        """Where ``call_id`` stands in the ledger now (None: never issued)."""
        with self._lock:
            try:
                return self._ledger_run(fresh=True).ledger.effects.get(call_id)
            except NotFound:
                return None

    def unresolved(self) -> list[Effect]:
        """Calls issued whose outcome was never recorded (in doubt, or still running)."""
        with self._lock:
            return [e for e in self._ledger_run(fresh=True).effects() if e.in_doubt]

    def settle(self, call_id: str, *, result: Any = fx.NOT_DONE,
               failed: str | BaseException | None = None) -> Effect:
        """Record by hand how an in-doubt call ended, after checking the outside world."""
        with self._lock:
            return self._ledger_run(fresh=True).settle_effect(call_id, result=result,
                                                              failed=failed)


def _refuse_again(run: Run, eff: Effect) -> None:
    """Raise why an issued call must not be run again (``ToolEffects.begin``)."""
    if eff.status == "completed":
        raise EffectMismatch(
            f"tool call {eff.key!r} ({eff.name}) completed already (ckptfs effect ledger of run "
            f"{run.id!r}); it is not run again. Continue from a history that holds its result.")
    if eff.status == "failed":
        raise EffectFailed(eff)
    if fx.held_elsewhere(run, eff):
        raise EffectInProgress(eff, run.store.now())
    raise EffectInDoubt(eff)


async def _awaited(aw: Awaitable[Any]) -> Any:
    return await aw


__all__ = ["ToolEffects"]
