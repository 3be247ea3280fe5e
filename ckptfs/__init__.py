"""ckptfs: filesystem-native, content-addressed snapshots of long-running AI agent runs.

    store = ckptfs.open_store("./store")          # any fsspec URL: s3://, gs://, memory://
    run = store.start_run("run-1", schema=("agent", 1))
    run.checkpoint({"messages": [...], "plan": {...}})
    run = store.resume("run-1")                    # after a crash, on another machine
    run = store.resume("run-1", schema=("agent", 2), migrations=migrations)  # after a deploy
"""

from ckptfs import errors
from ckptfs._version import __version__
from ckptfs.format.cdc import ChunkerParams
from ckptfs.format.digest import Digest
from ckptfs.format.models import Schema
from ckptfs.format.typed import TypedValue
from ckptfs.format.values import Blob, Ref, StoredBlob
from ckptfs.runtime.codecs import Codecs
from ckptfs.runtime.effects import NOT_DONE, Decision
from ckptfs.runtime.migrations import Migrations
from ckptfs.runtime.refs import RefPolicy
from ckptfs.runtime.run import Run
from ckptfs.runtime.store import Store, open_store
from ckptfs.store.repository import Snapshot

__all__ = [
    "Blob",
    "Codecs",
    "Decision",
    "NOT_DONE",
    "ChunkerParams",
    "Digest",
    "Migrations",
    "Ref",
    "RefPolicy",
    "Run",
    "Schema",
    "Snapshot",
    "Store",
    "StoredBlob",
    "TypedValue",
    "errors",
    "open_store",
    "__version__",
]
