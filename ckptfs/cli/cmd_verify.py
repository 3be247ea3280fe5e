"""``ckptfs verify STORE``: every retained snapshot, not only heads."""

from __future__ import annotations

import argparse
import sys

from ckptfs.cli import EXIT_OK, EXIT_PROBLEMS, human, print_json
from ckptfs.cli.progress import Progress, add_progress
from ckptfs.cli import stores as _stores


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("verify", help="check every retained snapshot (manifests, chunks, digests)",
                       description="Check that every snapshot of every run (or --run) still "
                                   "loads: manifests parse and validate and every chunk exists; "
                                   "with --read-data every chunk is read and its digest recomputed.")
    p.add_argument("store", metavar="STORE")
    p.add_argument("--run", action="append", dest="runs", metavar="RUN", help="only this run (repeatable)")
    p.add_argument("--read-data", action="store_true", help="read every chunk and recompute digests")
    p.add_argument("--json", action="store_true", help="machine-readable report")
    add_progress(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import ckptfs
    from ckptfs.ops.verify import verify

    from ckptfs.ops.runs import require_runs

    store = _stores.open_store(args.store)
    runs = require_runs(store.repo, args.runs)
    with Progress("verify", mode=args.progress) as bar:
        if bar.mode != "none":
            bar.total = sum(len(store.repo.seqs(r)) for r in
                            (runs if runs is not None else store.repo.run_ids()))
        bar.watch(store.storage)
        report = verify(store.repo, runs=runs, read_data=args.read_data, progress=bar.snapshot)
    if args.json:
        print_json(report.to_json())
    else:
        for p in report.problems:
            where = f"{p.run}@{p.seq}" if p.run else "store"
            print(f"{p.category:>12}  {where}  {human.clean(p.message)}")
        print(f"{report.runs} runs, {report.snapshots} snapshots, {report.chunks_checked} chunks "
              f"checked, {len(report.problems)} problem(s)", file=sys.stdout)
    return EXIT_OK if report.ok else EXIT_PROBLEMS
