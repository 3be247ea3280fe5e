"""CkptfsSaver over the retention ops and its lazy lookups: delete_thread erases (no byte of
the thread left, the thread id reusable), delete_for_runs and prune forget through the commit
protocol (the store verifies), and a fresh saver reads about what it returns, not the history."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph")

import zstandard  # noqa: E402
from langgraph.checkpoint.base import empty_checkpoint  # noqa: E402
from langgraph.checkpoint.base.id import uuid6  # noqa: E402

from ckptfs.integrations.langgraph import CkptfsSaver, run_id_for  # noqa: E402
from ckptfs.ops.gc import gc  # noqa: E402
from ckptfs.store.objects import ObjectStore  # noqa: E402


def cfg(tid: str, ns: str = "", cid: str | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"thread_id": tid, "checkpoint_ns": ns}
    if cid:
        c["checkpoint_id"] = cid
    return {"configurable": c}


def ckpt(values: dict[str, Any], cid: str | None = None) -> Any:
    cp = empty_checkpoint()
    cp["id"] = cid or str(uuid6(clock_seq=-1))
    cp["channel_values"] = values
    cp["channel_versions"] = {k: 1 for k in values}
    return cp


def chain(saver: CkptfsSaver, tid: str, n: int, *, run_id: str = "r", ns: str = "",
          writes: bool = True) -> list[dict[str, Any]]:
    """``n`` checkpoints of a thread, each the parent of the next, each with one task write."""
    out: list[dict[str, Any]] = []
    for i in range(n):
        parent = out[-1]["configurable"]["checkpoint_id"] if out else None
        c = saver.put(cfg(tid, ns, parent), ckpt({"i": i}), {"step": i, "run_id": run_id},
                      {"i": 1})
        if writes:
            saver.put_writes(c, [("i", i + 1)], f"task-{i}")
        out.append(c)
    saver.flush()  # the last writes, held for the next checkpoint (fold.py): durable now
    return out


def verify(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ckptfs.cli", "verify", "--read-data", str(root)],
                          capture_output=True, text=True, timeout=120)


def store_bytes(root: Path) -> bytes:
    """Every file of the store, zstd-framed objects decompressed (codec byte 0x01)."""
    out = []
    for p in root.rglob("*"):
        if p.is_file():
            data = p.read_bytes()
            if data[:1] == b"\x01" and p.parts[-3] in ("chunks", "snapshots"):
                data = zstandard.ZstdDecompressor().decompress(data[1:], max_output_size=1 << 26)
            out.append(data)
    return b"\n".join(out)


# -- deleting through the retention ops ------------------------------------------------------------
def test_delete_thread_erases_every_byte_and_the_thread_id_is_reusable(tmp_path: Path) -> None:
    root = tmp_path / "s"
    saver = CkptfsSaver(str(root))
    marker = "MARKER-only-in-thread-a-7f3e " * 300
    shared = "shared by both threads " * 300
    for tid in ("thread-a", "thread-b"):
        c = saver.put(cfg(tid), ckpt({"s": shared}), {"run_id": tid}, {"s": 1})
        saver.put(cfg(tid, "child:1"), ckpt({"s": shared}), {}, {"s": 1})
        if tid == "thread-a":
            c = saver.put(cfg(tid, cid=c["configurable"]["checkpoint_id"]),
                          ckpt({"s": shared, "m": [marker]}), {}, {"m": 1})
            saver.put_writes(c, [("m", marker + "w")], "task")
    saver.effect(cfg("thread-a"), "send", lambda: marker[:50] + "fx", key="k")
    assert b"MARKER-only-in-thread-a" in store_bytes(root)
    saver.delete_thread("thread-a")
    blob = store_bytes(root)
    assert b"MARKER-only-in-thread-a" not in blob and b"thread-a" not in blob
    assert (root / "tombstones" / f"{run_id_for('thread-a', '')}.cbor").is_file()
    fresh = CkptfsSaver(str(root))
    assert fresh.get_tuple(cfg("thread-a")) is None and list(fresh.list(cfg("thread-a"))) == []
    b = fresh.get_tuple(cfg("thread-b"))
    assert b is not None and b.checkpoint["channel_values"] == {"s": shared}
    assert verify(root).returncode == 0
    # the id starts over in a new run (the erased one is fenced forever), the ledger too
    again = fresh.put(cfg("thread-a"), ckpt({"s": "new"}), {}, {"s": 1})
    assert [t.config for t in fresh.list(cfg("thread-a"))] == [again]
    assert fresh.effect(cfg("thread-a"), "send", lambda: "second", key="k") == "second"
    assert CkptfsSaver(str(root)).get_tuple(cfg("thread-a")).checkpoint[  # type: ignore[union-attr]
        "channel_values"] == {"s": "new"}
    assert verify(root).returncode == 0


def test_delete_for_runs_of_the_newest_forgets_behind_a_mark_and_gc_reclaims(
        tmp_path: Path) -> None:
    root = tmp_path / "s"
    saver = CkptfsSaver(str(root))
    kept = chain(saver, "t", 3, run_id="keep")
    last = kept[-1]["configurable"]["checkpoint_id"]
    c = saver.put(cfg("t", cid=last), ckpt({"big": "rolled back " * 2000}),
                  {"run_id": "rollback"}, {"big": 1})
    saver.put_writes(c, [("x", 1)], "task")
    saver.delete_for_runs(["rollback"])
    fresh = CkptfsSaver(str(root))
    latest = fresh.get_tuple(cfg("t"))
    assert latest is not None and latest.config == kept[-1]
    assert latest.pending_writes == [("task-2", "i", 3)]
    assert fresh.get_tuple(c) is None and len(list(fresh.list(cfg("t")))) == 3
    assert verify(root).returncode == 0
    report = gc(fresh.store.repo, grace_ms=0)
    # v2 with complete locators: the strays are deleted unread, so their bodies are counted in
    # bytes, not chunks (spec/v2.md 9.2); the byte scan below is the proof either way
    assert report.manifests_deleted == 2
    assert report.chunks_deleted >= 1 or report.containers.bytes_freed > 0
    assert b"rolled back" not in store_bytes(root)
    # LangGraph goes on from the kept checkpoint; lookups stay exact
    nxt = fresh.put(cfg("t", cid=last), ckpt({"i": 9}), {}, {"i": 2})
    assert CkptfsSaver(str(root)).get_tuple(cfg("t")).config == nxt  # type: ignore[union-attr]
    assert verify(root).returncode == 0


def test_prune_keep_latest_forgets_older_snapshots_and_store_verifies(tmp_path: Path) -> None:
    root = tmp_path / "s"
    saver = CkptfsSaver(str(root))
    configs = chain(saver, "t", 5)
    saver.prune(["t"])
    repo = saver.store.repo
    assert len(repo.seqs(run_id_for("t", ""))) == 2  # the checkpoint and its writes
    assert (root / "runs" / run_id_for("t", "") / "retired").is_dir()
    fresh = CkptfsSaver(str(root))
    assert [t.config for t in fresh.list(cfg("t"))] == [configs[-1]]
    assert fresh.get_tuple(cfg("t")).pending_writes == [("task-4", "i", 5)]  # type: ignore[union-attr]
    assert fresh.get_tuple(configs[1]) is None
    assert verify(root).returncode == 0


# -- lookups read what they return -------------------------------------------------------------------
@pytest.fixture
def manifest_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts manifest reads (the real ObjectStore.get_manifest, counted)."""
    count = [0]
    real = ObjectStore.get_manifest

    def counted(self: ObjectStore, *a: Any, **k: Any) -> Any:
        count[0] += 1
        return real(self, *a, **k)

    monkeypatch.setattr(ObjectStore, "get_manifest", counted)
    return count


def test_fresh_saver_reads_a_few_manifests_not_the_history(
        tmp_path: Path, manifest_reads: list[int]) -> None:
    url = str(tmp_path / "s")
    configs = chain(CkptfsSaver(url), "t", 150)  # 300 snapshots

    def reads(fn: Any) -> tuple[Any, int]:
        before = manifest_reads[0]
        out = fn(CkptfsSaver(url))
        return out, manifest_reads[0] - before

    latest, n = reads(lambda s: s.get_tuple(cfg("t")))
    assert latest.config == configs[-1] and latest.pending_writes == [("task-149", "i", 150)]
    assert n <= 3
    old, n = reads(lambda s: s.get_tuple(configs[20]))
    assert old.config == configs[20] and old.pending_writes == [("task-20", "i", 21)]
    assert n <= 2 * 10 + 2  # two binary searches over 300 snapshots
    page, n = reads(lambda s: list(s.list(cfg("t"), limit=3)))
    assert [t.config for t in page] == configs[-1:-4:-1] and n <= 10
    page, n = reads(lambda s: list(s.list(cfg("t"), before=configs[100], limit=2)))
    assert [t.config for t in page] == [configs[99], configs[98]] and n <= 30
    missing, n = reads(lambda s: s.get_tuple(cfg("t", cid=str(uuid6(clock_seq=-1)))))
    assert missing is None and n <= 12


def test_async_durability_writes_before_their_checkpoint_and_late_writes(tmp_path: Path) -> None:
    """LangGraph's async durability may commit a checkpoint's writes before the checkpoint,
    and a task's writes after the next checkpoint: a fresh saver finds both."""
    url = str(tmp_path / "s")
    saver = CkptfsSaver(url)
    c1 = saver.put(cfg("t"), ckpt({"i": 0}), {}, {"i": 1})
    early = str(uuid6(clock_seq=-1))
    saver.put_writes(cfg("t", cid=early), [("i", "early")], "task-e")
    c2 = saver.put(cfg("t", cid=c1["configurable"]["checkpoint_id"]), ckpt({"i": 1}, early),
                   {}, {"i": 2})
    saver.put_writes(c1, [("i", "late")], "task-l")
    saver.flush()  # held for a next checkpoint that does not come (fold.py)
    fresh = CkptfsSaver(url)
    t2 = fresh.get_tuple(cfg("t"))
    assert t2 is not None and t2.config == c2 and t2.pending_writes == [("task-e", "i", "early")]
    t1 = fresh.get_tuple(c1)
    assert t1 is not None and t1.pending_writes == [("task-l", "i", "late")]


def test_out_of_order_ids_fall_back_to_reading_the_run(tmp_path: Path) -> None:
    """Checkpoint ids that do not rise with the commits (hand-made ids): still exact."""
    url = str(tmp_path / "s")
    saver = CkptfsSaver(url)
    ids = ["3", "1", "2"]
    for cid in ids:
        saver.put(cfg("t"), ckpt({"v": cid}, cid), {}, {"v": 1})
        saver.put_writes(cfg("t", cid=cid), [("v", "w" + cid)], "task")
    saver.flush()  # no put names them as parent: held until now (fold.py)
    fresh = CkptfsSaver(url)
    assert fresh.get_tuple(cfg("t")).checkpoint["id"] == "3"  # type: ignore[union-attr]
    assert [t.checkpoint["id"] for t in fresh.list(cfg("t"))] == ["3", "2", "1"]
    assert fresh.get_tuple(cfg("t", cid="1")).pending_writes == [  # type: ignore[union-attr]
        ("task", "v", "w1")]
