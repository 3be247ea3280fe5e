"""A scripted ADK model and agents for the ADK tests and the bench: no network.

``Scripted`` answers from the last user message: ``pay N`` calls tool ``pay(amount=N)``,
``remember K V`` calls ``remember(key=K, value=V)`` (which writes ``user:K`` and ``app:K`` state),
a function response is summarised in a text reply, anything else is echoed. Deterministic, so a
conversation can be replayed in another process.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Sequence
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions.base_session_service import BaseSessionService
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types

APP = "shop"
USER = "alice"


class Scripted(BaseLlm):
    """A BaseLlm that answers from a script instead of a model server."""

    model: str = "scripted"

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False
                                     ) -> AsyncGenerator[LlmResponse, None]:
        last = llm_request.contents[-1] if llm_request.contents else None
        parts = list(last.parts or []) if last is not None else []
        responses = [p.function_response for p in parts if p.function_response]
        if responses:
            text = "; ".join(f"{r.name} -> {r.response}" for r in responses)
            yield _text(f"done: {text}")
            return
        said = next((p.text for p in parts if p.text), "") or ""
        words = said.split()
        if words[:1] == ["pay"] and len(words) == 2:
            yield _call("pay", {"amount": int(words[1])})
        elif words[:1] == ["remember"] and len(words) == 3:
            yield _call("remember", {"key": words[1], "value": words[2]})
        else:
            yield _text(f"echo: {said}")


def _text(text: str) -> LlmResponse:
    return LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))


def _call(name: str, args: dict[str, Any]) -> LlmResponse:
    return LlmResponse(content=types.Content(role="model", parts=[
        types.Part(function_call=types.FunctionCall(name=name, args=args))]))


def remember(key: str, value: str, tool_context: ToolContext) -> dict[str, str]:
    """Remember a value for the user and for the app."""
    tool_context.state[f"user:{key}"] = value
    tool_context.state[f"app:{key}"] = value
    tool_context.state[f"temp:{key}"] = value
    tool_context.state[key] = value
    return {"remembered": key}


def runner(service: BaseSessionService, tools: Sequence[BaseTool | Callable[..., Any]] = ()
           ) -> Runner:
    agent = LlmAgent(name="clerk", model=Scripted(), tools=[remember, *tools])
    return Runner(app_name=APP, agent=agent, session_service=service)


def user(text: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=text)])


def confirm(call_id: str, confirmed: bool = True) -> types.Content:
    """The user's answer to an ``adk_request_confirmation`` call."""
    return types.Content(role="user", parts=[types.Part(function_response=types.FunctionResponse(
        id=call_id, name="adk_request_confirmation", response={"confirmed": confirmed}))])


async def turn(r: Runner, session_id: str, message: types.Content) -> list[Any]:
    """Run one turn; the events it produced."""
    return [ev async for ev in r.run_async(user_id=USER, session_id=session_id,
                                           new_message=message)]


def confirmation_id(events: Sequence[Any]) -> str | None:
    for ev in events:
        for fc in ev.get_function_calls():
            if fc.name == "adk_request_confirmation":
                return str(fc.id)
    return None
