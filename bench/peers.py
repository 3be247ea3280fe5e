"""W1 checkpointers under test, each behind the same three calls: put, restore, close.

Every peer is driven with the same state (``{"messages": [...]}``, one ~1 KB message appended
per step) through its own public API. ckptfs is used only through ``ckptfs.open_store``.
"""

from __future__ import annotations

import os
import pickle  # bench baseline only (issue 2 names it); never used by ckptfs
import sqlite3
from typing import Any

RUN = "w1"
THREAD = {"configurable": {"thread_id": RUN, "checkpoint_ns": ""}}


class Peer:
    """One checkpointer writing into (or reading from) ``path``, a fresh directory."""

    name = "?"
    #: fsyncs are issued by C code (sqlite) that the Python-level counter cannot see
    python_fsyncs = True

    def __init__(self, path: str) -> None:
        self.path = path

    def put(self, messages: list[dict[str, Any]], step: int) -> None:
        raise NotImplementedError

    def restore(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class Ckptfs(Peer):
    """ckptfs on a local directory: ``run.checkpoint(state)`` per step, ``store.read(run)``."""

    name = "ckptfs"

    def __init__(self, path: str) -> None:
        import ckptfs

        super().__init__(path)
        self.store = ckptfs.open_store(path)
        self.run: Any = None
        self.state: dict[str, Any] = {}

    def put(self, messages: list[dict[str, Any]], step: int) -> None:
        if self.run is None:
            self.run = self.store.start_run(RUN, schema=("chat", 1))
        self.state["messages"] = messages
        self.run.checkpoint(self.state)

    def restore(self) -> list[dict[str, Any]]:
        return list(self.store.read(RUN)["messages"])

    def close(self) -> None:
        self.store.close()


class CkptfsAppend(Ckptfs):
    """ckptfs with the O(change) form: ``run.append("messages", msg)`` per step after the first
    ``checkpoint`` (the same bytes on disk; the commit encodes only the new message)."""

    name = "ckptfs run.append"

    def put(self, messages: list[dict[str, Any]], step: int) -> None:
        if self.run is None:
            super().put(list(messages), step)
            return
        self.run.append("messages", messages[-1])


class CkptfsSingle(Ckptfs):
    """ckptfs holding only the final state (one snapshot): restore cost without history."""

    name = "ckptfs-1-snapshot"
    only_last = True


def _sqlite(path: str) -> Any:
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(os.path.join(path, "checkpoints.sqlite"), check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    return saver


class _LangGraphPeer(Peer):
    """Drives a LangGraph saver through ``put`` like the Pregel loop does, one step per put."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.saver = self._open()
        self.config: dict[str, Any] = {"configurable": dict(THREAD["configurable"])}

    def _open(self) -> Any:
        raise NotImplementedError

    def _checkpoint(self, values: dict[str, Any], step: int) -> dict[str, Any]:
        from langgraph.checkpoint.base import empty_checkpoint
        from langgraph.checkpoint.base.id import uuid6

        c = empty_checkpoint()
        c["id"] = str(uuid6(clock_seq=step))
        c["channel_values"] = values
        c["channel_versions"] = {"messages": step + 1}
        c["versions_seen"] = {"agent": {"messages": step}}
        c["updated_channels"] = ["messages"]
        return c

    def put(self, messages: list[dict[str, Any]], step: int) -> None:
        ckpt = self._checkpoint({"messages": messages}, step)
        self.config = self.saver.put(self.config, ckpt, {"source": "loop", "step": step,
                                                         "parents": {}},
                                     {"messages": step + 1})

    def restore(self) -> list[dict[str, Any]]:
        tup = self.saver.get_tuple(THREAD)
        return list(tup.checkpoint["channel_values"]["messages"])


class Sqlite(_LangGraphPeer):
    """LangGraph ``SqliteSaver`` on a file (WAL, sqlite's default synchronous=FULL)."""

    name = "SqliteSaver"
    python_fsyncs = False

    def _open(self) -> Any:
        return _sqlite(self.path)

    def close(self) -> None:
        self.saver.conn.close()


def _concat(state: list[Any], writes: list[list[Any]]) -> list[Any]:
    return state + [m for batch in writes for m in batch]


class SqliteDelta(Sqlite):
    """``SqliteSaver`` with messages in a ``DeltaChannel`` (snapshot_frequency=100, default).

    Each step stores the new message as a pending write of the parent checkpoint (as Pregel's
    node writes are) and a checkpoint whose channel_values omit the channel, except every
    100th, which carries a ``_DeltaSnapshot`` of the whole list. Restore goes through
    LangGraph's own ``channels_from_checkpoint`` (the ancestor walk + replay).
    """

    name = "SqliteSaver+DeltaChannel"
    FREQ = 100

    def put(self, messages: list[dict[str, Any]], step: int) -> None:
        from langgraph.checkpoint.serde.types import _DeltaSnapshot

        if step > 0:
            self.saver.put_writes(self.config, [("messages", [messages[-1]])], f"task-{step}")
        values: dict[str, Any] = {}
        if (step + 1) % self.FREQ == 0 or step == 0:
            values["messages"] = _DeltaSnapshot(list(messages))
        ckpt = self._checkpoint(values, step)
        self.config = self.saver.put(self.config, ckpt, {"source": "loop", "step": step,
                                                         "parents": {}},
                                     {"messages": step + 1})

    def restore(self) -> list[dict[str, Any]]:
        from langgraph.channels.delta import DeltaChannel
        from langgraph.pregel._checkpoint import channels_from_checkpoint

        tup = self.saver.get_tuple(THREAD)
        spec = DeltaChannel(_concat, list, snapshot_frequency=self.FREQ)
        channels, _ = channels_from_checkpoint({"messages": spec}, tup.checkpoint,
                                               saver=self.saver, config=tup.config)
        return list(channels["messages"].get())


class ObjectStorage(_LangGraphPeer):
    """``langgraph-checkpoint-objectstorage`` on local disk (``file://``; fsspec, no fsync)."""

    name = "ObjectStorageSaver"

    def _open(self) -> Any:
        from langgraph_checkpoint_objectstorage import ObjectStorageSaver

        return ObjectStorageSaver.from_conn_string(f"file://{self.path}")


class PickleFsync(Peer):
    """Full state pickled per step: temp file, fsync, rename to step-N, fsync the directory.

    One file per step so history is kept like the other peers; restore loads the newest.
    """

    name = "pickle+fsync"

    def put(self, messages: list[dict[str, Any]], step: int) -> None:
        data = pickle.dumps({"messages": messages}, protocol=pickle.HIGHEST_PROTOCOL)
        tmp = os.path.join(self.path, f".tmp-{step}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, os.path.join(self.path, f"step-{step:08d}.pkl"))
        dfd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def restore(self) -> list[dict[str, Any]]:
        newest = max(n for n in os.listdir(self.path) if n.endswith(".pkl"))
        with open(os.path.join(self.path, newest), "rb") as f:
            return list(pickle.load(f)["messages"])


PEERS: dict[str, type[Peer]] = {p.name: p for p in (Ckptfs, CkptfsAppend, Sqlite, SqliteDelta,
                                                     ObjectStorage, PickleFsync, CkptfsSingle)}


def available(name: str) -> str | None:
    """None if the peer can run here, else why not."""
    try:
        if name == ObjectStorage.name:
            import langgraph_checkpoint_objectstorage  # noqa: F401
        elif name == SqliteDelta.name:
            import langgraph.channels.delta  # noqa: F401
            import langgraph.pregel._checkpoint  # noqa: F401
        elif name in (Sqlite.name,):
            import langgraph.checkpoint.sqlite  # noqa: F401
    except ImportError as e:
        return f"not installed ({e})"
    return None
