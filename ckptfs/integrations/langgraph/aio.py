"""``CkptfsSaver``'s async twins: each runs its sync method in a worker thread
(``asyncio.to_thread``); the saver's I/O blocks, and its calls for one thread id are
serialised by a lock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)

from ckptfs.errors import ConflictError
from ckptfs.format.ledger import Effect

if TYPE_CHECKING:
    from ckptfs.integrations.langgraph.saver import CkptfsSaver


class Opened:
    """What ``CkptfsSaver.from_url`` returns: a context manager for ``with`` and for
    ``async with``, whose value is the saver (opened on entering, closed on leaving)."""

    def __init__(self, make: Callable[[], CkptfsSaver]) -> None:
        self._make = make
        self._saver: CkptfsSaver | None = None

    def __enter__(self) -> CkptfsSaver:
        self._saver = self._make()
        return self._saver

    def __exit__(self, *exc: object) -> None:
        if self._saver is not None:
            self._saver.close()

    async def __aenter__(self) -> CkptfsSaver:
        self._saver = await asyncio.to_thread(self._make)
        return self._saver

    async def __aexit__(self, *exc: object) -> None:
        if self._saver is not None:
            await asyncio.to_thread(self._saver.close)


def forget_effect_run(saver: CkptfsSaver, config: RunnableConfig, run: object) -> None:
    """Another process moved the thread's ledger: resume it next time."""
    from ckptfs.integrations.langgraph.threads import drop_effect_run

    drop_effect_run(saver, config, run)


def _saver(obj: object) -> CkptfsSaver:
    return cast("CkptfsSaver", obj)


class AsyncTwins:
    """The async methods of ``BaseCheckpointSaver`` for ``CkptfsSaver``, a mixin placed before
    ``BaseCheckpointSaver`` (whose own async methods raise NotImplementedError)."""

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(_saver(self).get_tuple, config)

    async def aget_delta_channel_history(self, *, config: RunnableConfig,
                                         channels: Sequence[str]) -> Mapping[str, Any]:
        return await asyncio.to_thread(
            lambda: _saver(self).get_delta_channel_history(config=config, channels=channels))

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None
                    ) -> AsyncIterator[CheckpointTuple]:
        """``list`` streamed: each item is read in a worker thread when it is asked for, so
        the first comes after reading about one snapshot, not the whole listing."""
        items = _saver(self).list(config, filter=filter, before=before, limit=limit)
        done = object()
        try:
            while True:
                item = await asyncio.to_thread(next, items, done)
                if item is done:
                    return
                yield cast(CheckpointTuple, item)
        finally:
            close = getattr(items, "close", None)  # a generator: its cleanup, off the loop
            if close is not None:
                await asyncio.to_thread(close)

    async def aeffect(self, config: RunnableConfig, name: str, fn: Callable[..., Any],
                      *args: Any, key: str, reconcile: Callable[[Effect], Any] | None = None,
                      **kwargs: Any) -> Any:
        """``effect`` for an ``async def`` tool: ``fn`` may be a coroutine function (awaited on
        the loop) or a plain one (called in a worker thread); the ledger's commits run in the
        effect run's worker thread (``Run.aeffect``), so the event loop is never blocked."""
        from ckptfs.integrations.langgraph.threads import effect_run

        saver = _saver(self)
        run = await asyncio.to_thread(effect_run, saver, config)
        try:
            return await run.aeffect(name, fn, *args, key=key, reconcile=reconcile, **kwargs)
        except ConflictError:
            await asyncio.to_thread(forget_effect_run, saver, config, run)
            raise

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint,
                   metadata: CheckpointMetadata, new_versions: ChannelVersions) -> RunnableConfig:
        return await asyncio.to_thread(_saver(self).put, config, checkpoint, metadata,
                                       new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                          task_id: str, task_path: str = "") -> None:
        await asyncio.to_thread(_saver(self).put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(_saver(self).delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(_saver(self).delete_for_runs, run_ids)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(_saver(self).prune, thread_ids, strategy=strategy)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(_saver(self).copy_thread, source_thread_id, target_thread_id)
