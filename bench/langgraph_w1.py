"""W1 through LangGraph: one ~1 KB message appended per step, CkptfsSaver vs SqliteSaver.

Savers (one run, same machine load, so compare ratios): CkptfsSaver with its O(change) list
channels and its writes folded into the next checkpoint's record (default),
CkptfsSaver(fold_writes=False) (a record per put_writes too), CkptfsSaver(appends=False)
(every message packed each step: the saver before issue 14's LangGraph part), SqliteSaver, and SqliteSaver with the messages in a
``DeltaChannel`` (``_messages_delta_reducer``, snapshot_frequency 100) when the installed
langgraph has it.

A one-node graph loops N times on one thread (one superstep, one checkpoint and one pending
write per step, ``durability="sync"`` so each step waits for its checkpoint). Measured: bytes on
disk at the end, per-step latency (p50/p95/p99, first and last 100 steps), and the time to load
the final state in a fresh process. Writes ``bench/results/langgraph_w1.md``.

    python bench/langgraph_w1.py [--n 1000] [--dir /tmp/x] [--out bench/results/langgraph_w1.md]
    python bench/langgraph_w1.py --durability async --out bench/results/langgraph_w1_async.md

``--durability async`` (LangGraph's default) lets writes land after the next checkpoint: the
load time then shows whether the saver's fast lookup path survives it (issue 17).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from ckptfs.integrations.langgraph import CkptfsSaver

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import have_strace, machine_md, strace_syncs  # noqa: E402
from bench.lg_store_parts import parts_md  # noqa: E402

WORDS = ("agent tool call result plan step memory context token model user reply search file "
         "read write summary error retry approve budget cost latency store snapshot").split()


class State(TypedDict):
    messages: Annotated[list[Any], add_messages]
    n: int


try:  # DeltaChannel is beta, in langgraph >= 1.2
    from langgraph.channels.delta import DeltaChannel
    from langgraph.graph.message import _messages_delta_reducer

    class DeltaState(TypedDict):
        messages: Annotated[list[Any], DeltaChannel(_messages_delta_reducer)]
        n: int
except ImportError:
    DeltaState = None  # type: ignore[assignment,misc]


def delta_state() -> Any:
    """The State with messages in a DeltaChannel (None: this langgraph has none)."""
    return DeltaState


def message(i: int, rng: random.Random) -> AIMessage:
    text = " ".join(rng.choice(WORDS) for _ in range(150))[:1000]
    return AIMessage(f"{i:06d} {text}", id=f"msg-{i}")


def build(n: int, stamps: list[float], delta: bool = False) -> StateGraph[State]:
    rng = random.Random(1)

    def step(state: Any) -> dict[str, Any]:
        stamps.append(time.perf_counter())
        i = state["n"]
        return {"messages": [message(i, rng)], "n": i + 1}

    g = StateGraph(delta_state() if delta else State)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s["n"] < n else END)
    return g


def disk(path: Path) -> tuple[int, int, int]:
    """(files, apparent bytes, allocated bytes) under ``path`` (a file or a tree)."""
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    st = [p.stat() for p in files]
    return len(files), sum(s.st_size for s in st), sum(s.st_blocks * 512 for s in st)


DURABILITY = ["sync"]
#: result name -> make_saver kind
KIND: dict[str, str] = {}


def run(name: str, make: Callable[[], BaseCheckpointSaver[Any]], n: int,
        where: Path) -> dict[str, Any]:
    stamps: list[float] = []
    saver = make()
    app = build(n, stamps, "Delta" in name).compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": "w1"}, "recursion_limit": n + 10}
    t0 = time.perf_counter()
    app.invoke({"messages": [], "n": 0}, config, durability=DURABILITY[0])  # type: ignore[arg-type]
    total = time.perf_counter() - t0
    stamps.append(t0 + total)
    steps = [b - a for a, b in zip(stamps, stamps[1:])]
    if isinstance(saver, SqliteSaver):
        saver.conn.close()
    elif isinstance(saver, CkptfsSaver):
        saver.close()
    load = load_in_fresh_process(KIND[name], where, n)
    files, apparent, allocated = (0, 0, 0)
    for p in where.parent.glob(where.name + "*"):  # sqlite's -wal/-shm too
        f, a, b = disk(p)
        files, apparent, allocated = files + f, apparent + a, allocated + b
    q = statistics.quantiles(steps, n=100)
    return {"saver": name, "steps": len(steps), "total_s": total, "p50_ms": q[49] * 1e3,
            "p95_ms": q[94] * 1e3, "p99_ms": q[98] * 1e3,
            "first100_ms": statistics.mean(steps[:100]) * 1e3,
            "last100_ms": statistics.mean(steps[-100:]) * 1e3, "load_ms": load * 1e3,
            "files": files, "apparent_mb": apparent / 1e6, "allocated_mb": allocated / 1e6}


def make_saver(kind: str, where: Path) -> BaseCheckpointSaver[Any]:
    if kind.startswith("Ckptfs"):
        return CkptfsSaver(str(where), appends=kind != "CkptfsFull",
                           fold_writes=kind != "CkptfsNoFold")
    return SqliteSaver(sqlite3.connect(str(where), check_same_thread=False))


def load_latest(kind: str, where: Path, n: int) -> float:
    """Seconds to open the saver and ``get_state`` the thread (in this process)."""
    t1 = time.perf_counter()
    fresh = make_saver(kind, where)
    values = build(n, [], "Delta" in kind).compile(checkpointer=fresh).get_state(
        {"configurable": {"thread_id": "w1"}}).values
    load = time.perf_counter() - t1
    assert len(values["messages"]) == n
    return load


def write_only(kind: str, where: Path, n: int) -> None:
    """Run the graph once into ``where`` (no timing): what ``--fsyncs`` traces."""
    saver = make_saver(kind, where)
    app = build(n, [], "Delta" in kind).compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": "w1"}, "recursion_limit": n + 10}
    app.invoke({"messages": [], "n": 0}, config, durability=DURABILITY[0])  # type: ignore[arg-type]
    if isinstance(saver, SqliteSaver):
        saver.conn.close()
    elif isinstance(saver, CkptfsSaver):
        saver.close()


def fsyncs(kind: str, where: Path, n: int) -> int:
    """fsync-family calls (fsync, fdatasync, sync_file_range) of ``write_only`` in a fresh
    process under ``strace -f -c``; imports and the interpreter's start make none."""
    out = where.parent / f"{where.name}.strace"
    subprocess.run(["strace", "-f", "-c", "-e", "trace=fsync,fdatasync,sync_file_range", "-o",
                    str(out), sys.executable, __file__, "--write", kind, str(where), "--n",
                    str(n), "--durability", DURABILITY[0]], capture_output=True, check=True)
    return strace_syncs(str(out))


def load_in_fresh_process(kind: str, where: Path, n: int) -> float:
    """``load_latest`` in a new Python process (imports excluded), as a restarted agent sees it."""
    out = subprocess.run([sys.executable, __file__, "--load", kind, str(where), "--n", str(n)],
                         capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "langgraph_w1.md"))
    ap.add_argument("--durability", choices=("sync", "async", "exit"), default="sync")
    ap.add_argument("--load", nargs=2, metavar=("SAVER", "PATH"),
                    help="only time loading the latest state of PATH; print seconds")
    ap.add_argument("--write", nargs=2, metavar=("SAVER", "PATH"),
                    help="only run the graph into PATH (what --fsyncs traces)")
    ap.add_argument("--fsyncs", action="store_true",
                    help="also count fsync-family calls per superstep of each saver with "
                         "strace, in separate untimed runs")
    args = ap.parse_args()
    DURABILITY[0] = args.durability
    if args.load:
        print(load_latest(args.load[0], Path(args.load[1]), args.n))
        return
    if args.write:
        write_only(args.write[0], Path(args.write[1]), args.n)
        return
    load = [os.getloadavg()[0]]
    scratch = Path(args.dir or tempfile.mkdtemp(prefix="lg-w1-"))
    scratch.mkdir(parents=True, exist_ok=True)
    results = []
    cases = [("CkptfsSaver (local dir)", "Ckptfs", "ckptfs-store"),
             ("CkptfsSaver fold_writes=False", "CkptfsNoFold", "ckptfs-nofold"),
             ("CkptfsSaver appends=False (before)", "CkptfsFull", "ckptfs-full"),
             ("SqliteSaver (file)", "Sqlite", "sqlite.db")]
    if delta_state() is not None:
        cases.append(("DeltaChannel + SqliteSaver", "DeltaSqlite", "delta-sqlite.db"))
    syncs: dict[str, int] = {}
    parts: list[str] = []
    try:
        for name, kind, where in cases:
            KIND[name] = kind
            path = scratch / where
            results.append(run(name, lambda: make_saver(kind, path), args.n, path))
            if kind == "Ckptfs":
                parts = parts_md(path)
        if args.fsyncs and have_strace():
            for name, kind, where in cases:
                syncs[name] = fsyncs(kind, scratch / f"traced-{where}", args.n)
    finally:
        if args.dir is None:
            shutil.rmtree(scratch, ignore_errors=True)
    load.append(os.getloadavg()[0])
    cols = ["saver", "steps", "total_s", "p50_ms", "p95_ms", "p99_ms", "first100_ms",
            "last100_ms", "load_ms", "files", "apparent_mb", "allocated_mb"]
    lines = [
        "# W1 through LangGraph: CkptfsSaver (appends on and off) vs SqliteSaver (and DeltaChannel)",
        "",
        f"One ~1 KB AIMessage appended per superstep, N = {args.n}, one thread, "
        f"`durability=\"{args.durability}\"`; step = time between consecutive node runs (includes the "
        "checkpoint); load = open the saver and `get_state` in a fresh process (imports excluded). Machine: shared 2-core box "
        f"(noisy; compare ratios). Command: `python bench/langgraph_w1.py --n {args.n} --durability {args.durability}`.",
        "",
        machine_md({"load average (1 min) at start / end": f"{load[0]:.2f} / {load[1]:.2f}"}),
        "",
        "| " + " | ".join(cols) + " |",
        "|" + "---|" * len(cols),
    ]
    for r in results:
        lines.append("| " + " | ".join(f"{r[c]:.2f}" if isinstance(r[c], float) else str(r[c])
                                       for c in cols) + " |")
    by = {r["saver"]: r for r in results}
    ck, sq = by["CkptfsSaver (local dir)"], by["SqliteSaver (file)"]
    lines += ["", "Same-run ratios (CkptfsSaver over the other; step = mean over all steps, "
              "`total_s / steps`):", "",
              "| vs | step | p50 | last100 | store (apparent) | store (allocated) | "
              "fresh get_state |", "|---|---|---|---|---|---|---|"]
    for r in results:
        if r is ck:
            continue
        lines.append(f"| {r['saver']} | {ck['total_s'] / r['total_s']:.2f} | "
                     f"{ck['p50_ms'] / r['p50_ms']:.2f} | "
                     f"{ck['last100_ms'] / r['last100_ms']:.2f} | "
                     f"{ck['apparent_mb'] / r['apparent_mb']:.2f} | "
                     f"{ck['allocated_mb'] / r['allocated_mb']:.2f} | "
                     f"{ck['load_ms'] / r['load_ms']:.2f} |")
    lines += ["", f"Storage ratio SqliteSaver / CkptfsSaver: "
              f"{sq['apparent_mb'] / ck['apparent_mb']:.0f}x apparent, "
              f"{sq['allocated_mb'] / ck['allocated_mb']:.0f}x allocated.", ""]
    if syncs:
        # the graph runs n supersteps of the node, plus the input checkpoint's
        lines += ["fsync-family calls (strace -f -c, a separate untimed run of each saver; "
                  f"{args.n + 1} checkpoints):", "", "| saver | calls | per superstep |",
                  "|---|---|---|"]
        lines += [f"| {k} | {v} | {v / (args.n + 1):.2f} |" for k, v in syncs.items()]
        lines.append("")
    if parts:
        lines += parts + [""]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
