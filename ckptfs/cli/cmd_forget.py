"""``ckptfs forget STORE --keep-...``: apply a retention policy (restic's forget)."""

from __future__ import annotations

import argparse
from typing import Any

from ckptfs.cli import EXIT_OK, EXIT_PROBLEMS, print_json
from ckptfs.cli._args import add_break_lease, break_lease, store_command
from ckptfs.cli._usage import usage_error
from ckptfs.cli import stores as _stores


_UNIT = {"hourly": "hour", "daily": "day", "weekly": "ISO week", "monthly": "month",
         "yearly": "year"}


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = store_command(sub, "forget", run, help="forget snapshots a retention policy does not keep",
                      description="Forget (delete the run records of) every snapshot that no "
                                  "--keep rule keeps; a run's head goes only with its whole "
                                  "run. Then run 'ckptfs gc' to reclaim the space.")
    p.add_argument("--keep-last", type=int, metavar="N", help="the last N snapshots of each run")
    p.add_argument("--keep-within", metavar="DURATION", help="snapshots newer than e.g. 7d, 36h")
    p.add_argument("--keep-label", action="append", default=[], metavar="K=V",
                   help="snapshots with this label (repeatable)")
    for kind in ("hourly", "daily", "weekly", "monthly", "yearly"):
        p.add_argument(f"--keep-{kind}", type=int, metavar="N", dest=f"keep_{kind}",
                       help=f"the newest snapshot of each of the last N {_UNIT[kind]}s (UTC) "
                            "that have one, per run (as restic)")
    p.add_argument("--keep-unfinished-heads", action="store_true",
                   help="the head of every run whose head boundary is not 'final'")
    p.add_argument("--run", action="append", dest="runs", metavar="RUN", help="only this run")
    p.add_argument("--dry-run", action="store_true",
                   help="show what would go; change nothing (needs no write access)")
    p.add_argument("--prune", action="store_true",
                   help="then run gc (with the grace rule): frees what no snapshot uses and "
                        "is old enough now, and says when the rest will be free")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="one line per forgotten snapshot (the summary counts them per run)")
    add_break_lease(p)
    p.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    from ckptfs.ops.retention import Policy, forget, parse_duration

    labels = []
    for kv in args.keep_label:
        k, eq, v = kv.partition("=")
        if not eq:
            return usage_error("forget", f"--keep-label takes K=V, not {kv!r}")
        labels.append((k, v))
    if args.keep_last is not None and args.keep_last < 1:
        return usage_error("forget", "--keep-last must be at least 1")
    try:
        within = parse_duration(args.keep_within) if args.keep_within else None
    except ValueError as e:
        return usage_error("forget", str(e))
    periods = []
    for kind in _UNIT:
        n = getattr(args, f"keep_{kind}")
        if n is not None:
            if n < 1:
                return usage_error("forget", f"--keep-{kind} must be at least 1")
            periods.append((kind, n))
    policy = Policy(keep_last=args.keep_last, keep_within_ms=within,
                    keep_labels=tuple(labels), keep_unfinished_heads=args.keep_unfinished_heads,
                    keep_periods=tuple(periods))
    if policy.empty:
        return usage_error("forget", "give at least one --keep rule")
    from ckptfs.ops.runs import require_runs

    repo = _stores.open_store(args.store).repo
    runs = require_runs(repo, args.runs)  # a typo is an error before anything is touched
    break_lease(args)  # --break-lease: take over a lease whose holder is gone
    report = forget(repo, policy, runs=runs, dry_run=args.dry_run)
    pruned = None
    if args.prune and not args.dry_run:
        from ckptfs.ops.gc import gc

        pruned = gc(repo)
    if args.json:
        out = report.to_json()
        if args.prune:
            out["prune"] = pruned.to_json() if pruned is not None else None
        print_json(out)
    else:
        _print_summary(args, report)
        if pruned is not None:
            from ckptfs.cli.gc_text import gc_lines

            for line in gc_lines(pruned):
                print(f"prune: {line}")
    problems = report.problems or (pruned is not None and pruned.problems)
    return EXIT_PROBLEMS if problems else EXIT_OK


def _print_summary(args: argparse.Namespace, report: Any) -> None:
    from ckptfs.cli import human

    verb = "would forget" if args.dry_run else "forgot"
    per_run: dict[str, list[int]] = {}
    for d in report.forgotten:
        per_run.setdefault(d.run, []).append(d.seq)
        if args.verbose:
            print(f"{verb}  {d.run}@{d.seq}  {d.id.text if d.id is not None else '(not read)'}")
    if not args.verbose:
        for run_id, seqs in sorted(per_run.items()):
            print(f"{verb} {human.count(len(seqs), 'snapshot')} of {human.clean(run_id)} "
                  f"({human.spans(seqs)})")
    for p in report.problems:
        print(f"problem  {human.clean(p)}")
    kept = len(report.decisions) - len(report.forgotten)
    then = "gc would then free" if args.dry_run or not args.prune else "unused now:"
    head = (f"{verb} {human.count(len(report.forgotten), 'snapshot')} of "
            f"{human.count(len(per_run), 'run')}, kept {kept}; ")
    later = "" if args.prune or args.dry_run else " ('ckptfs gc', or forget --prune)"
    if report.bytes_freed is None or report.chunks_freed is None:  # decided from listings
        print(head + "gc frees what no kept snapshot uses" + later
              + "; 'forget --dry-run' counts it")
        return
    print(head + f"{then} {human.size(report.bytes_freed)} in "
          f"{human.count(report.chunks_freed, 'chunk')} plus manifests" + later)

