"""Issue 36's side-by-side: W1 through LangGraph with CkptfsSaver, SqliteSaver and
DeltaChannel + SqliteSaver, at N = 200, 1000 and 5000 supersteps, under ``durability="sync"``
and the default ``"async"``, through the sync API (``invoke``) and the async one (``ainvoke``
with the async savers: CkptfsSaver's async twins, ``AsyncSqliteSaver``).

``none`` runs the same graph with no checkpointer: LangGraph's own cost per step, which grows
with N by itself (``add_messages`` merges the whole list every step), so that a saver's own
time is its step minus that one (the "saver ms" columns).

Each case runs in a fresh process (``bench/langgraph_w1.py``'s graph: one ~1 KB AIMessage per
superstep, one thread): step = time between consecutive node runs (includes the checkpoint),
mean over all steps and over the first and last 100; bytes passed to write calls per step
(``/proc/self/io`` ``wchar``, the process's own); then, in another fresh process, the time to
open the saver and ``get_state`` (``aget_state`` for the async API) the thread, imports
excluded; the store's size on disk; and, in a separate untimed run under ``strace -f -c``, the
fsync-family calls per superstep. Plain SqliteSaver writes the whole state every step (571 MB at
N = 1000): it is left out at N = 5000 (about 14 GB).

    python -m bench.langgraph_matrix            # N = 200, 1000, 5000: writes langgraph_matrix.md
    python -m bench.langgraph_matrix --quick    # N = 200, 1000 (the issue's figures), minutes

One run of each case on a shared machine: compare ratios within the run, and the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import langgraph_w1 as w1  # noqa: E402
from bench.common import have_strace, machine_md, strace_syncs  # noqa: E402

SAVERS = {"ckptfs": "CkptfsSaver", "ckptfs-id": 'CkptfsSaver(appends="identity")',
          "ckptfs-delta": "DeltaChannel + CkptfsSaver",
          "sqlite": "SqliteSaver", "delta": "DeltaChannel + SqliteSaver",
          "none": "no checkpointer (LangGraph alone)"}
#: the graph with its messages in a DeltaChannel
DELTA = ("delta", "ckptfs-delta")
#: plain SqliteSaver above this N: skipped (it stores the whole history every step)
SQLITE_MAX_N = 1000


def _wchar() -> int:
    try:
        for line in Path("/proc/self/io").read_text().splitlines():
            if line.startswith("wchar:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _saver(kind: str, where: Path, api: str) -> Any:
    """A saver (sync API) or an async context manager giving one (async API)."""
    if kind.startswith("ckptfs"):
        from ckptfs.integrations.langgraph import CkptfsSaver

        how = {"appends": "identity"} if kind == "ckptfs-id" else {}
        return (CkptfsSaver.from_url(str(where), **how) if api == "async"
                else CkptfsSaver(str(where), **how))
    if api == "async":
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        return AsyncSqliteSaver.from_conn_string(str(where))
    from langgraph.checkpoint.sqlite import SqliteSaver

    return SqliteSaver(sqlite3.connect(str(where), check_same_thread=False))


def _close(kind: str, saver: Any) -> None:
    if kind.startswith("ckptfs"):
        saver.close()
    else:
        saver.conn.close()


def run_case(kind: str, where: Path, n: int, durability: str, api: str) -> dict[str, Any]:
    """Run the graph (in this process); step times and bytes written."""
    stamps: list[float] = []
    config: Any = {"configurable": {"thread_id": "w1"}, "recursion_limit": n + 10}
    graph = w1.build(n, stamps, kind in DELTA)
    inputs = {"messages": [], "n": 0}
    w0 = _wchar()
    # no checkpointer ("none"): LangGraph alone, where durability does not apply
    how: dict[str, Any] = {} if kind == "none" else {"durability": durability}
    if api == "async":
        async def go() -> float:
            async with (contextlib.nullcontext(None) if kind == "none"
                        else _saver(kind, where, api)) as saver:
                app = graph.compile(checkpointer=saver)
                t0 = time.perf_counter()
                await app.ainvoke(inputs, config, **how)
                stamps.append(time.perf_counter())
                return t0
        t0 = asyncio.run(go())
    else:
        saver = None if kind == "none" else _saver(kind, where, api)
        app = graph.compile(checkpointer=saver)
        t0 = time.perf_counter()
        app.invoke(inputs, config, **how)
        stamps.append(time.perf_counter())
        if saver is not None:
            _close(kind, saver)
    written = _wchar() - w0
    steps = [b - a for a, b in zip(stamps, stamps[1:])]
    return {"total_s": stamps[-1] - t0, "step_ms": (stamps[-1] - t0) / n * 1e3,
            "first100_ms": statistics.mean(steps[:100]) * 1e3,
            "last100_ms": statistics.mean(steps[-100:]) * 1e3,
            "wchar_per_step": written / (n + 1)}


def load_case(kind: str, where: Path, n: int, api: str) -> float:
    """Seconds to open the saver and get the thread's state (in this process)."""
    graph = w1.build(n, [], kind in DELTA)
    config: Any = {"configurable": {"thread_id": "w1"}}
    if api == "async":
        async def go() -> tuple[float, Any]:
            t1 = time.perf_counter()
            async with _saver(kind, where, api) as saver:
                values = (await graph.compile(checkpointer=saver).aget_state(config)).values
                return time.perf_counter() - t1, values
        secs, values = asyncio.run(go())
    else:
        t1 = time.perf_counter()
        saver = _saver(kind, where, api)
        values = graph.compile(checkpointer=saver).get_state(config).values
        secs = time.perf_counter() - t1
        _close(kind, saver)
    assert len(values["messages"]) == n, len(values["messages"])
    return secs


def _own(r: dict[str, Any], alone: dict[str, Any] | None
         ) -> tuple[float, float, float] | None:
    """A case's own time per step (mean, first 100, last 100): its step minus LangGraph's
    alone (``none``) at the same N and API; None when ``none`` was not run."""
    if alone is None:
        return None
    return (r["step_ms"] - alone["step_ms"], r["first100_ms"] - alone["first100_ms"],
            r["last100_ms"] - alone["last100_ms"])


def _num(r: dict[str, Any], key: str, places: int) -> str:
    return f"{r[key]:.{places}f}" if key in r else "–"


def _child(*args: str, strace: Path | None = None) -> str:
    cmd = [sys.executable, "-m", "bench.langgraph_matrix", "--child", *args]
    if strace is not None:
        cmd = ["strace", "-f", "-c", "-e", "trace=fsync,fdatasync,sync_file_range", "-o",
               str(strace), *cmd]
    out = subprocess.run(cmd, capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parent.parent)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{out.stderr[-3000:]}")
    return out.stdout.strip().splitlines()[-1]


def _size(where: Path) -> int:
    total = 0
    for p in where.parent.glob(where.name + "*"):  # sqlite's -wal/-shm too
        files = [p] if p.is_file() else [q for q in p.rglob("*") if q.is_file()]
        total += sum(q.stat().st_size for q in files)
    return total


def case(kind: str, scratch: Path, n: int, durability: str, api: str,
         fsyncs: bool) -> dict[str, Any]:
    where = scratch / f"{kind}-{n}-{durability}-{api}"
    where = where if kind.startswith("ckptfs") else where.with_suffix(".db")
    args = [kind, str(where), str(n), durability, api]
    r: dict[str, Any] = json.loads(_child("run", *args))
    if kind == "none":
        return r
    r["load_ms"] = float(_child("load", *args)) * 1e3
    r["store_mb"] = _size(where) / 1e6
    if fsyncs:
        traced = scratch / f"traced-{where.name}"
        out = scratch / f"{where.name}.strace"
        _child("run", kind, str(traced), str(n), durability, api, strace=out)
        r["fsyncs_per_step"] = strace_syncs(str(out)) / (n + 1)
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="*", default=None)
    ap.add_argument("--quick", action="store_true", help="N = 200 and 1000 only")
    ap.add_argument("--durability", nargs="*", default=["sync", "async"])
    ap.add_argument("--api", nargs="*", default=["sync", "async"])
    ap.add_argument("--savers", nargs="*", default=list(SAVERS), choices=list(SAVERS),
                    help="the savers to run (default: all)")
    ap.add_argument("--no-fsyncs", action="store_true", help="skip the strace runs")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--child", nargs="+")
    args = ap.parse_args()
    if args.child:
        mode, kind, where, n, durability, api = args.child
        if mode == "run":
            print(json.dumps(run_case(kind, Path(where), int(n), durability, api)))
        else:
            print(load_case(kind, Path(where), int(n), api))
        return
    ns = args.n or ([200, 1000] if args.quick else [200, 1000, 5000])
    fsyncs = not args.no_fsyncs and have_strace()
    out = Path(args.out or Path(__file__).parent / "results" /
               f"langgraph_matrix{'-quick' if args.quick else ''}.md")
    scratch = Path(args.dir or tempfile.mkdtemp(prefix="lg-matrix-"))
    scratch.mkdir(parents=True, exist_ok=True)
    load = [os.getloadavg()[0]]
    started = time.time()
    rows: list[tuple[int, str, str, str, dict[str, Any]]] = []
    alone: dict[tuple[int, str], dict[str, Any]] = {}
    try:
        for n in ns:
            for durability in args.durability:
                for api in args.api:
                    for kind in args.savers:
                        if kind == "sqlite" and n > SQLITE_MAX_N:
                            continue
                        if kind == "none" and (n, api) in alone:  # durability: no effect
                            r = alone[(n, api)]
                        else:
                            r = case(kind, scratch, n, durability, api, fsyncs)
                            if kind == "none":
                                alone[(n, api)] = r
                        rows.append((n, durability, api, kind, r))
                        print(n, durability, api, kind, json.dumps(r), flush=True)
    finally:
        if args.dir is None:
            shutil.rmtree(scratch, ignore_errors=True)
    load.append(os.getloadavg()[0])
    minutes = (time.time() - started) / 60
    cmd = " ".join(["python -m bench.langgraph_matrix", *sys.argv[1:]])
    lines = [
        "# LangGraph W1 side by side: CkptfsSaver, SqliteSaver, DeltaChannel + SqliteSaver",
        "", f"Command: `{cmd}` ({minutes:.1f} min). One ~1 KB AIMessage per superstep, one "
        "thread, one run of each case in a fresh process; step = mean time between node runs "
        "(includes the checkpoint); first/last 100 = the mean over those steps; load = open the "
        "saver and get the state in a fresh process (imports excluded); wchar = bytes passed to "
        "write calls per superstep (the process's own); fsyncs = fsync-family calls per "
        "superstep (strace, a separate untimed run). Plain SqliteSaver is left out above "
        f"N = {SQLITE_MAX_N} (it stores the whole state every step). Shared 2-core machine: "
        "compare ratios within this run.", "",
        machine_md({"load average (1 min) at start / end": f"{load[0]:.2f} / {load[1]:.2f}"}),
        "", "The saver's own time is its step minus LangGraph's alone (the `none` row of the "
        "same N and API): `saver first/last` are those over the first and last 100 steps.", "",
        "| N | durability | API | saver | step ms | first100 ms | last100 ms | "
        "last/first | saver first/last ms | saver last/first | fresh get_state ms | store MB | "
        "wchar KB/step | fsyncs/step |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    by = {(n, d, a, k): r for n, d, a, k, r in rows}
    for n, durability, api, kind, r in rows:
        own = _own(r, alone.get((n, api)))
        lines.append(
            f"| {n} | {durability} | {api} | {SAVERS[kind]} | {r['step_ms']:.2f} | "
            f"{r['first100_ms']:.2f} | {r['last100_ms']:.2f} | "
            f"{r['last100_ms'] / r['first100_ms']:.2f} | "
            + (f"{own[1]:.2f} / {own[2]:.2f} | {own[2] / own[1]:.2f} | "
               if own is not None and kind != "none" else "– | – | ")
            + f"{_num(r, 'load_ms', 1)} | {_num(r, 'store_mb', 2)} | "
            f"{r['wchar_per_step'] / 1e3:.1f} | {_num(r, 'fsyncs_per_step', 2)} |")
    lines += ["", "CkptfsSaver over the others, same run (issue 36's goals: step <= 1.0x "
              "DeltaChannel's, last100/first100 <= 1.1, fresh get_state <= 1.0x both, store "
              "<= 0.5x DeltaChannel's); `saver step` is the ratio of the savers' own times:", "",
              "| N | durability | API | saver over | step | saver step | last100 | "
              "fresh get_state | store | fsyncs/step |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for (n, d, a, k), r in by.items():
        for mine in ("ckptfs", "ckptfs-id", "ckptfs-delta"):
            ck = by.get((n, d, a, mine))
            if k.startswith("ckptfs") or k == "none" or ck is None:
                continue
            fs = (f"{ck['fsyncs_per_step']:.2f} vs {r['fsyncs_per_step']:.2f}"
                  if "fsyncs_per_step" in r and "fsyncs_per_step" in ck else "n/a")
            mine_own, their_own = _own(ck, alone.get((n, a))), _own(r, alone.get((n, a)))
            saver = (f"{mine_own[0] / their_own[0]:.2f}" if mine_own and their_own
                     and their_own[0] > 0 else "–")
            lines.append(f"| {n} | {d} | {a} | {SAVERS[mine]} over {SAVERS[k]} | "
                         f"{ck['step_ms'] / r['step_ms']:.2f} | {saver} | "
                         f"{ck['last100_ms'] / r['last100_ms']:.2f} | "
                         f"{ck['load_ms'] / r['load_ms']:.2f} | "
                         f"{ck['store_mb'] / r['store_mb']:.2f} | {fs} |")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
