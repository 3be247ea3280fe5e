"""Run the benchmarks: ``python -m bench`` (full) or ``python -m bench --quick`` (minutes).

One script per workload: w1 (a growing conversation, local disk, against SqliteSaver, its
DeltaChannel and pickle+fsync), w2 (a large blob against ``cp``/``cat``), w3 (S3 on moto
against plain PUTs), w4 (many runs sharing a prompt), langgraph (W1 through a LangGraph graph,
CkptfsSaver against SqliteSaver; ``langgraph_w1.py``), append_step, local_modes,
langgraph_crash_window and langgraph_s3_requests (each its own script, see SCRIPTS).
Every figure README.md and docs/ quote comes from these results.

Results go to ``bench/results/<workload>[-quick].md`` with PNG plots beside them. Each
workload uses a fresh directory under ``--workdir``; nothing is deleted until the very end
(file deletion slows later file creation on these machines: DESIGN.md, benchmarking traps).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

if __package__ in (None, ""):  # ``python bench/run.py``
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common  # noqa: E402

#: workloads run by a script of their own: name -> (arguments, arguments with --quick, result
#: file the script writes itself, or None: its stdout becomes bench/results/<name>.md)
SCRIPTS: dict[str, tuple[list[str], list[str], str | None]] = {
    "append_step": (["-m", "bench.append_step", "--n", "200000", "--steps", "20"],
               ["-m", "bench.append_step", "--n", "50000", "--steps", "5"], None),
    "local_modes": (["-m", "bench.local_modes", "--n", "500", "--rounds", "3"],
                    ["-m", "bench.local_modes", "--n", "100", "--rounds", "1", "--name",
                     "local_modes-quick"], "local_modes"),
    "langgraph_crash_window": (["bench/langgraph_crash_window.py", "--random", "--trials", "20"],
                     ["bench/langgraph_crash_window.py", "--random", "--trials", "5"], None),
    "langgraph_s3_requests": (["bench/langgraph_s3_requests.py", "--turns", "10", "100", "300"],
                       ["bench/langgraph_s3_requests.py", "--turns", "10", "50"], None),
    "langgraph_matrix": (["-m", "bench.langgraph_matrix"],
                         ["-m", "bench.langgraph_matrix", "--quick"], "langgraph_matrix"),
}
TITLES = {
    "append_step": "One message appended to a 200,000-message state, per durable step "
              "(bench/append_step.py)",
    "langgraph_crash_window": "LangGraph: how often a tool's side effect runs again after a SIGKILL "
                    "(bench/langgraph_crash_window.py --random)",
    "langgraph_s3_requests": "LangGraph on S3 (moto): storage calls per user turn and for a fresh "
                      "get_state (bench/langgraph_s3_requests.py)",
    "langgraph_matrix": "LangGraph W1 side by side at N = 200, 1000, 5000: CkptfsSaver, "
                        "SqliteSaver, DeltaChannel (bench/langgraph_matrix.py)",
}
WORKLOADS = ("w1", "w2", "w3", "w4", "langgraph", *SCRIPTS)


def _langgraph(workdir: str, *, quick: bool) -> None:
    """W1 through a LangGraph graph (bench/langgraph_w1.py), durability sync then async, each
    in a fresh process; writes ``langgraph_w1-sync[-quick].md`` and ``-async``."""
    import subprocess

    n = 200 if quick else 1000
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "langgraph_w1.py")
    for durability in ("sync", "async"):
        out = os.path.join(common.RESULTS,
                           f"langgraph_w1-{durability}{'-quick' if quick else ''}.md")
        subprocess.run([sys.executable, script, "--n", str(n), "--durability", durability,
                        "--fsyncs", "--dir", os.path.join(workdir, durability), "--out", out],
                       check=True)


def _script(name: str, *, quick: bool) -> None:
    """Run a script workload in a fresh process from the repository root (see SCRIPTS)."""
    import subprocess

    full, short, writes = SCRIPTS[name]
    argv = short if quick else full
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [root, *filter(None, [os.environ.get("PYTHONPATH")])])}
    load0 = os.getloadavg()[0]
    if writes is not None:
        subprocess.run([sys.executable, *argv], check=True, cwd=root, env=env)
        return
    out = subprocess.run([sys.executable, *argv], check=True, cwd=root, env=env,
                         stdout=subprocess.PIPE, text=True).stdout  # stderr: to the console
    text = (f"# {TITLES.get(name, name)}\n\n"
            + common.machine_md({"mode": "quick" if quick else "full",
                                 "command": "`python " + " ".join(argv) + "`",
                                 "load average (1 min) at start": f"{load0:.2f}"})
            + "\n" + out)
    print(text)
    common.write_result(name + ("-quick" if quick else ""), text)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="smaller sizes, a few minutes")
    ap.add_argument("--only", default=",".join(WORKLOADS),
                    help="comma-separated workloads to run (default: all)")
    ap.add_argument("--workdir", default=None,
                    help="where stores are written (default: a new directory under "
                         "./.bench-work, on the same disk as the repo)")
    ap.add_argument("--keep", action="store_true", help="keep the stores afterwards")
    ap.add_argument("--rounds", type=int, default=None,
                    help="W1 rounds, best per peer and N kept (default: 1 quick, 2 full)")
    ap.add_argument("--n", default=None, help="W1 step counts, e.g. 100,500,1000,2000")
    args = ap.parse_args(argv)
    only = [w.strip() for w in args.only.split(",") if w.strip()]
    for w in only:
        if w not in WORKLOADS:
            ap.error(f"unknown workload {w!r}; choose from {', '.join(WORKLOADS)}")
    base = args.workdir or os.path.join(os.getcwd(), ".bench-work")
    os.makedirs(base, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix=time.strftime("%Y%m%d-%H%M%S-"), dir=base)
    print(f"bench: writing stores under {workdir}", flush=True)
    t0 = time.perf_counter()
    failed: list[str] = []
    try:
        for w in only:
            t = time.perf_counter()
            print(f"== {w} ({'quick' if args.quick else 'full'})", flush=True)
            sub = os.path.join(workdir, w)
            os.makedirs(sub)
            try:
                if w == "w1":
                    from bench import w1

                    ns = [int(x) for x in args.n.split(",")] if args.n else None
                    rounds = args.rounds or (1 if args.quick else 2)
                    print(w1.run(sub, quick=args.quick, ns=ns, rounds=rounds))
                elif w == "w2":
                    from bench import w2

                    print(w2.run(sub, quick=args.quick))
                elif w == "w3":
                    from bench import w3

                    print(w3.run(sub, quick=args.quick))
                elif w == "w4":
                    from bench import w4

                    print(w4.run(sub, quick=args.quick))
                elif w == "langgraph":
                    _langgraph(sub, quick=args.quick)
                else:
                    _script(w, quick=args.quick)
            except Exception:  # one broken workload must not cost the others their run
                import traceback

                traceback.print_exc()
                failed.append(w)
                print(f"== {w} FAILED after {time.perf_counter() - t:.0f} s", flush=True)
                continue
            print(f"== {w} done in {time.perf_counter() - t:.0f} s", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"bench: all done in {time.perf_counter() - t0:.0f} s; results in {common.RESULTS}")
    if failed:
        sys.exit(f"bench: these workloads failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
