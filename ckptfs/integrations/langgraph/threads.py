"""CkptfsSaver's thread operations: deleting (erase, forget), pruning and copying threads, and
side effects through the effect ledger. Functions of the saver, kept apart to keep modules
small; ``CkptfsSaver`` calls them from its methods of the same names."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig

from ckptfs.errors import CkptfsError, ConflictError, NotFound
from ckptfs.format.digest import Digest
from ckptfs.format.ledger import Effect
from ckptfs.format.typed import FEATURE as TYPED_FEATURE
from ckptfs.integrations.langgraph.fold import L_WRITES_OF
from ckptfs.integrations.langgraph.layout import (
    L_CID,
    L_COPIED,
    L_KIND,
    L_NS,
    L_THREAD,
    RUN_PREFIX,
    _RunIndex,
    _cid,
    _ids,
    _kind,
    effects_run_id,
    thread_prefix,
)
from ckptfs.store.repository import Snapshot

if TYPE_CHECKING:
    from ckptfs.integrations.langgraph.saver import CkptfsSaver
    from ckptfs.runtime.run import Run


def delete_thread(saver: CkptfsSaver, thread_id: str) -> None:
    """Erase a thread now, in every namespace, with its effect ledger: ckptfs ``erase``
    (fence, tombstone, records, then every chunk and manifest no other run uses). The
    thread id stays usable: its next checkpoint starts a new run (docs/guides/langgraph.md)."""
    erase_thread(saver, str(thread_id), "langgraph delete_thread")

def erase_thread(saver: CkptfsSaver, tid: str, reason: str) -> None:
    from ckptfs.ops.erase import erase  # the ops are imported by the saver calls that use them

    repo = saver.store.repo
    with saver._thread_lock(tid), saver._thread_lock(f"\0effects\0{tid}"):
        runs = saver._run_ids(thread_prefix(tid)) + saver._run_ids(
            effects_run_id(tid))
        for rid in runs:
            if repo.record_seqs(rid):
                erase(repo, rid, reason=reason)
        with saver._lock:
            for rid in runs:
                saver._runs.pop(rid, None)
            saver._live = {b: r for b, r in saver._live.items() if r not in runs}
            saver._effect_runs.pop(tid, None)
            for idx in saver._runs.values():
                idx.writers.clear()  # erase removed chunks they may remember
                idx.lists.clear()

def delete_for_runs(saver: CkptfsSaver, run_ids: Sequence[str]) -> None:
    """Forget the checkpoints (and their writes) whose metadata ``run_id`` is listed, with
    ckptfs ``forget`` semantics (retired range first, then the records; chunks go at the
    next ``ckptfs gc``). A run's head goes only with its whole run, so when the newest
    checkpoint goes, a ``mark`` snapshot (no entries) becomes the head first."""
    from ckptfs.ops.retention import forget_snapshots

    targets = set(run_ids)
    if not targets:
        return
    drop: dict[str, set[int]] = {}
    for rid in saver._run_ids(RUN_PREFIX):
        idx = saver._index(rid, None, None)
        with idx.lock:
            snaps = saver._load_all(idx)
            doomed = {_cid(s) for s in snaps if _kind(s) == "checkpoint"
                      and saver._metadata(idx, s).get("run_id") in targets}
            seqs = {s.seq for s in snaps if _kind(s) in ("checkpoint", "writes")
                    and _cid(s) in doomed}
            if not seqs:
                continue
            _keep_folded_writes(saver, idx, snaps, seqs, doomed)
            if idx.top in seqs:
                assert idx.thread_id is not None and idx.ns is not None
                head = saver._at(idx, idx.top)
                saver._commit(idx, "mark", {}, {L_KIND: "mark", L_THREAD: idx.thread_id,
                                               L_NS: idx.ns}, head.digest)
            drop[rid] = seqs
    forget_snapshots(saver.store.repo, drop)
    for rid in drop:
        saver._index(rid, None, None)

def _keep_folded_writes(saver: CkptfsSaver, idx: _RunIndex, snaps: Sequence[Snapshot],
                        seqs: set[int], doomed: set[str]) -> None:
    """A forgotten checkpoint whose snapshot holds the newest writes of a kept one (its parent,
    ``fold.py``): those writes are committed again as a writes snapshot of the kept one first
    (the same entry, so no value is copied), so that they stay."""
    for s in snaps:
        of = s.manifest.labels.get(L_WRITES_OF)
        if s.seq not in seqs or of is None or of in doomed or "writes" not in s.manifest.entries:
            continue
        holder = saver._writes_snap(idx, of)
        kept = saver._checkpoint(idx, of)
        if holder is None or holder.seq != s.seq or kept is None:
            continue
        assert idx.thread_id is not None and idx.ns is not None
        saver._commit(idx, "writes", {"writes": s.manifest.entries["writes"]},
                      {L_KIND: "writes", L_THREAD: idx.thread_id, L_NS: idx.ns, L_CID: of},
                      kept.digest, typed=TYPED_FEATURE in s.manifest.required)


def prune(saver: CkptfsSaver, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
    """``keep_latest``: per namespace keep the newest checkpoint and its writes, forgetting
    the rest (ckptfs ``forget`` keeping label ``lg.checkpoint_id``; chunks go at the next
    ``ckptfs gc``); ``delete``: erase the threads as ``delete_thread`` does."""
    from ckptfs.ops.retention import Policy, forget

    if strategy not in ("keep_latest", "delete"):
        raise ValueError(f"unknown prune strategy {strategy!r}: use 'keep_latest' or 'delete'")
    for thread_id in thread_ids:
        tid = str(thread_id)
        if strategy == "delete":
            erase_thread(saver, tid, "langgraph prune(strategy='delete')")
            continue
        with saver._thread_lock(tid):
            for idx in saver._thread_indexes(tid):
                with idx.lock:
                    latest = saver._latest(idx)
                if latest is None:
                    continue
                report = forget(saver.store.repo, Policy(keep_labels=((L_CID, _cid(latest)),)),
                                runs=[idx.run_id])
                if report.problems:
                    raise CkptfsError(f"prune of thread {tid!r}: " + "; ".join(report.problems))
                saver._sync(idx)

def copy_thread(saver: CkptfsSaver, source_thread_id: str, target_thread_id: str) -> None:
    """Copy every snapshot of a thread to another: new manifests naming the same entries,
    so no value is copied; checkpoint ids, metadata, parents and writes are kept."""
    src, dst = str(source_thread_id), str(target_thread_id)
    if src == dst:
        return
    first, second = sorted((src, dst))
    with saver._thread_lock(first), saver._thread_lock(second):
        saver._ensure_store()
        for idx in saver._thread_indexes(src):
            with idx.lock:
                snaps = saver._load_all(idx)
            assert idx.ns is not None
            target = saver._ns_index(dst, idx.ns)
            copied: dict[Digest, Digest] = {}
            with target.lock:
                for snap in snaps:
                    m = snap.manifest
                    labels = {**m.labels, L_THREAD: dst, L_COPIED: snap.id}
                    new = saver._commit(target, m.boundary, m.entries, labels,
                                        copied.get(m.parent) if m.parent else None,
                                        typed="typed-values" in m.required)
                    copied[snap.digest] = new.digest

def effect_run(saver: CkptfsSaver, config: RunnableConfig) -> Run:
    """The run that holds the effect ledger of the config's thread (started on first use)."""
    tid, _ = _ids(config)
    with saver._thread_lock(f"\0effects\0{tid}"):
        run = saver._effect_runs.get(tid)
        if run is None:
            rid = saver._live_run(effects_run_id(tid))
            try:
                run = saver.store.resume(rid)
            except NotFound:
                run = saver.store.start_run(rid, schema=("langgraph-effects", 1))
            saver._effect_runs[tid] = run
        return run


def drop_effect_run(saver: CkptfsSaver, config: RunnableConfig, run: object) -> None:
    """Forget the thread's effect run handle (another process moved the ledger): the next
    effect resumes the run afresh."""
    tid, _ = _ids(config)
    with saver._thread_lock(f"\0effects\0{tid}"):
        if saver._effect_runs.get(tid) is run:
            del saver._effect_runs[tid]


def effect(saver: CkptfsSaver, config: RunnableConfig, name: str, fn: Callable[..., Any],
           *args: Any, key: str, reconcile: Callable[[Effect], Any] | None = None,
           **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` at most once per ``key`` for the config's thread, through
    ckptfs's effect ledger (``Run.effect``) in run ``effects_run_id(thread)``: the intent is
    committed before the call and the result after, so a tool node re-run after a crash or
    a resume gets the recorded result instead of acting twice."""
    tid, _ = _ids(config)
    with saver._thread_lock(f"\0effects\0{tid}"):
        run = effect_run(saver, config)
        try:
            return run.effect(name, fn, *args, key=key, reconcile=reconcile, **kwargs)
        except ConflictError:
            del saver._effect_runs[tid]  # another process moved the ledger: resume next time
            raise
