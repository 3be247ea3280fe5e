"""Run the benchmarks: ``python -m bench`` (full) or ``python -m bench --quick`` (minutes).

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

WORKLOADS = ("w1", "w2", "w3", "w4")


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
    try:
        for w in only:
            t = time.perf_counter()
            print(f"== {w} ({'quick' if args.quick else 'full'})", flush=True)
            sub = os.path.join(workdir, w)
            os.makedirs(sub)
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
            print(f"== {w} done in {time.perf_counter() - t:.0f} s", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"bench: all done in {time.perf_counter() - t0:.0f} s; results in {common.RESULTS}")


if __name__ == "__main__":
    main()
