"""``ckptfs verify STORE``: every retained snapshot, not only heads."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ckptfs.cli import EXIT_OK, EXIT_PROBLEMS, human, print_json
from ckptfs.cli._args import store_command
from ckptfs.cli.progress import Progress, add_progress
from ckptfs.cli import stores as _stores


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = store_command(sub, "verify", run,
                      help="integrity: every snapshot's objects are there and sound "
                           "(restic's 'check')",
                      description="Check that every snapshot of every run (or --run) still "
                                  "loads: manifests parse and validate and every chunk exists; "
                                  "with --read-data every chunk is read and its digest "
                                  "recomputed (--read-data-subset N% reads a sample). This is "
                                  "what restic calls 'check'; ckptfs check is about whether "
                                  "today's code can restore them.")
    p.add_argument("--run", action="append", dest="runs", metavar="RUN", help="only this run (repeatable)")
    p.add_argument("--read-data", action="store_true", help="read every chunk and recompute digests")
    p.add_argument("--read-data-subset", metavar="N%", type=_percent,
                   help="read and recompute the digest of about N%% of the chunks, picked at "
                        "random each run (the rest get the existence check), as restic")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="name every snapshot a problem touches (by default a damaged object "
                        "used by many snapshots is one line naming the first few)")
    p.add_argument("--json", action="store_true", help="machine-readable report")
    p.add_argument("--erased", metavar="S",
                   help="encrypted stores: prove that subject S is erased in this store or "
                        "copy: its key is gone, none of its objects opens, every other run reads")
    add_progress(p)


def _percent(text: str) -> float:
    t = text.strip().removesuffix("%")
    try:
        share = float(t) / 100
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a percentage like 10%") from None
    if not 0 < share <= 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a share above 0% and at most 100%")
    return share


#: snapshots named per problem line without --verbose
SHOWN = 5


def _print_problems(problems: list[Any], verbose: bool) -> None:
    """One line per problem *object*: the same message (a missing chunk, a corrupt ledger)
    met in many snapshots is printed once with the snapshots it touches."""
    groups: dict[tuple[str, str], list[str]] = {}
    for p in problems:
        where = f"{p.run}@{p.seq}" if p.run else "store"
        groups.setdefault((p.category, p.message), []).append(where)
    for (category, message), wheres in groups.items():
        names = wheres if verbose or len(wheres) <= SHOWN else [
            *wheres[:SHOWN], f"and {len(wheres) - SHOWN} more (-v lists them)"]
        label = wheres[0] if len(wheres) == 1 else (
            f"{len(wheres)} snapshots: {', '.join(names)}")
        print(f"{category:>12}  {human.clean(label)}  {human.clean(message)}")


def summary(report: Any) -> str:
    """The last line: what was checked, in the units an operator knows. In a version 2 store
    small data is held in the manifests, which are hashed against their snapshot ids: then
    there may be no chunk at all, and the line says what was checked instead of "0 chunks"."""
    parts = [human.count(report.runs, "run"),
             f"{human.count(report.snapshots, 'snapshot')} ({human.count(report.records, 'record')}"
             f" read, {human.size(report.manifest_bytes)} of manifests hashed)"]
    if report.inline_entries:
        parts.append(f"{human.count(report.inline_entries, 'entry', 'entries')} held in their "
                     "manifests (checked with them)")
    if report.chunks_checked or not report.inline_entries:
        read = f", {human.size(report.bytes_read)} read" if report.bytes_read else ""
        parts.append(f"{human.count(report.chunks_checked, 'chunk')} checked{read}")
    else:
        parts.append("no chunks: all data is inline")
    if report.repaired:
        parts.append(f"{len(report.repaired)} repaired record(s) kept as evidence")
    return ", ".join(parts) + f", {len(report.problems)} problem(s)"


def run(args: argparse.Namespace) -> int:
    from ckptfs.ops.verify import verify

    from ckptfs.ops.runs import require_runs

    store = _stores.open_store(args.store)
    if args.erased is not None:
        from ckptfs.ops.erase_scope import verify_erased

        v = verify_erased(store.storage, args.erased)
        if args.json:
            print_json(v.to_json())
        else:
            print(f"scope {v.scope}: tombstone {v.tombstone or 'MISSING'}; {v.scope_objects} "
                  f"object(s) of it here, {v.scope_opened} open; {v.other_objects} other "
                  f"object(s), {len(v.other_failed)} fail; {v.runs_read} other run(s), "
                  f"{v.snapshots_read} snapshot(s) read")
            for p in v.problems:
                print(f"problem: {p}")
        return EXIT_OK if v.ok else EXIT_PROBLEMS
    runs = require_runs(store.repo, args.runs)
    with Progress("verify", mode=args.progress) as bar:
        if bar.mode != "none":
            bar.total = sum(len(store.repo.seqs(r)) for r in
                            (runs if runs is not None else store.repo.run_ids()))
        bar.watch(store.storage)
        read: bool | float = args.read_data or (args.read_data_subset or False)
        report = verify(store.repo, runs=runs, read_data=read, progress=bar.snapshot)
    if args.json:
        print_json(report.to_json())
    else:
        _print_problems(report.problems, args.verbose)
        for r in report.repaired:
            print(f"{'repaired':>12}  {human.clean(f'{r.run}@{r.seq}')}  {human.clean(r.message)}")
        for path in report.foreign[:SHOWN] if not args.verbose else report.foreign:
            print(f"{'note':>12}  {human.clean(path)}  not an object of the store (a file left "
                  "by another tool?): every ckptfs command ignores it; remove it if unwanted")
        if len(report.foreign) > SHOWN and not args.verbose:
            print(f"{'note':>12}  and {len(report.foreign) - SHOWN} more such file(s) (-v "
                  "lists them)")
        inline = (f", {human.count(report.inline_entries, 'entry', 'entries')} held in their "
                  "manifests (checked with them)" if report.inline_entries else "")
        print(summary(report), file=sys.stdout)
    return EXIT_OK if report.ok else EXIT_PROBLEMS
