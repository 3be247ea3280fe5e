"""Issue 19: W1 step latency on local disk, link(2) mode vs the filelock fallback, same run.

``python -m bench.local_modes [--n 500] [--rounds 3] [--dir DIR]`` writes
``bench/results/local_modes.md``. W1: one ~1 KB message appended and ``run.checkpoint``-ed
durably per step (bench.data's messages), in a fresh process and a fresh store per (mode,
round); rounds interleave the modes (order swapped every round) so that the machine's load
falls on both alike. ``auto`` is what this machine's probe picks (link(2), O_TMPFILE,
syncfs); ``portable`` is ``CKPTFS_LOCAL_MODE=portable`` (filelock per run folder, named temp
files, fsync per file, lstat-based symlink checks). fsyncs per step: ``os.fsync`` wrapped in
the worker, and the syscalls of one extra run per mode under ``strace -f -c``.

``python -m bench.local_modes worker MODE N DIR`` is the worker (prints one JSON line).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

from bench import common

MODES = ("auto", "portable")
SYSCALLS = ("fsync", "fdatasync", "syncfs", "link", "linkat", "rename", "renameat",
            "renameat2", "flock", "openat", "unlink", "unlinkat")


def worker(mode: str, n: int, path: str) -> dict[str, Any]:
    os.environ["CKPTFS_LOCAL_MODE"] = mode
    import ckptfs
    from bench.data import message

    fsyncs = [0]
    real = os.fsync

    def counting(fd: int) -> None:
        fsyncs[0] += 1
        real(fd)

    os.fsync = counting  # type: ignore[assignment]
    store = ckptfs.open_store(path)
    run = store.start_run("w1")
    msgs: list[dict[str, Any]] = []
    lat: list[float] = []
    start = fsyncs[0]
    cpu0 = time.process_time()
    for i in range(n):
        msgs.append(message(i))
        t0 = time.perf_counter()
        run.checkpoint({"messages": msgs})
        lat.append((time.perf_counter() - t0) * 1000)
    cpu = (time.process_time() - cpu0) * 1000 / n
    feats = store.storage.features  # type: ignore[attr-defined]
    return {"mode": mode, "n": n, "mean_ms": common.mean(lat), "median_ms": common.median(lat),
            "p99_ms": common.pct(lat, 99), "cpu_ms": cpu, "fsync_per_step": (fsyncs[0] - start) / n,
            "create_only": store.storage.capabilities.create_only_how,
            "features": feats.describe()}


def _spawn(mode: str, n: int, path: str, strace_out: str | None = None) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "bench.local_modes", "worker", mode, str(n), path]
    if strace_out is not None:
        cmd = ["strace", "-f", "-c", "-e", "trace=" + ",".join(SYSCALLS), "-o", strace_out, *cmd]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root}
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, cwd=root, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"worker {mode} failed:\n{p.stderr[-4000:]}")
    return dict(json.loads(p.stdout.strip().splitlines()[-1]))


def _strace_counts(path: str) -> dict[str, int]:
    out: dict[str, int] = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 5 and parts[-1] in SYSCALLS and parts[3].isdigit():
                out[parts[-1]] = int(parts[3])
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=500, help="W1 steps per run")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--strace-n", type=int, default=200, help="steps of the strace run")
    ap.add_argument("--dir", default=None, help="where the stores go (a disk, not tmpfs)")
    ap.add_argument("--name", default="local_modes",
                    help="results file: bench/results/NAME.md (python -m bench --quick: "
                         "local_modes-quick)")
    args = ap.parse_args(argv)
    base = tempfile.mkdtemp(prefix="ckptfs-local-modes-", dir=args.dir)
    load0 = os.getloadavg()
    res: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
    try:
        for r in range(args.rounds):
            for mode in (MODES if r % 2 == 0 else MODES[::-1]):
                d = os.path.join(base, f"{mode}-{r}")
                res[mode].append(_spawn(mode, args.n, d))
                shutil.rmtree(d, ignore_errors=True)
        straced: dict[str, dict[str, int]] = {}
        if common.have_strace():
            for mode in MODES:
                d = os.path.join(base, f"strace-{mode}")
                out = os.path.join(base, f"strace-{mode}.txt")
                _spawn(mode, args.strace_n, d, strace_out=out)
                straced[mode] = _strace_counts(out)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    load1 = os.getloadavg()
    fs = subprocess.run(["df", "-T", args.dir or tempfile.gettempdir()], capture_output=True,
                        text=True).stdout.strip().splitlines()[-1:]
    rows = []
    for mode in MODES:
        rs = res[mode]
        rows.append([mode, rs[0]["create_only"], args.n,
                     common.fmt(common.median([x["mean_ms"] for x in rs])),
                     common.fmt(common.median([x["median_ms"] for x in rs])),
                     common.fmt(common.median([x["p99_ms"] for x in rs])),
                     common.fmt(common.median([x["cpu_ms"] for x in rs])),
                     common.fmt(rs[0]["fsync_per_step"]),
                     ", ".join(common.fmt(x["mean_ms"]) for x in rs)])
    ratios = [p["mean_ms"] / a["mean_ms"] for a, p in zip(res["auto"], res["portable"])]
    text = ["# Issue 19: W1 step latency, link(2) mode vs the filelock fallback (same run)\n",
            common.machine_md({"rounds": f"{args.rounds} (interleaved, order swapped every "
                                         "round)",
                               "filesystem of the stores": " ".join(fs[0].split()[:2]) if fs
                               else "?",
                               "load average at start / end": f"{load0[0]:.2f} / {load1[0]:.2f}"}),
            "\nW1: one ~1 KB message appended and checkpointed durably per step, fresh process "
            "and store per run. `auto` = what the probe picks here; `portable` = "
            "`CKPTFS_LOCAL_MODE=portable`.\n\n",
            common.table(["mode", "create-only", "steps", "mean step ms (median of rounds)",
                          "median step ms", "p99 ms", "cpu ms/step", "fsync/step (py)",
                          "mean ms per round"], rows),
            f"\n**Same-run ratio portable / auto (mean step, per round):** "
            f"{', '.join(f'{x:.2f}' for x in ratios)}; median **{common.median(ratios):.2f}**\n"]
    for mode in MODES:
        text.append(f"\nfeatures ({mode}): {res[mode][0]['features']}\n")
    if straced:
        text.append(f"\n## Syscalls per step under `strace -f -c` ({args.strace_n} steps, one run "
                    "per mode; includes opening the store)\n\n")
        names = sorted({k for c in straced.values() for k in c})
        text.append(common.table(["syscall", *MODES],
                                 [[k, *(common.fmt(straced[m].get(k, 0) / args.strace_n)
                                        for m in MODES)] for k in names]))
    else:
        text.append("\nstrace is not available here: syscall counts not measured.\n")
    path = common.write_result(args.name, "".join(text))
    print(path)
    print("".join(text))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        print(json.dumps(worker(sys.argv[2], int(sys.argv[3]), sys.argv[4])))
    else:
        main()
