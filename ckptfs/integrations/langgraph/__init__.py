"""A LangGraph checkpointer that keeps threads as ckptfs runs and checkpoints as snapshots.

Layout in the store (docs/guides/langgraph.md):

* each (thread id, checkpoint namespace) is the run ``lg-<32 hex>-<16 hex>`` (BLAKE3 of the
  thread id, then of the namespace), since both may hold any character; labels
  ``lg.thread_id`` and ``lg.checkpoint_ns`` on every snapshot keep the real ids;
* each checkpoint is a snapshot at boundary ``step`` whose parent is the parent checkpoint's
  snapshot: entry ``checkpoint`` (the checkpoint without its channel values), entry
  ``metadata``, and one entry per channel value under ``channels/`` (labels ``lg.channel``,
  ``lg.version``). A channel LangGraph did not bump reuses the parent's entry as it is, and a
  list value (a message history) is a top-level list, which ckptfs stores as an append-friendly
  CBOR sequence, so a step costs about what it added. Labels ``lg.checkpoint_id``,
  ``lg.parent_checkpoint_id`` and ``lg.meta.<key>`` (scalar metadata, as text) name it;
* the pending writes of a checkpoint are snapshots at boundary ``writes`` (label ``lg.kind``
  ``writes``): each holds all writes so far in entry ``writes``, rows ``[task_id, channel,
  idx, task_path, value]``; its parent is the previous writes snapshot or the checkpoint.
  With ``fold_writes`` (the default) writes that reach the saver before their checkpoint go
  instead into that checkpoint's own snapshot (entry ``writes``, label ``lg.writes_of``; in
  stores of earlier versions, the next checkpoint's), ``fold.py``.
* every snapshot carries history labels (``chain_labels``): ``lg.max_checkpoint_id``,
  ``lg.max_writes_id``, ``lg.last_writes_seq`` and ``lg.ordered``, so that lookups read from the
  head down or binary-search instead of reading the whole run; a ``mark`` snapshot (no entries)
  becomes the head when ``delete_for_runs`` forgets the newest checkpoint;
* deleting goes through ckptfs's retention ops (``erase``, ``forget``); an erased thread starts
  over in run ``<run id>.<n>``;
* ``CkptfsSaver.effect`` keeps a thread's side effects in ckptfs's effect ledger, in the
  separate run ``lgfx-<32 hex>`` (the same thread hash).

Values of types the saver's ``ckptfs.Codecs`` knows (the built-ins, and the classes given in
``allowed_types`` or registered on ``codecs``) are stored as ckptfs typed values (tag 27,
spec/format.md 18) and come back as their own types; other values that are not plain data go
through LangGraph's serializer (strict msgpack allow-list, no pickle) and are kept as
``{"__lg__": type, "data": bytes}`` maps; a stored ``pickle`` type is refused on read whatever
serializer is configured (``values.py``).

Modules: ``layout`` (names, labels, the per-run index), ``values`` (packing values),
``threads`` (deleting, pruning, copying threads, side effects), ``fold`` (writes held for their
checkpoint's ``put``), ``saver`` (``CkptfsSaver``).
"""

try:
    import langchain_core.runnables  # noqa: F401
    import langgraph.checkpoint.base  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("ckptfs.integrations.langgraph needs LangGraph: "
                      "pip install 'ckptfs[langgraph]'") from e

from ckptfs.integrations.langgraph.layout import (  # noqa: E402
    channel_entry,
    effects_run_id,
    run_id_for,
    thread_prefix,
)
from ckptfs.integrations.langgraph.saver import CkptfsSaver  # noqa: E402

__all__ = ["CkptfsSaver", "channel_entry", "effects_run_id", "run_id_for", "thread_prefix"]
