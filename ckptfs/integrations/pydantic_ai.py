"""Pydantic AI state in a ckptfs store (``pip install 'ckptfs[pydantic-ai]'``).

Two ways in, with or without the harness:

``CkptfsMessageHistory(conversation_id, store)`` (plain ``pydantic_ai``)
    A conversation's ``message_history`` as a ckptfs ``ItemLog`` (run ``pydmsg-<32 hex>``)::

        history = CkptfsMessageHistory("chat-42", "s3://bucket/agents")
        result = await agent.run("hi", message_history=await history.load())
        await history.extend(result.new_messages())      # one commit, only the new messages

    ``load(limit)`` reads O(limit) objects (a cut may start inside a tool call/return pair:
    ``pydantic_ai.messages.repair_messages`` closes such a cut if the model provider needs it).
    ``history.once(fn)`` wraps a tool function (taking ``RunContext`` first) so each call runs
    through the ckptfs effect ledger keyed by Pydantic AI's tool call id; the call is noted in
    the conversation first, so when a process dies after the side effect and before
    ``extend``, the next ``load`` adds the call and its outcome (recorded result, or an
    explicit in-doubt return) and the model never calls the tool again for it.

``CkptfsStepStore(store)`` (``pydantic-ai-harness``'s ``StepStore`` protocol)
    For ``StepPersistence(store=CkptfsStepStore(url))``: each harness run is one ckptfs run
    (``pyd-<32 hex>``, label ``ag.key`` keeps the run id) whose items are its ``StepEvent``
    (so ``list_events`` reads the run's events, each commit stores one) and whose other entries
    hold the ``RunRecord``, the newest snapshot and the newest ``complete`` snapshot. Tool-effect
    records live in the ckptfs effect ledger of the conversation (run ``pydfx-<32 hex>``), one
    record per tool call id, committed create-only: ``started`` is the intent, ``completed`` /
    ``failed`` the outcome. A ``started`` whose process died is reported by
    ``list_unresolved_tool_effects`` and ``get_tool_effect`` and is never run again: a second
    ``started`` for that call id (a resumed run re-executing the pending call) raises
    ``EffectInDoubt``, and ``EffectMismatch`` for a call that completed already.
"""

from __future__ import annotations

try:
    from pydantic_ai import RunContext
    from pydantic_ai.messages import (
        ModelMessage,
        ModelMessagesTypeAdapter,
        ModelRequest,
        ModelResponse,
        ToolCallPart,
        ToolReturnPart,
    )
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("ckptfs.integrations.pydantic_ai needs Pydantic AI: "
                      "pip install 'ckptfs[pydantic-ai]'") from e

import asyncio
import functools
import json
import os
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from ckptfs.errors import EffectInDoubt
from ckptfs.integrations.agent_common import (
    FOLD,
    ItemLog,
    ToolEffects,
    as_store,
    forgets_done,
    run_id_for,
)
from ckptfs.integrations.agent_pending import IN_DOUBT_TEXT, PendingCalls, recordable
from ckptfs.runtime.store import Store

PREFIX = "pyd"
HISTORY_PREFIX = "pydmsg"
EFFECTS_PREFIX = "pydfx"
PENDING = "pyd_pending"
#: what an in-doubt call's tool return tells the model (agent_pending.IN_DOUBT_TEXT)
IN_DOUBT_RETURN = IN_DOUBT_TEXT


def _dump(messages: Sequence[ModelMessage]) -> list[Any]:
    return list(ModelMessagesTypeAdapter.dump_python(list(messages), mode="json"))


def _load(items: list[Any]) -> list[ModelMessage]:
    return list(ModelMessagesTypeAdapter.validate_python(items))


class CkptfsMessageHistory:
    """A Pydantic AI conversation's messages in a ckptfs store (module docstring)."""

    def __init__(self, conversation_id: str, store: str | os.PathLike[str] | Store, *,
                 fold: int = FOLD) -> None:
        self.conversation_id = conversation_id
        self.store, self._owns_store = as_store(store)
        self.log = ItemLog(self.store, run_id_for(HISTORY_PREFIX, conversation_id),
                           key=conversation_id, schema=("pydantic-ai-messages", 1),
                           fold=fold)
        self.effects = ToolEffects(self.store, run_id_for(EFFECTS_PREFIX, "msg",
                                                          conversation_id),
                                   schema=("pydantic-ai-effects", 1))
        self.pending = PendingCalls(self.log, self.effects, PENDING)

    async def load(self, limit: int | None = None) -> list[ModelMessage]:
        """The newest ``limit`` messages (all when None), oldest first, ready for
        ``agent.run(message_history=...)``. Calls a dead process left unfinished are added
        first (module docstring)."""
        return await asyncio.to_thread(self.load_sync, limit)

    def load_sync(self, limit: int | None = None) -> list[ModelMessage]:
        self.log.refresh()
        if self.pending.waiting():
            self._settle_pending()
        return _load(self.log.tail(limit, refresh=False))

    async def extend(self, messages: Sequence[ModelMessage]) -> None:
        """Store ``messages`` (``result.new_messages()``) after the last one: one commit."""
        await asyncio.to_thread(self.extend_sync, messages)

    def extend_sync(self, messages: Sequence[ModelMessage]) -> None:
        if not messages:
            return
        done = {p.tool_call_id for m in messages for p in m.parts
                if isinstance(p, ToolReturnPart)}
        self.log.append(_dump(messages), meta=self.pending.answered(done))

    async def clear(self) -> None:
        """Empty the conversation (one commit)."""
        await asyncio.to_thread(self.log.clear, meta={PENDING: {}})

    def once(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` (a tool taking ``RunContext`` first, sync or async) run at most once per
        tool call id through the ckptfs effect ledger (module docstring); register the result
        with ``agent.tool``. Arguments and result are recorded (a result that is not plain
        data as its text)."""
        name = getattr(fn, "__name__", "tool")
        history = self

        @functools.wraps(fn)
        async def tool(ctx: RunContext[Any], *args: Any, **kwargs: Any) -> Any:
            call_id = ctx.tool_call_id
            if call_id is None:
                raise ValueError(f"tool {name!r}: Pydantic AI passed no tool call id")
            arguments = json.dumps({"args": list(args), "kwargs": kwargs}, default=str)
            await asyncio.to_thread(history.pending.note, call_id, name, arguments)

            async def call(*a: Any, **kw: Any) -> Any:
                out = fn(ctx, *a, **kw)
                if asyncio.iscoroutine(out):
                    out = await out
                return recordable(out, "tool result")

            return await history.effects.acall(call_id, name, call, *args, **kwargs)

        return tool

    def _settle_pending(self) -> None:
        """The calls a dead process began, and their outcomes, as a tool-call response and a
        tool-return request (one commit; ckptfs.integrations.agent_pending)."""
        settled, meta = self.pending.settle()
        calls = [ToolCallPart(c.name, json.loads(c.arguments).get("kwargs") or {},
                              tool_call_id=c.call_id) for c in settled]
        returns = [ToolReturnPart(c.name, c.output, tool_call_id=c.call_id) for c in settled]
        items = _dump([ModelResponse(parts=calls), ModelRequest(parts=returns)]) if calls else []
        self.log.append(items, meta=meta)

    def close(self) -> None:
        forgets_done(60.0)  # the background forgets of its folds use the store
        if self._owns_store:
            self.store.close()


# -- pydantic-ai-harness: the StepStore protocol ------------------------------------------------
def _when(x: Any) -> str | None:
    return x.isoformat() if isinstance(x, datetime) else None


def _at(x: Any) -> datetime:
    """A stored time (ISO text), as the harness's records require one."""
    return datetime.fromisoformat(x) if isinstance(x, str) else datetime.fromtimestamp(0, UTC)


def _ms(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC)


class CkptfsStepStore:
    """pydantic-ai-harness's ``StepStore`` in a ckptfs store (module docstring)."""

    def __init__(self, store: str | os.PathLike[str] | Store) -> None:
        from pydantic_ai_harness.step_persistence import (  # the harness is optional
            ContinuableSnapshot,
            RunRecord,
            StepEvent,
            ToolEffectRecord,
        )

        self._types = (RunRecord, StepEvent, ContinuableSnapshot, ToolEffectRecord)
        self.store, self._owns_store = as_store(store)
        self._logs: dict[str, ItemLog] = {}
        self._effects: dict[str, ToolEffects] = {}
        self._lock = threading.RLock()

    def _log(self, run_id: str) -> ItemLog:
        with self._lock:
            log = self._logs.get(run_id)
            if log is None:
                log = self._logs[run_id] = ItemLog(self.store, run_id_for(PREFIX, run_id),
                                                   key=run_id,
                                                   schema=("pydantic-ai-harness-run", 1))
            return log

    def _ledger(self, run_id: str, conversation_id: str | None = None) -> ToolEffects:
        """The effect ledger of ``run_id``'s conversation (of the run itself without one)."""
        conv = conversation_id
        if conv is None:
            conv = (self._log(run_id).meta.get("record") or {}).get("conversation_id")
        scope = f"conversation\0{conv}" if conv else f"run\0{run_id}"
        with self._lock:
            fx = self._effects.get(scope)
            if fx is None:
                fx = self._effects[scope] = ToolEffects(
                    self.store, run_id_for(EFFECTS_PREFIX, scope),
                    schema=("pydantic-ai-harness-effects", 1))
            return fx

    def once_by_args(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Opt-in: ``fn`` (a tool taking ``RunContext`` first) run at most once per
        conversation *for the same arguments*, whatever its tool call id.

        The harness's resume (``continue_run``) goes back to the last ``complete`` snapshot,
        which precedes the interrupted tool call, and asks the model again: the model's new
        call has a new call id, so the ``StepStore`` (which sees only call ids and tool names,
        never arguments) cannot tell it from a new call. This wrapper keys the ckptfs effect
        ledger of the conversation on the tool's name and its canonical arguments instead
        (``args:<name>:<digest>``): the re-asked call returns the recorded result, or
        ``IN_DOUBT_RETURN`` when the first process died between intent and outcome (the model
        is told not to call again; settle with ``ckptfs effects``). The price: a second call
        with the same arguments in the same conversation, meant as a new one (paying the
        same amount twice on purpose), also returns the first result. Use it for tools where
        that is what you want."""
        name = getattr(fn, "__name__", "tool")

        @functools.wraps(fn)
        async def tool(ctx: RunContext[Any], *args: Any, **kwargs: Any) -> Any:
            canonical = json.dumps({"args": list(args), "kwargs": kwargs}, sort_keys=True,
                                   default=str, separators=(",", ":"))
            key = f"args:{name}:{run_id_for('a', canonical)[2:]}"
            run_id = ctx.run_id or "-"
            fx = await asyncio.to_thread(self._ledger, run_id, ctx.conversation_id)

            async def call(*a: Any, **kw: Any) -> Any:
                out = fn(ctx, *a, **kw)
                if asyncio.iscoroutine(out):
                    out = await out
                return recordable(out, "tool result")

            try:
                return await fx.acall(key, name, call, *args, **kwargs)
            except EffectInDoubt:
                return IN_DOUBT_RETURN

        return tool

    # -- runs -------------------------------------------------------------------------------
    async def register_run(self, record: Any) -> None:
        value = {"run_id": record.run_id, "conversation_id": record.conversation_id,
                 "parent_run_id": record.parent_run_id, "agent_name": record.agent_name,
                 "metadata": dict(record.metadata), "started_at": _when(record.started_at),
                 "registration_id": record.registration_id}
        await asyncio.to_thread(self._log(record.run_id).append, [], meta={"record": value})

    def _record(self, value: Any) -> Any:
        return self._types[0](
            run_id=value["run_id"], conversation_id=value["conversation_id"],
            parent_run_id=value["parent_run_id"], agent_name=value["agent_name"],
            metadata=dict(value["metadata"]), started_at=_at(value["started_at"]),
            registration_id=value["registration_id"])

    async def get_run(self, *, run_id: str) -> Any:
        value = await asyncio.to_thread(lambda: self._log(run_id).meta.get("record"))
        return None if value is None else self._record(value)

    async def list_runs(self, *, parent_run_id: str | None = None,
                        conversation_id: str | None = None) -> list[Any]:
        def scan() -> list[Any]:
            out = []
            for rid in self.store.runs() if self.store.repo.load_config() else []:
                if not rid.startswith(PREFIX + "-"):
                    continue
                value = ItemLog(self.store, rid).meta.get("record")
                if value is None:
                    continue
                if parent_run_id is not None and value["parent_run_id"] != parent_run_id:
                    continue
                if conversation_id is not None and value["conversation_id"] != conversation_id:
                    continue
                out.append(self._record(value))
            return sorted(out, key=lambda r: r.started_at)

        return await asyncio.to_thread(scan)

    # -- events -----------------------------------------------------------------------------
    async def append_event(self, event: Any) -> None:
        item = {"kind": event.kind, "step_index": event.step_index,
                "timestamp": _when(event.timestamp), "conversation_id": event.conversation_id,
                "parent_run_id": event.parent_run_id, "agent_name": event.agent_name,
                "tool_call_id": event.tool_call_id, "tool_name": event.tool_name,
                "error": event.error, "metadata": dict(event.metadata),
                "idempotency_key": event.idempotency_key}

        def add() -> None:
            log = self._log(event.run_id)
            log.refresh()
            keys = list(log.meta.get("event_keys") or [])
            meta = None
            if event.idempotency_key is not None:
                if event.idempotency_key in keys:
                    return
                meta = {"event_keys": [*keys, event.idempotency_key]}
            log.append([item], meta=meta)

        await asyncio.to_thread(add)

    async def list_events(self, *, run_id: str) -> list[Any]:
        items = await asyncio.to_thread(self._log(run_id).tail)
        return [self._types[1](run_id=run_id, kind=x["kind"], step_index=x["step_index"],
                               timestamp=_at(x["timestamp"]),
                               conversation_id=x["conversation_id"],
                               parent_run_id=x["parent_run_id"], agent_name=x["agent_name"],
                               tool_call_id=x["tool_call_id"], tool_name=x["tool_name"],
                               error=x["error"], metadata=dict(x["metadata"]),
                               idempotency_key=x["idempotency_key"]) for x in items]

    # -- snapshots --------------------------------------------------------------------------
    async def save_snapshot(self, snapshot: Any) -> None:
        value = {"step_index": snapshot.step_index, "messages": _dump(snapshot.messages),
                 "conversation_id": snapshot.conversation_id,
                 "parent_run_id": snapshot.parent_run_id, "agent_name": snapshot.agent_name,
                 "timestamp": _when(snapshot.timestamp), "state": snapshot.state,
                 "idempotency_key": snapshot.idempotency_key}

        def save() -> None:
            log = self._log(snapshot.run_id)
            log.refresh()
            keys = list(log.meta.get("snapshot_keys") or [])
            meta: dict[str, Any] = {"snapshot": value}
            if snapshot.state == "complete":
                meta["complete"] = value
            if snapshot.idempotency_key is not None:
                if snapshot.idempotency_key in keys:
                    return
                meta["snapshot_keys"] = [*keys, snapshot.idempotency_key]
            log.append([], meta=meta)

        await asyncio.to_thread(save)

    async def latest_snapshot(self, *, run_id: str, include_interrupted: bool = False) -> Any:
        value = await asyncio.to_thread(
            lambda: self._log(run_id).meta.get("snapshot" if include_interrupted else "complete"))
        if value is None:
            return None
        return self._types[2](
            run_id=run_id, step_index=value["step_index"], messages=_load(value["messages"]),
            conversation_id=value["conversation_id"], parent_run_id=value["parent_run_id"],
            agent_name=value["agent_name"], timestamp=_at(value["timestamp"]),
            state=value["state"], idempotency_key=value["idempotency_key"])

    # -- tool effects: the ckptfs effect ledger ---------------------------------------------
    async def record_tool_effect(self, record: Any) -> None:
        def put() -> None:
            fx = self._ledger(record.run_id)
            if record.status == "started":
                fx.begin(record.tool_call_id, record.tool_name, scope=record.run_id)
            elif record.status == "failed":
                fx.finish(record.tool_call_id, failed=record.effect_summary or "failed")
            else:
                fx.finish(record.tool_call_id, result=record.effect_summary)
            notes = {k: v for k, v in (("idempotency_key", record.idempotency_key),
                                       ("effect_summary", record.effect_summary)) if v}
            if notes:  # annotations (annotate_tool_effect) beside the ledger record
                log = self._log(record.run_id)
                log.refresh()
                all_notes = dict(log.meta.get("effect_notes") or {})
                if all_notes.get(record.tool_call_id) != notes:
                    all_notes[record.tool_call_id] = notes
                    log.append([], meta={"effect_notes": all_notes})

        await asyncio.to_thread(put)

    def _effect_record(self, run_id: str, eff: Any, notes: dict[str, Any]) -> Any:
        status: Literal["started", "completed", "failed"] = (
            "completed" if eff.status == "completed" else
            "failed" if eff.status == "failed" else "started")
        mine = notes.get(eff.key) or {}
        return self._types[3](
            tool_call_id=eff.key, tool_name=eff.name, run_id=run_id, status=status,
            started_at=_ms(eff.intended_at) or _at(None), ended_at=_ms(eff.settled_at),
            idempotency_key=mine.get("idempotency_key"),
            effect_summary=mine.get("effect_summary") or (
                (eff.error or {}).get("message") if eff.status == "failed" else None))

    async def get_tool_effect(self, *, run_id: str, tool_call_id: str) -> Any:
        def get() -> Any:
            eff = self._ledger(run_id).get(tool_call_id)
            if eff is None or not ToolEffects.in_scope(eff, run_id):
                return None
            return self._effect_record(run_id, eff, self._log(run_id).meta.get(
                "effect_notes") or {})

        return await asyncio.to_thread(get)

    async def list_unresolved_tool_effects(self, *, run_id: str) -> list[Any]:
        def unresolved() -> list[Any]:
            notes = self._log(run_id).meta.get("effect_notes") or {}
            return [self._effect_record(run_id, e, notes)
                    for e in self._ledger(run_id).unresolved()
                    if ToolEffects.in_scope(e, run_id)]

        return await asyncio.to_thread(unresolved)

    def close(self) -> None:
        forgets_done(60.0)  # the background forgets of its folds use the store
        if self._owns_store:
            self.store.close()


__all__ = ["CkptfsMessageHistory", "CkptfsStepStore", "IN_DOUBT_RETURN"]
