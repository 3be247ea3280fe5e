"""``ckptfs copy SRC DST``: copy runs between stores, incrementally and resumably."""

from __future__ import annotations

import argparse

from ckptfs.cli import EXIT_OK, EXIT_PROBLEMS, human, print_json
from ckptfs.cli.progress import Progress, add_progress
from ckptfs.cli import stores as _stores


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser(
        "copy", help="copy runs to another store (incremental, resumable, any backends)",
        description="Copy every run (or each --run) of SRC into DST, which may be on any backend "
                    "and is created with SRC's config if absent. Only chunks DST lacks are sent; "
                    "every object is verified against its digest on the way; each snapshot's "
                    "chunks, then manifest, then run record are written in sequence order, so "
                    "DST is a valid store at every moment. Interrupted, run it again: it "
                    "continues where it stopped. Running it twice copies nothing the second time. "
                    "Expiry overrides, forgotten ranges and tombstones travel with the runs "
                    "ahead of their records: expired snapshots are not sent, forgotten ones "
                    "stay forgotten, and a run erased in SRC is erased in DST too.",
        epilog="Exit 1 when a run's history differs between the stores (written to both); "
               "nothing more of that run is copied.")
    p.add_argument("src", metavar="SRC")
    p.add_argument("dst", metavar="DST")
    p.add_argument("--run", action="append", dest="runs", metavar="RUN",
                   help="copy only this run (repeatable)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    add_progress(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import ckptfs
    from ckptfs.ops.copy import copy_runs

    src = human.open_existing(args.src)
    dst = _stores.open_store(args.dst)
    with Progress("copy", mode=args.progress) as bar:
        bar.watch(src.storage)
        report = copy_runs(src.repo, dst.repo, runs=args.runs, progress=bar)
    if args.json:
        print_json(report.to_json())
    else:
        print(f"{report.runs} run(s): {report.snapshots_copied} snapshot(s) copied, "
              f"{report.snapshots_present} already there; {report.chunks_copied} chunk(s) "
              f"copied, {report.chunks_present} already there; "
              f"{human.size(report.bytes_copied)} written to {dst.url}")
        life = report.life
        if report.snapshots_skipped or life.controls_written or life.erased:
            print(f"retention: {report.snapshots_skipped} snapshot(s) not copied (expired, "
                  f"forgotten or erased), {life.controls_written} expiry/retired/tombstone "
                  f"object(s) written" + "".join(f"; erased {e} here too" for e in life.erased))
        for c in report.conflicts:
            print(f"conflict: {c}")
    return EXIT_OK if report.ok else EXIT_PROBLEMS
