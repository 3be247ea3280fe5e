"""``CkptfsSaver``'s async twins: each runs its sync method in a worker thread
(``asyncio.to_thread``); the saver's I/O blocks, and its calls for one thread id are
serialised by a lock."""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)

if TYPE_CHECKING:
    from ckptfs.integrations.langgraph.saver import CkptfsSaver


def _saver(obj: object) -> CkptfsSaver:
    return cast("CkptfsSaver", obj)


class AsyncTwins:
    """The async methods of ``BaseCheckpointSaver`` for ``CkptfsSaver``, a mixin placed before
    ``BaseCheckpointSaver`` (whose own async methods raise NotImplementedError)."""

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(_saver(self).get_tuple, config)

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None
                    ) -> AsyncIterator[CheckpointTuple]:
        saver = _saver(self)
        found = await asyncio.to_thread(
            lambda: builtins.list(saver.list(config, filter=filter, before=before, limit=limit)))
        for item in found:
            yield item

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
