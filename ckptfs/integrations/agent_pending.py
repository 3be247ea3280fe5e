"""Calls a wrapped tool began, noted in the session's own item log until their items arrive:
the part of "tools that never run twice" that the OpenAI Agents SDK and Pydantic AI adapters
share (ckptfs.integrations.openai_agents, ckptfs.integrations.pydantic_ai).

A wrapped tool notes its call in the session (one commit) before it runs through the effect
ledger (``ToolEffects``). When the framework later stores the call's items, the note goes in
the same commit. A process killed in between leaves the note: the next read of the session
settles it from the ledger, so the history holds the call and its outcome (the recorded
result, the failure, or an explicit in-doubt text), and the model is never led to call the
tool again. Each adapter turns a settled call into its framework's items.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from ckptfs.format import cbor
from ckptfs.integrations.agent_common import ItemLog
from ckptfs.integrations.agent_effects import ToolEffects

#: what an in-doubt call's output tells the model (and the human reading the history)
IN_DOUBT_TEXT = (
    "ckptfs: this tool call was started but its outcome was never recorded (the process "
    "stopped); it may or may not have happened. It will not be run again: do not call it "
    "again, a human must check and settle it ('ckptfs effects').")


def recordable(value: Any, what: str) -> Any:
    """A tool's output as the ledger can record it: plain data as it is, else its text (the
    frameworks show a model ``str()`` of outputs they have no structured form for)."""
    try:
        cbor.check_plain(value, what=what, max_depth=cbor.LEDGER_VALUE_DEPTH)
        return value
    except TypeError:
        return str(value)


@attrs.frozen
class Settled:
    """A noted call whose outcome the ledger knows: ``output`` is the recorded result of a
    completed call, else the text the model reads (failed, or in doubt)."""

    call_id: str
    name: str
    arguments: str
    output: Any


@attrs.frozen
class PendingCalls:
    """The notes of one session, kept under the meta entry ``key`` of its ``log``."""

    log: ItemLog
    effects: ToolEffects
    key: str

    def _notes(self) -> dict[str, Any]:
        return dict(self.log.meta.get(self.key) or {})

    def waiting(self) -> bool:
        """Whether any call is noted (as of the log's last refresh)."""
        return bool(self.log.meta.get(self.key))

    def note(self, call_id: str, name: str, arguments: str) -> None:
        """Record that ``call_id`` is about to run (one commit), unless it is noted already."""
        self.log.refresh()
        notes = self._notes()
        if call_id in notes:
            return
        notes[call_id] = {"name": name, "arguments": arguments}
        self.log.append([], meta={self.key: notes})

    def answered(self, done: Iterable[str]) -> dict[str, Any] | None:
        """The meta entry for an append whose items answer the calls ``done`` (the notes
        without them), or None when it answers no noted call."""
        notes = self._notes()
        done = set(done)
        if not notes or not done & notes.keys():
            return None
        return {self.key: {k: v for k, v in notes.items() if k not in done}}

    def settle(self) -> tuple[list[Settled], dict[str, Any]]:
        """The noted calls whose outcome the ledger knows, in call id order, and the meta entry
        to append their items with: calls still running elsewhere stay noted, calls never
        issued are dropped (the tool did not run)."""
        notes = self._notes()
        keep: dict[str, Any] = {}
        out: list[Settled] = []
        for cid, (status, value) in self.effects.outcomes(sorted(notes)).items():
            call = notes[cid]
            if status == "running":
                keep[cid] = call
            elif status != "none":
                output = (value if status == "completed" else
                          f"ckptfs: this tool call failed: {value}" if status == "failed"
                          else IN_DOUBT_TEXT)
                out.append(Settled(cid, call["name"], call["arguments"], output))
        return out, {self.key: keep}
