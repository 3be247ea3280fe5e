"""Issue 14, local disk: W1 direct API, v1 vs v2 vs the floor and the LangGraph savers' peers.

``python -m bench.v2_w1 [--ns 1000 2000] [--rounds 3] [--quick] [--append-msgs 200000]``
writes ``bench/results/v2_w1.md``. One run, one machine, interleaved rounds:

* ``floor``: bench.v2_floor's floor (4 KiB file written, fsynced, linked create-only, folder
  fsynced), probed in every round beside the cases;
* ``ckptfs v1`` / ``ckptfs v2``: ``run.checkpoint({"messages": msgs})`` per appended W1 message
  in a fresh process and a fresh store (``CKPTFS_FORMAT_VERSION`` picks the layout), through
  bench.w1's worker, then a fresh-process restore of the head (bench.w1's restore worker);
* ``SqliteSaver`` and ``SqliteSaver+DeltaChannel`` (bench.peers, driven like the Pregel loop)
  at the same N, for the restore comparison.

fsyncs: wrapped ``os.fsync`` in every run, confirmed once per layout under ``strace -f -c``.
Files and ``du --block-size=4K`` of each store. Medians over rounds.

The append case: one message appended to a state of ``--append-msgs`` messages, committed with
``run.checkpoint`` (the library has no append form yet), v1 vs v2, ms per durable step and a
cProfile of one step (top entries in the results file).
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

from bench import common, w1
from bench.data import message
from bench.v2_floor import Floor

FORMAT_ENV = "CKPTFS_FORMAT_VERSION"


def du4k(path: str) -> int:
    """``du -s --block-size=4K`` of ``path``, in 4 KiB blocks."""
    out = subprocess.run(["du", "-s", "--block-size=4K", path], capture_output=True, text=True,
                         check=True).stdout
    return int(out.split()[0])


def floor(steps: int, root: str) -> dict[str, Any]:
    f = Floor(root)
    counter = common.FsyncCounter().install()
    lat = []
    try:
        for i in range(steps):
            t0 = time.perf_counter()
            f.step(i, {})
            lat.append((time.perf_counter() - t0) * 1000)
    finally:
        counter.uninstall()
    return {"mean_ms": common.mean(lat), "median_ms": common.median(lat),
            "fsyncs": counter.count / steps}


def ckptfs_case(fmt: str, n: int, workdir: str, strace: bool) -> dict[str, Any]:
    os.environ[FORMAT_ENV] = fmt
    try:
        r = w1.measure("ckptfs", n, os.path.join(workdir, f"v{fmt}"), strace=strace)
    finally:
        os.environ.pop(FORMAT_ENV, None)
    path = os.path.join(workdir, f"v{fmt}", f"w1-ckptfs-{n}")
    r["du4k"] = du4k(path)
    return r


def peer_case(peer: str, n: int, workdir: str) -> dict[str, Any]:
    r = w1.measure(peer, n, workdir, strace=False)
    r["du4k"] = du4k(os.path.join(workdir, f"w1-{peer.replace('+', '-')}-{n}"))
    return r


# -- append to a large state -----------------------------------------------------------------
def big_state(n: int) -> list[dict[str, Any]]:
    """``n`` W1 messages, cheaply: 1,000 distinct bodies, every message with its own id."""
    base = [message(i) for i in range(min(n, 1000))]
    return [{**base[i % len(base)], "id": f"msg-0-{i:07d}"} for i in range(n)]


def append_worker(fmt: str, n: int, steps: int, root: str, prof_out: str) -> dict[str, Any]:
    import ckptfs

    msgs = big_state(n)
    store = ckptfs.open_store(root)
    run = store.start_run("big", schema=("chat", 1))
    t0 = time.perf_counter()
    run.checkpoint({"messages": msgs})
    first = time.perf_counter() - t0
    lat, cpu = [], []
    prof = cProfile.Profile()
    counter = common.FsyncCounter().install()
    for i in range(steps):
        msgs.append({**msgs[i], "id": f"new-{i}"})
        if i == steps - 1:
            prof.enable()
        t0, c0 = time.perf_counter(), time.process_time()
        run.checkpoint({"messages": msgs})
        lat.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
    prof.disable()
    counter.uninstall()
    store.close()
    s = io.StringIO()
    st = pstats.Stats(prof, stream=s)
    st.sort_stats("tottime").print_stats(12)
    with open(prof_out, "w") as f:
        f.write(s.getvalue())
    return {"first_s": first, "lat": lat, "cpu": cpu, "fsyncs": counter.count / steps}


def append_case(fmt: str, n: int, steps: int, workdir: str) -> dict[str, Any]:
    root = os.path.join(workdir, f"append-v{fmt}")
    prof = os.path.join(workdir, f"append-v{fmt}.prof.txt")
    env = {**os.environ, FORMAT_ENV: fmt, "PYTHONPATH": _here()}
    p = subprocess.run([sys.executable, "-m", "bench.v2_w1", "--append-worker", fmt, str(n),
                        str(steps), root, prof], capture_output=True, text=True, env=env,
                       cwd=_here(), timeout=3600)
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-3000:])
    out = dict(json.loads(p.stdout.strip().splitlines()[-1]))
    with open(prof) as f:
        out["profile"] = f.read()
    shutil.rmtree(root, ignore_errors=True)
    return out


def _here() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _profile_top(text: str, k: int = 12) -> str:
    lines = text.splitlines()
    for i, ln in enumerate(lines):
        if ln.strip().startswith("ncalls"):
            return "\n".join(lines[i:i + 1 + k])
    return text


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ns", type=int, nargs="+", default=[1000, 2000])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--floor-steps", type=int, default=400)
    ap.add_argument("--append-msgs", type=int, default=200_000)
    ap.add_argument("--append-steps", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="N=200/400, 1 round, 20,000 messages")
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--append-worker", nargs=5, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.append_worker:
        fmt, n, steps, root, prof = a.append_worker
        print(json.dumps(append_worker(fmt, int(n), int(steps), root, prof)))
        return
    if a.quick:
        a.ns, a.rounds, a.append_msgs, a.floor_steps = [200, 400], 1, 20_000, 200
    work = a.dir or tempfile.mkdtemp(prefix="v2w1-", dir="/tmp")
    strace = common.have_strace()
    load0 = os.getloadavg()
    rows: dict[tuple[str, int], list[dict[str, Any]]] = {}
    floors: list[dict[str, Any]] = []
    for rnd in range(a.rounds):
        rw = os.path.join(work, f"r{rnd}")
        floors.append(floor(a.floor_steps, os.path.join(rw, "floor")))
        print(f"round {rnd} floor {floors[-1]['mean_ms']:.2f} ms", flush=True)
        for n in a.ns:
            order = ["1", "2"] if rnd % 2 == 0 else ["2", "1"]
            for fmt in order:
                r = ckptfs_case(fmt, n, rw, strace and rnd == 0 and n == a.ns[0])
                rows.setdefault((f"ckptfs v{fmt}", n), []).append(r)
            if not a.no_peers and n == a.ns[0]:
                for peer in ("SqliteSaver", "SqliteSaver+DeltaChannel"):
                    rows.setdefault((peer, n), []).append(peer_case(peer, n, rw))
        floors.append(floor(a.floor_steps, os.path.join(rw, "floor2")))
        shutil.rmtree(rw, ignore_errors=True)
    load1 = os.getloadavg()
    appends = {}
    for fmt in ("1", "2"):
        appends[fmt] = append_case(fmt, a.append_msgs, a.append_steps, work)
        print(f"append v{fmt}: {common.median(appends[fmt]['lat']):.1f} ms", flush=True)
    load2 = os.getloadavg()
    md = report(a, rows, floors, appends, (load0, load1, load2))
    path = common.write_result("v2_w1" + ("-quick" if a.quick else ""), md)
    with open(os.path.join(common.RESULTS, "v2_w1" + ("-quick" if a.quick else "") + ".json"),
              "w") as f:
        json.dump({"rows": {f"{k[0]}@{k[1]}": v for k, v in rows.items()},
                   "floors": floors,
                   "append": {k: {kk: vv for kk, vv in v.items() if kk != "profile"}
                              for k, v in appends.items()}}, f, indent=1)
    if a.dir is None:
        shutil.rmtree(work, ignore_errors=True)
    print(md)
    print("wrote", path)


def med(rs: list[dict[str, Any]], key: str) -> float:
    vals = [r[key] for r in rs if r.get(key) is not None]
    return common.median(vals) if vals else float("nan")


def report(a: argparse.Namespace, rows: dict[tuple[str, int], list[dict[str, Any]]],
           floors: list[dict[str, Any]], appends: dict[str, dict[str, Any]],
           loads: tuple[tuple[float, ...], ...]) -> str:
    f = common.fmt
    fl = common.median([x["mean_ms"] for x in floors])
    head = ["case", "N", "mean step ms (median of rounds)", "mean / floor", "cpu ms",
            "fsync/step (py)", "fsync/step (strace)", "files", "files/step", "du 4K blocks",
            "du 4K blocks/step", "fresh-process restore ms"]
    body = []
    for (case, n), rs in rows.items():
        m = med(rs, "mean_ms")
        st = [r["sys_fsyncs_per_ckpt"] for r in rs if "sys_fsyncs_per_ckpt" in r]
        body.append([case, n, f(m), f(m / fl), f(med(rs, "cpu_ms")), f(med(rs, "py_fsyncs_per_ckpt"), 2),
                     f(st[0], 2) if st else "-", f(med(rs, "files"), 0),
                     f(med(rs, "files") / n, 2), f(med(rs, "du4k"), 0),
                     f(med(rs, "du4k") / n, 2), f(med(rs, "restore_ms"))])
    n1, n2 = a.ns[0], a.ns[-1]
    tg = []
    for v in ("v1", "v2"):
        r1, r2 = rows.get((f"ckptfs {v}", n1)), rows.get((f"ckptfs {v}", n2))
        if r1:
            ratio = med(r1, "mean_ms") / fl
            tg.append([f"{v}: mean durable step / floor at N={n1} <= 3", f(ratio), common.verdict(ratio, 3)])
            fs = med(r1, "py_fsyncs_per_ckpt")
            tg.append([f"{v}: fsyncs per step <= 2", f(fs, 2), common.verdict(fs, 2)])
        if r1 and r2 and n2 != n1:
            g = med(r2, "mean_ms") / med(r1, "mean_ms")
            tg.append([f"{v}: mean step N={n2} / N={n1} <= 1.1", f(g), common.verdict(g, 1.1)])
        sq = rows.get(("SqliteSaver", n1))
        if r1 and sq:
            rr = med(r1, "restore_ms") / med(sq, "restore_ms")
            tg.append([f"{v}: fresh-process restore / SqliteSaver's <= 1.0", f(rr),
                       common.verdict(rr, 1.0)])
    ap_rows = []
    for fmt, r in appends.items():
        ms = common.median(r["lat"])
        ap_rows.append([f"ckptfs v{fmt}", f"{a.append_msgs:,}", f(r["first_s"], 2), f(ms),
                        f(common.median(r["cpu"])), f(r["fsyncs"], 2)])
        tg.append([f"v{fmt}: append one message to a {a.append_msgs:,}-message state <= 20 ms",
                   f(ms), common.verdict(ms, 20)])
    lines = ["# Issue 14, local: W1 direct API, v1 vs v2 vs the floor (same run)", "",
             common.machine_md({
                 "rounds": str(a.rounds) + " (interleaved; v1/v2 order swapped every round)",
                 "load average (1/5/15 min) at start": " / ".join(f"{x:.2f}" for x in loads[0]),
                 "load average after W1 rounds": " / ".join(f"{x:.2f}" for x in loads[1]),
                 "load average after append case": " / ".join(f"{x:.2f}" for x in loads[2])}),
             f"Floor (bench/v2_floor.py's, {a.floor_steps} steps, probed twice per round): "
             f"median of round means **{f(fl)} ms** (all: "
             + ", ".join(f(x["mean_ms"]) for x in floors) + f"), {f(floors[0]['fsyncs'], 1)} fsyncs.",
             "", "Every ckptfs and peer case runs in a fresh process (bench.w1's workers) on a fresh "
             "store; restore = fresh process, fresh store object, full head state (median of 5). "
             "Values are medians over rounds.", "", common.table(head, body),
             "## Targets", "", common.table(["target (issue 14)", "measured", "verdict"], tg),
             "## Append one message to a large state (`run.checkpoint` of the whole list)", "",
             common.table(["layout", "messages", "first commit s", "ms per durable step (median)",
                           "cpu ms", "fsync/step"], ap_rows)]
    for fmt, r in appends.items():
        lines += [f"cProfile of one append step, v{fmt} (tottime, top entries):", "", "```",
                  _profile_top(r["profile"]), "```", ""]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
