"""``ckptfs log STORE RUN``: a run's lineage as a tree."""

from __future__ import annotations

import argparse
from typing import Any

from ckptfs.cli import EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, human, print_json
from ckptfs.cli._args import store_command


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = store_command(sub, "log", run, help="a run's history: parents, resumes, attempts, forks",
                      description="Print every snapshot of RUN in order with its boundary, "
                                  "where the run was forked from, where each attempt resumed, "
                                  "which runs fork from it, and the effects each snapshot records. "
                                  "Records that cannot be read are listed after the tree; exit "
                                  "status 1 when the run's head is one of them (the run cannot "
                                  "be resumed: 'ckptfs repair' makes it resumable again).")
    p.add_argument("run_id", metavar="RUN", nargs="?",
                   help="the run (or give --thread for a LangGraph thread)")
    human.add_thread_args(p, "RUN")
    p.add_argument("-n", "--latest", type=int, metavar="N",
                   help="only the newest N snapshots (the header still counts them all)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--allow-expired", action="store_true",
                   help="show the effects of expired snapshots too (withheld by default: "
                        "ledger records are state data)")


def run(args: argparse.Namespace) -> int:
    from ckptfs.ops.inspect import run_log

    if not human.run_or_thread(args, "log"):
        return EXIT_USAGE
    store = human.open_existing(args.store)
    run_id = args.run_id if args.thread is None else human.thread_run(store, args.thread, args.ns)
    log = run_log(store.repo, run_id, allow_expired=args.allow_expired)
    if args.latest is not None and args.latest < 1:
        from ckptfs.cli._usage import usage_error

        return usage_error("log", "--latest must be at least 1")
    if args.latest is not None:
        log["total_snapshots"] = len(log["snapshots"])
        log["snapshots"] = log["snapshots"][-args.latest:]
    if args.json:
        print_json(log)
    else:
        for line in render(log):
            print(line)
    # a run whose newest record cannot be read cannot be resumed: scripts must notice
    return EXIT_PROBLEMS if log["head_damaged"] else EXIT_OK


def render(log: dict[str, Any]) -> list[str]:
    """The tree, one string per line."""
    snaps = log["snapshots"]
    total = log.get("total_snapshots", len(snaps))
    shown = f", newest {len(snaps)} shown" if total != len(snaps) else ""
    lines = [f"{log['run']}  (schema {log['schema']}, {human.count(total, 'snapshot')}{shown}, "
             f"{human.count(log['attempts'], 'attempt')})"]
    origin = log["forked_from"]
    if origin:
        where = f"{origin['run']}@{origin['seq']} " if origin["run"] else "(not in this store) "
        lines.append(f"│ forked from {where}{human.short(origin['snapshot'])}")
    seq_of = {s["snapshot"]: s["seq"] for s in snaps}
    for i, s in enumerate(snaps):
        if s["resumed_from"]:
            lines.append(f"│ ↻ attempt {s['attempt']}: resumed from "
                         f"@{seq_of.get(s['resumed_from'], '?')} {human.short(s['resumed_from'])}")
        gap = s.get("forgotten_before", 0)
        if gap:
            first = s["seq"] - gap
            span = f"@{first}" if gap == 1 else f"@{first}..@{s['seq'] - 1}"
            lines.append(f"┆ {span} forgotten ({gap} snapshot{'s' if gap != 1 else ''})")
        if s.get("repaired"):
            lines.append(f"│ ⚒ repair: {', '.join(f'@{d}' for d in s['repaired'])} damaged, set "
                         f"aside; @{s['seq']} holds the last good snapshot again")
        elbow = "└─" if i == len(snaps) - 1 else "├─"
        lines.append(f"{elbow} @{s['seq']:<4} {s['boundary']:<14} {human.short(s['snapshot'])}  "
                     f"{human.when(s['created'])}  {s['entry_count']} entries  "
                     f"{human.size(s['state_bytes'])}")
        bar = "   " if i == len(snaps) - 1 else "│  "
        if s["effects"] is None:
            lines.append(f"{bar}  effects withheld: snapshot expired (--allow-expired shows them)")
        if gap and s["effects"]:
            since = "since the run began" if i == 0 else f"since @{snaps[i - 1]['seq']}"
            lines.append(f"{bar}  effects recorded {since} (they include those of the "
                         f"forgotten snapshots):")
        for e in s["effects"] or []:
            mark = "!" if e.get("in_doubt") else " "
            lines.append(f"{bar}{mark} effect {human.clean(e.get('key'))}  "
                         f"{human.clean(e.get('name'))}  {human.clean(e.get('status'))}")
        for f in s["forks"]:
            lines.append(f"{bar}└─ fork: {f['run']} @{f['seq']} {human.short(f['snapshot'])}")
    for p in log["problems"]:
        lines.append(f"! {human.clean(p)}")
    for p in log.get("repaired", ()):
        lines.append(f"  repaired {human.clean(p)}")
    return lines
