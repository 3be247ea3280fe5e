"""``ckptfs find STORE [--label K=V] [--entry NAME] [--run GLOB]``: snapshots across runs."""

from __future__ import annotations

import argparse

from ckptfs.cli import EXIT_OK, EXIT_PROBLEMS, human, print_json
from ckptfs.cli._args import store_command
from ckptfs.cli.progress import Progress, add_progress


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = store_command(
        sub, "find", run, help="find snapshots by label and entry name across runs",
        description="List the snapshots of STORE that carry every --label and have an entry "
                    "matching every --entry. By default each run's head only: about 3 requests "
                    "per run on an S3 version 2 store, whatever the run's length (a run "
                    "listing, its head hint, the head record); --all looks at every retained "
                    "snapshot (one listing per run and one ranged read per snapshot). --run "
                    "narrows the runs before anything is read. Only manifests are read, never "
                    "entry content. Exit status 1 when a run or record could not be read (the "
                    "search goes on; the problems are listed).")
    p.add_argument("--label", action="append", default=[], metavar="K=V",
                   help="a label the snapshot (or one of its entries) has: K=V for that value, "
                        "K for any value (repeatable: all must match)")
    p.add_argument("--entry", action="append", default=[], metavar="NAME",
                   help="an entry name, or a glob like 'report*' (repeatable: each must match "
                        "an entry)")
    p.add_argument("--run", action="append", default=[], dest="runs", metavar="GLOB",
                   help="only runs whose id matches this glob, e.g. 'agent-*' (repeatable)")
    p.add_argument("--all", action="store_true", dest="all_snapshots",
                   help="every retained snapshot, not only each run's head")
    p.add_argument("--limit", type=int, metavar="N", help="stop after N matches")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_progress(p)


def run(args: argparse.Namespace) -> int:
    from ckptfs.cli._usage import usage_error
    from ckptfs.ops.find import Query, find, parse_labels

    try:
        labels = parse_labels(args.label)
    except ValueError as e:
        return usage_error("find", str(e))
    if args.limit is not None and args.limit < 1:
        return usage_error("find", "--limit must be at least 1")
    store = human.open_existing(args.store)
    query = Query(labels, tuple(args.entry), tuple(args.runs))
    with Progress("find", mode=args.progress, snapshots=False) as bar:
        bar.watch(store.storage)
        report = find(store.repo, query, all_snapshots=args.all_snapshots, limit=args.limit,
                      progress=bar.snapshot)
    rc = EXIT_PROBLEMS if report.problems else EXIT_OK
    if args.json:
        print_json(report.to_json())
        return rc
    rows = [[f"{f.snapshot.run}@{f.snapshot.seq}", human.short(f.snapshot.id),
             f.snapshot.boundary, human.when(f.snapshot.created),
             ", ".join(f.entries) or "-",
             ", ".join(f"{k}={v}" for k, v in f.labels.items()) or "-"] for f in report.found]
    if rows:
        print(human.table(rows, ["SNAPSHOT", "ID", "BOUNDARY", "CREATED", "ENTRIES", "LABELS"]))
    what = "snapshots" if args.all_snapshots else "heads"
    print(f"{human.count(len(report.found), 'match', 'matches')} among "
          f"{report.snapshots} {what} of {human.count(report.runs, 'run')}")
    for p in report.problems:
        print(f"! {human.clean(p)}")
    return rc
