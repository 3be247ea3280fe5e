"""``ckptfs export STORE FILE.zip|FILE.tar``: runs as one file that is itself a store."""

from __future__ import annotations

import argparse

from ckptfs.cli import EXIT_OK, human, print_json
from ckptfs.cli._args import store_command
from ckptfs.cli.progress import Progress, add_progress


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = store_command(
        sub, "export", run, help="write runs to one .zip or .tar file (a read-only store)",
        description="Write every run (or each --run) of STORE, verified, to FILE (.zip or .tar). "
                    "The file is a store: every read command opens it directly "
                    "('ckptfs ls FILE.zip', or the URL zip://::FILE.zip), and "
                    "'ckptfs copy FILE.zip DIR' unpacks it into a writable store.")
    p.add_argument("file", metavar="FILE", help="output path ending in .zip or .tar")
    p.add_argument("--run", action="append", dest="runs", metavar="RUN",
                   help="export only this run (repeatable)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    add_progress(p)


def run(args: argparse.Namespace) -> int:
    from ckptfs.ops.export import export_archive

    store = human.open_existing(args.store)
    with Progress("export", mode=args.progress) as bar:
        bar.watch(store.storage)
        report = export_archive(store.repo, args.file, runs=args.runs, progress=bar)
    if args.json:
        print_json(report.to_json())
    else:
        print(f"exported {report.copy.runs} run(s), {report.copy.snapshots_copied} snapshot(s), "
              f"{report.copy.chunks_copied} chunk(s) to {report.path} "
              f"({human.size(report.archive_bytes)}, {report.files} files)")
    return EXIT_OK
