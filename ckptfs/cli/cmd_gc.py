"""``ckptfs gc STORE``: drop expired snapshots and sweep unreferenced objects."""

from __future__ import annotations

import argparse

from ckptfs.cli import EXIT_OK, EXIT_PROBLEMS, print_json
from ckptfs.cli._args import add_break_lease, break_lease, store_command
from ckptfs.cli._usage import usage_error
from ckptfs.cli.progress import Progress, add_progress
from ckptfs.cli import stores as _stores


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = store_command(sub, "gc", run,
                      help="remove expired snapshots and unreferenced chunks/manifests",
                      description="Garbage-collect: forget expired snapshots, then delete "
                                  "manifests and chunks no retained snapshot uses and that are "
                                  "older than the grace period. Safe beside live writers.")
    p.add_argument("--grace", metavar="DURATION",
                   help="override the store's grace period (e.g. 0s in tests; unsafe beside "
                        "live writers when shorter than a checkpoint takes)")
    p.add_argument("--dry-run", action="store_true", help="report only; change nothing")
    add_break_lease(p)
    p.add_argument("--json", action="store_true")
    add_progress(p)


def run(args: argparse.Namespace) -> int:
    from ckptfs.ops.gc import gc
    from ckptfs.ops.retention import parse_duration

    try:
        grace = parse_duration(args.grace) if args.grace is not None else None
    except ValueError as e:
        return usage_error("gc", str(e))
    break_lease(args)  # --break-lease: take over a lease whose holder is gone
    repo = _stores.open_store(args.store).repo
    with Progress("gc", mode=args.progress, snapshots=False) as bar:
        bar.watch(repo.storage)
        r = gc(repo, grace_ms=grace, dry_run=args.dry_run)
    if args.json:
        print_json(r.to_json())
    else:
        from ckptfs.cli.gc_text import gc_lines

        for line in gc_lines(r):
            print(line)
    return EXIT_PROBLEMS if r.problems else EXIT_OK
