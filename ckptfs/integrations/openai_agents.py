"""OpenAI Agents SDK sessions in a ckptfs store (``pip install 'ckptfs[openai-agents]'``).

Switching from the SDK's SQLite session is one line::

    from ckptfs.integrations.openai_agents import CkptfsSession
    session = CkptfsSession("user-42", "s3://bucket/agents")   # was SQLiteSession("user-42", db)
    result = await Runner.run(agent, "hi", session=session)

``CkptfsSession`` implements ``agents.memory.Session``. Each session is one ckptfs run
(``oai-<32 hex>``, a hash of the session id; label ``ag.key`` keeps the id) kept as an
``ItemLog`` (``ckptfs.integrations.agent_common``): ``add_items`` is one commit storing only the
new items, ``get_items(limit)`` reads O(limit) objects, ``pop_item`` and ``clear_session`` are
commits (history keeps its lineage back to the newest fold: every ``fold`` items the session's
newest items are stored again together, compressed as a whole, and the per-turn snapshots
before them are forgotten, for the next gc to drop). Two processes writing the same session race: exactly one
commits, the other gets ``SessionConflict`` and nothing of its write is stored.

Tools that never run twice: ``session.once(tool)`` (or ``once(tool, session)``) wraps a
``FunctionTool`` so that each call runs through the ckptfs effect ledger keyed by the SDK's tool
call id (run ``oaifx-<32 hex>``). Before the call the session notes it (tool, arguments); if
the process dies after the side effect and before the turn's items reach the session, the next
``get_items`` adds the call and its outcome to the history: the recorded result, or an explicit
"in doubt" output when the outcome was never recorded. The model then sees that the tool ran
and the tool is never called again for that call; an in-doubt call waits for a human
(``ckptfs effects`` / ``ToolEffects.settle``). The same call id run again (a resumed
``RunState``) returns the recorded result or raises ``EffectInDoubt``.

Runs interrupted for approval (``needs_approval``): ``await session.save_state(result.to_state())``
stores the SDK's ``RunState`` (its JSON, with the SDK's schema version) in the session;
``await session.load_state(agent)`` gives it back in any process. ``ckptfs check STORE
--validate ckptfs.integrations.openai_agents:check_run_state`` fails every snapshot whose stored
RunState the installed SDK cannot read (``run_state_readable``, ``stored_run_states``).
"""

from __future__ import annotations

try:
    from agents.memory.session import SessionABC
    from agents.memory.session_settings import (
        SessionSettings,
        coerce_session_settings,
        resolve_session_limit,
    )
    from agents.run_state import CURRENT_SCHEMA_VERSION, SUPPORTED_SCHEMA_VERSIONS, RunState
    from agents.tool import FunctionTool
    from agents.tool_context import ToolContext
    from agents.version import __version__ as SDK_VERSION
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("ckptfs.integrations.openai_agents needs the OpenAI Agents SDK: "
                      "pip install 'ckptfs[openai-agents]'") from e

import asyncio
import copy
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

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

#: run id prefixes: a session's items, and its tools' effect ledger
PREFIX = "oai"
EFFECTS_PREFIX = "oaifx"
#: meta entries of a session's run: calls begun and not yet in the history; a saved RunState
PENDING = "oai_pending"
RUN_STATE = "oai_run_state"
#: what an in-doubt call's output tells the model (agent_pending.IN_DOUBT_TEXT)
IN_DOUBT_OUTPUT = IN_DOUBT_TEXT


def session_run_id(session_id: str) -> str:
    """The ckptfs run holding a session's items."""
    return run_id_for(PREFIX, session_id)


def effects_run_id(session_id: str) -> str:
    """The ckptfs run holding a session's tool effects (``once``)."""
    return run_id_for(EFFECTS_PREFIX, session_id)


def run_state_readable(schema_version: str | None) -> bool:
    """Whether the installed SDK reads a RunState of this schema version."""
    return schema_version in SUPPORTED_SCHEMA_VERSIONS


def _output_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


class CkptfsSession(SessionABC):
    """An ``agents.memory.Session`` kept in a ckptfs store (module docstring).

    ``store`` is a URL, a path or an open ``ckptfs.Store``; ``session_settings`` as the SDK's
    sessions take it (its ``limit`` is the default of ``get_items``); ``fold``: items per fold
    (``ItemLog``: the session folds its items and forgets the per-turn snapshots; 0 keeps
    every commit)."""

    session_settings: SessionSettings | None = None

    def __init__(self, session_id: str, store: str | os.PathLike[str] | Store, *,
                 session_settings: SessionSettings | dict[str, Any] | None = None,
                 fold: int = FOLD) -> None:
        self.session_id = session_id
        self.session_settings = (coerce_session_settings(session_settings)
                                 if session_settings is not None else SessionSettings())
        self.store, self._owns_store = as_store(store)
        self.log = ItemLog(self.store, session_run_id(session_id), key=session_id,
                           schema=("openai-agents-session", 1), fold=fold)
        self.effects = ToolEffects(self.store, effects_run_id(session_id),
                                   schema=("openai-agents-effects", 1))
        self.pending = PendingCalls(self.log, self.effects, PENDING)

    # -- agents.memory.Session -------------------------------------------------------------
    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The newest ``limit`` items (default: the session settings' limit; None: all),
        oldest first. Calls a process left unfinished are added first (module docstring)."""
        n = resolve_session_limit(limit, self.session_settings)
        return await asyncio.to_thread(self._get_items, n)

    def _get_items(self, limit: int | None) -> list[Any]:
        self.log.refresh()
        if self.pending.waiting():
            self._settle_pending()
        return self.log.tail(limit, refresh=False)

    async def add_items(self, items: list[Any]) -> None:
        """Store ``items`` after the last one: one commit holding only them."""
        if not items:
            return
        await asyncio.to_thread(self._add_items, list(items))

    def _add_items(self, items: list[Any]) -> None:
        done = {x["call_id"] for x in items if isinstance(x, dict)
                and str(x.get("type", "")).endswith("_output")
                and isinstance(x.get("call_id"), str)}
        self.log.append(items, meta=self.pending.answered(done))

    async def pop_item(self) -> Any | None:
        """Remove and return the newest item (None when the session is empty): one commit."""
        return await asyncio.to_thread(self.log.pop)

    async def clear_session(self) -> None:
        """Empty the session (one commit; earlier snapshots keep the items until
        ``ckptfs forget``/``erase`` removes them)."""
        await asyncio.to_thread(self.log.clear, meta={PENDING: {}, RUN_STATE: None})

    # -- RunState (approvals) --------------------------------------------------------------
    async def save_state(self, state: RunState[Any, Any]) -> None:
        """Store ``state`` (``result.to_state()`` of a run interrupted for approval) in the
        session, with the SDK's schema version: one commit."""
        doc = json.loads(state.to_string())
        version = doc.get("$schemaVersion", CURRENT_SCHEMA_VERSION)
        value = {"schema_version": version, "sdk": SDK_VERSION, "state": doc}
        await asyncio.to_thread(self.log.append, [], meta={RUN_STATE: value},
                                labels={"oai.run_state_schema": str(version)})

    async def load_state(self, agent: Any) -> RunState[Any, Any] | None:
        """The stored RunState for ``agent`` (None when none is stored). UserError from the
        SDK when its schema version is one the installed SDK cannot read
        (``stored_state_version``, ``run_state_readable``)."""
        value = await asyncio.to_thread(self._state_value)
        if value is None:
            return None
        return await RunState.from_string(agent, json.dumps(value["state"]))

    async def stored_state_version(self) -> str | None:
        """The schema version of the stored RunState (None when none is stored)."""
        value = await asyncio.to_thread(self._state_value)
        return None if value is None else str(value["schema_version"])

    async def clear_state(self) -> None:
        """Forget the stored RunState (one commit)."""
        await asyncio.to_thread(self.log.append, [], meta={RUN_STATE: None})

    def _state_value(self) -> dict[str, Any] | None:
        self.log.refresh()
        value = self.log.meta.get(RUN_STATE)
        return value if isinstance(value, dict) else None

    # -- tools that never run twice --------------------------------------------------------
    def once(self, tool: FunctionTool) -> FunctionTool:
        """A copy of ``tool`` whose calls run through the ckptfs effect ledger, keyed by the
        SDK's tool call id (module docstring). Its arguments and output are recorded (an
        output that is not plain data as its text)."""
        return once(tool, self)

    def _settle_pending(self) -> None:
        """Add the calls a process began and whose items never reached the session: the call
        and its outcome (recorded result, failure, or in doubt), in one commit
        (ckptfs.integrations.agent_pending)."""
        settled, meta = self.pending.settle()
        items: list[Any] = []
        for c in settled:
            items += [{"type": "function_call", "call_id": c.call_id, "name": c.name,
                       "arguments": c.arguments},
                      {"type": "function_call_output", "call_id": c.call_id,
                       "output": _output_text(c.output)}]
        self.log.append(items, meta=meta)

    def close(self) -> None:
        """Close the store if this session opened it (from a URL)."""
        forgets_done(60.0)  # the background forgets of its folds use the store
        if self._owns_store:
            self.store.close()


def once(tool: FunctionTool, session: CkptfsSession) -> FunctionTool:
    """``tool`` (a ``FunctionTool``, e.g. from ``@function_tool``) with each call run at most
    once per tool call id through ``session``'s effect ledger (module docstring)."""
    if not isinstance(tool, FunctionTool):
        raise TypeError(f"once() wraps a FunctionTool (from @function_tool), not "
                        f"{type(tool).__name__}")
    inner = tool.on_invoke_tool
    name = tool.name

    async def invoke(ctx: ToolContext[Any], arguments: str) -> Any:
        call_id = ctx.tool_call_id
        await asyncio.to_thread(session.pending.note, call_id, name, arguments)

        async def run(args: str) -> Any:
            return recordable(await inner(ctx, args), "tool output")

        return await session.effects.acall(call_id, name, run, arguments)

    wrapped = copy.copy(tool)
    wrapped.on_invoke_tool = invoke
    return wrapped


def check_run_state(state: Mapping[str, Any]) -> bool:
    """A ``ckptfs check --validate`` hook: a snapshot holding a stored RunState passes only if
    the installed SDK reads its schema version (other snapshots pass)::

        ckptfs check STORE --validate ckptfs.integrations.openai_agents:check_run_state
    """
    value = state.get(RUN_STATE)
    if not isinstance(value, dict):
        return True
    version = value.get("schema_version")
    if not run_state_readable(str(version)):
        raise ValueError(f"stored RunState schema {version} (written by openai-agents "
                         f"{value.get('sdk')}) is not readable by the installed openai-agents "
                         f"{SDK_VERSION} (it reads {', '.join(sorted(SUPPORTED_SCHEMA_VERSIONS))})")
    return True


def stored_run_states(store: str | os.PathLike[str] | Store,
                      session_ids: Sequence[str]) -> dict[str, tuple[str, bool] | None]:
    """For each session id: the schema version of its stored RunState and whether the
    installed SDK reads it (None when it stores none)."""
    st, owned = as_store(store)
    try:
        out: dict[str, tuple[str, bool] | None] = {}
        for sid in session_ids:
            value = ItemLog(st, session_run_id(sid)).meta.get(RUN_STATE)
            if isinstance(value, dict):
                v = str(value.get("schema_version"))
                out[sid] = (v, run_state_readable(v))
            else:
                out[sid] = None
        return out
    finally:
        if owned:
            st.close()


__all__ = ["CkptfsSession", "once", "run_state_readable", "check_run_state", "session_run_id", "effects_run_id",
           "stored_run_states", "IN_DOUBT_OUTPUT"]
