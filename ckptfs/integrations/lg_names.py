"""The run names CkptfsSaver gives LangGraph threads, without importing LangGraph (the CLI
resolves ``--thread ID`` with them)."""

from __future__ import annotations

from ckptfs.format.digest import hasher

RUN_PREFIX = "lg-"
EFFECTS_PREFIX = "lgfx-"
#: the labels on every snapshot of a thread's run that keep the real ids (run ids are hashes)
THREAD_LABEL = "lg.thread_id"
NS_LABEL = "lg.checkpoint_ns"


def _h(domain: str, text: str) -> str:
    h = hasher()
    h.update(domain.encode() + b"\0" + text.encode("utf-8", "surrogatepass"))
    return str(h.hexdigest())


def thread_prefix(thread_id: str) -> str:
    """The run id prefix shared by every namespace of a thread."""
    return f"{RUN_PREFIX}{_h('thread', thread_id)[:32]}-"


def run_id_for(thread_id: str, checkpoint_ns: str) -> str:
    """The ckptfs run holding (thread id, namespace): safe for any characters in either."""
    return thread_prefix(thread_id) + _h("ns", checkpoint_ns)[:16]


def effects_run_id(thread_id: str) -> str:
    """The run holding a thread's effect ledger (``CkptfsSaver.effect``), beside its checkpoints."""
    return f"{EFFECTS_PREFIX}{_h('thread', str(thread_id))[:32]}"


def live_run(run_ids: list[str], thread_id: str, checkpoint_ns: str = "") -> str | None:
    """Of a store's ``run_ids``, the newest generation of the thread's run (``<run>``,
    ``<run>.2`` after a deletion, ...), or None when the thread has none."""
    base = run_id_for(thread_id, checkpoint_ns)
    best: tuple[int, str] | None = None
    for r in run_ids:
        if r == base:
            gen = 1
        elif r.startswith(base + ".") and r[len(base) + 1:].isdigit():
            gen = int(r[len(base) + 1:])
        else:
            continue
        if best is None or gen > best[0]:
            best = (gen, r)
    return best[1] if best else None
