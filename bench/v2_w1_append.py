"""Issue 14, local disk: W1 through ``run.append`` (the O(change) form) against the floor.

``python -m bench.v2_w1_append [--ns 1000 2000] [--rounds 3] [--profile] [--tag TAG]`` writes
``bench/results/v2_w1_append[-TAG].md``. Per round, interleaved: bench.v2_floor's floor (one
4 KiB file written, fsynced, linked create-only, its folder fsynced) and, for each N, a fresh
process that opens a fresh v2 store and commits N W1 messages one ``run.append("messages",
msg)`` each (durable; messages generated before timing), with one floor step beside every
commit in the same process and folder tree (the ratio's floor: same moment, same disk, same
load). Mean step / mean floor step beside it;
mean step at the largest N / at the smallest; fsyncs per step (wrapped ``os.fsync``). With
``--profile`` one more worker per N runs under cProfile (top entries by cumulative time).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

from bench import common
from bench.data import message
from bench.v2_floor import Floor
from bench.v2_w1 import floor


def worker(n: int, root: str, profile: bool) -> dict[str, Any]:
    import ckptfs

    msgs = [message(i) for i in range(n)]
    store = ckptfs.open_store(root)
    run = store.start_run("w1", schema=("chat", 1))
    run.checkpoint({"messages": []})
    fl = Floor(root + "-floor")  # the floor, one step beside every commit: same moment, disk
    counter = common.FsyncCounter().install()
    prof = cProfile.Profile() if profile else None
    lat, flat = [], []
    try:
        for i, m in enumerate(msgs):
            t0 = time.perf_counter()
            fl.step(i, {})
            flat.append((time.perf_counter() - t0) * 1000)
            if prof is not None and i >= n // 2:
                prof.enable()
            t0 = time.perf_counter()
            run.append("messages", m)
            lat.append((time.perf_counter() - t0) * 1000)
            if prof is not None:
                prof.disable()
    finally:
        counter.uninstall()
        if prof is not None:
            prof.disable()
    out: dict[str, Any] = {"mean_ms": common.mean(lat), "median_ms": common.median(lat),
                           "floor_ms": common.mean(flat),
                           "fsyncs": (counter.count - 2 * n) / n,  # less the floor's 2 a step
                           "last_tenth_ms": common.mean(lat[-max(1, n // 10):])}
    if prof is not None:
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(28)
        out["profile"] = s.getvalue()
    return out


def run_worker(n: int, root: str, profile: bool) -> dict[str, Any]:
    env = {**os.environ, "CKPTFS_FORMAT_VERSION": "2", "PYTHONHASHSEED": "0"}
    p = subprocess.run([sys.executable, "-m", "bench.v2_w1_append", "--worker", str(n), root]
                       + (["--profile"] if profile else []), capture_output=True, text=True,
                       env=env, check=True)
    return dict(json.loads(p.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ns", type=int, nargs="+", default=[1000, 2000])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--floor-steps", type=int, default=400)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--tag", default="")
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        print(json.dumps(worker(int(a.worker[0]), a.worker[1], a.profile)))
        return
    work = tempfile.mkdtemp(prefix="v2w1a-", dir=os.environ.get("BENCH_DIR", "/tmp"))
    load0 = os.getloadavg()
    rows: list[dict[str, Any]] = []
    try:
        for rnd in range(a.rounds):
            fl = floor(a.floor_steps, os.path.join(work, f"floor{rnd}"))
            r: dict[str, Any] = {"floor": fl}
            for n in (a.ns if rnd % 2 == 0 else list(reversed(a.ns))):
                r[n] = run_worker(n, os.path.join(work, f"s{rnd}-{n}"), False)
                print(f"round {rnd} N={n}: {r[n]['mean_ms']:.2f} ms, floor {fl['mean_ms']:.2f}",
                      flush=True)
            rows.append(r)
        profiles = ({n: run_worker(n, os.path.join(work, f"p-{n}"), True)["profile"]
                     for n in a.ns} if a.profile else {})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load1 = os.getloadavg()
    md = report(a, rows, profiles, load0, load1)
    path = common.write_result("v2_w1_append" + (f"-{a.tag}" if a.tag else ""), md)
    print(md)
    print("wrote", path)


def report(a: argparse.Namespace, rows: list[dict[str, Any]], profiles: dict[int, str],
           load0: tuple[float, ...], load1: tuple[float, ...]) -> str:
    f = common.fmt
    lo, hi = min(a.ns), max(a.ns)
    lines = [f"# W1 through run.append vs the floor ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
             "", f"`python -m bench.v2_w1_append --ns {' '.join(map(str, a.ns))} --rounds "
             f"{a.rounds}{' --profile' if a.profile else ''}`; load average {load0[0]:.1f} "
             f"at start, {load1[0]:.1f} at end (2 shared cores). Ratios are per round "
             "(same-run floor), then the median over rounds.", ""]
    head = ["round", "floor ms (alone)"] + [f"N={n} ms (floor beside)" for n in a.ns] + [f"N={n}/floor" for n in a.ns] \
        + [f"N={hi}/N={lo}", "fsyncs/step"]
    table = []
    ratios: dict[Any, list[float]] = {n: [] for n in a.ns}
    ratios["flat"] = []
    for i, r in enumerate(rows):
        fl = r["floor"]["mean_ms"]
        for n in a.ns:
            ratios[n].append(r[n]["mean_ms"] / r[n]["floor_ms"])
        ratios["flat"].append(r[hi]["mean_ms"] / r[lo]["mean_ms"])
        table.append([str(i), f(fl)] + [f"{f(r[n]['mean_ms'])} ({f(r[n]['floor_ms'])})"
                                        for n in a.ns]
                     + [f(ratios[n][-1], 2) for n in a.ns] + [f(ratios["flat"][-1], 2),
                                                             f(r[hi]["fsyncs"], 2)])
    table.append(["median", f(common.median([r["floor"]["mean_ms"] for r in rows]))]
                 + [f(common.median([r[n]["mean_ms"] for r in rows])) for n in a.ns]
                 + [f(common.median(ratios[n]), 2) for n in a.ns]
                 + [f(common.median(ratios["flat"]), 2),
                    f(common.median([r[hi]["fsyncs"] for r in rows]), 2)])
    lines.append(common.table(head, table))
    for n, text in profiles.items():
        lines += ["", f"## cProfile, N={n}, the second half of the steps (cumulative)", "",
                  "```", text.strip(), "```"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
