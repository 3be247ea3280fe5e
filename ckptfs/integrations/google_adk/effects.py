"""Tools that never run twice: an ADK ``FunctionTool`` whose function runs through the ckptfs
effect ledger, keyed by ADK's function call id.

``OnceTool(pay, service)`` (or ``service.once(pay)``) is a ``FunctionTool`` in every respect
(declaration, argument checks, ``require_confirmation``), except how the function is called:
the session's effect ledger (run ``adk-x-...``, ``names``; the shared layer's
``agent_common.ToolEffects``) commits the intent before the call and the result after it,
under the key ``tool_context.function_call_id``. ADK runs a call again
with the same id when it is resumed (a confirmation sent again after a crash, a resumed
invocation); that call then

* returns the recorded result (the JSON form of what the function returned), when the first
  call's outcome was committed; the function is not called;
* raises ``ckptfs.errors.EffectInDoubt`` when the process died between the intent and the outcome
  (the function may or may not have acted): it is never called again by itself. Pass
  ``reconcile=`` (a function of the ``Effect`` that returns the result found in the outside
  world, or ``ckptfs.NOT_DONE`` to call the function again) or settle it with
  ``service.effects(session).settle(call_id, result=...)`` or ``ckptfs settle``;
* raises ``ckptfs.errors.EffectFailed`` when the first call raised (recorded, not retried).

The arguments the model sent are part of the record: the same call id with other arguments
raises ``EffectMismatch``.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from google.adk.tools.function_tool import FunctionTool
from google.adk.tools.tool_context import ToolContext
from pydantic_core import to_jsonable_python
from typing_extensions import override

from ckptfs.errors import InvalidArgument
from ckptfs.format.ledger import Effect
from ckptfs.runtime import effects as fx

if TYPE_CHECKING:
    from ckptfs.integrations.google_adk.service import CkptfsSessionService

#: the call under way in this task: (the model's arguments, the tool context)
_CALL: contextvars.ContextVar[tuple[dict[str, Any], ToolContext] | None] = (
    contextvars.ContextVar("ckptfs_adk_call", default=None))


class OnceTool(FunctionTool):
    """A ``FunctionTool`` whose function runs at most once per ADK function call id, across
    crashes and resumes, through ``service``'s effect ledger (module docstring)."""

    def __init__(self, func: Callable[..., Any], service: CkptfsSessionService, *,
                 require_confirmation: bool | Callable[..., bool] = False,
                 reconcile: Callable[[Effect], Any] | None = None,
                 timeout: float = fx.DEFAULT_TIMEOUT) -> None:
        super().__init__(func, require_confirmation=require_confirmation)
        self.service = service
        self.reconcile = reconcile
        self.timeout = timeout

    @override
    async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
        token = _CALL.set((dict(args), tool_context))
        try:
            return await super().run_async(args=args, tool_context=tool_context)
        finally:
            _CALL.reset(token)

    @override
    async def _invoke_callable(self, target: Callable[..., Any],
                               args_to_call: dict[str, Any]) -> Any:
        call = _CALL.get()
        if target is not self.func or call is None:  # e.g. a require_confirmation callable
            return await super()._invoke_callable(target, args_to_call)
        raw, ctx = call
        key = ctx.function_call_id
        if not key:
            raise InvalidArgument(f"tool {self.name!r}: ADK gave this call no function call id, "
                                  "so it cannot be recorded once; call it through a Runner")
        invoke = super()._invoke_callable

        async def once(_model_args: Any) -> Any:
            # the function itself runs on the event loop, as ADK would run it; its result is
            # recorded (and returned, now and on every replay) in its JSON form
            return to_jsonable_python(await invoke(target, args_to_call))

        return await self.service.effects(ctx.session).acall(
            key, self.name, once, to_jsonable_python(raw), reconcile=self.reconcile,
            timeout=self.timeout)
