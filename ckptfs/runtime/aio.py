"""The async API's machinery: a run's storage work in its own worker thread, in call order.

``Run.acheckpoint``, ``aappend``, ``aeffect`` and ``Store.aresume`` must not block the event
loop on storage I/O, and must keep the guarantees of their sync twins. So each run gets one
worker thread (a ``ThreadPoolExecutor`` of one, made on first use and gone with the run):
its commits run there one at a time, in the order they were awaited, exactly as the sync
calls would have run. A caller whose await is cancelled does not return before the commit it
started has ended in its thread, so that nothing of the run moves under the caller's feet
afterwards. An effect's function itself is awaited on the loop (a coroutine function) or
called in a worker thread (a plain one); only one effect of a run is open at a time, as in
the sync API, so a second ``aeffect`` of the same run waits for the first.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class Serial:
    """One worker thread that runs one owner's blocking calls in the order they are awaited."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._effects: asyncio.Lock | None = None

    def _executor(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix=f"ckptfs-{self._name[:40]}")
        return self._pool

    async def call(self, fn: Callable[..., T], *args: Any,
                   on_cancel: Callable[[T], None] | None = None, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` in the worker thread, after every call awaited before it.
        ``on_cancel``: given the result when the call succeeded but the caller was cancelled
        meanwhile (what the caller would have cleaned up)."""
        loop = asyncio.get_running_loop()
        # in the caller's context (contextvars: a tracing span current in the caller is the
        # parent of what the commit reports), as asyncio.to_thread does
        ctx = contextvars.copy_context()
        fut = loop.run_in_executor(self._executor(), ctx.run,
                                   functools.partial(fn, *args, **kwargs))
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            # the storage call runs on in its thread: let it end before the caller moves on
            while not fut.done():
                try:
                    await asyncio.wait({fut})
                except asyncio.CancelledError:
                    continue
            if not fut.cancelled() and fut.exception() is None and on_cancel is not None:
                on_cancel(fut.result())
            raise

    def effect_lock(self) -> asyncio.Lock:
        """Held while an ``aeffect`` of the run is open: effects of one run do not overlap."""
        if self._effects is None:
            self._effects = asyncio.Lock()
        return self._effects

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None


async def call_effect_fn(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """An effect's function: awaited on the loop when it is a coroutine function (or returns an
    awaitable), otherwise called in a worker thread so that a blocking call does not stall
    the loop."""
    if inspect.iscoroutinefunction(fn):
        result = await fn(*args, **kwargs)
    else:
        result = await asyncio.to_thread(fn, *args, **kwargs)
    if inspect.isawaitable(result):
        result = await result
    return result
