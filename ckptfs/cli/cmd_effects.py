"""``ckptfs effects STORE RUN``: the effect ledger at a run's head, in-doubt effects first."""

from __future__ import annotations

import argparse

from ckptfs.cli import EXIT_OK, EXIT_USAGE, human, print_json
from ckptfs.cli._args import store_command


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = store_command(sub, "effects", run,
                      help="a run's side effects and approvals; in-doubt ones flagged",
                      description="Print the effect ledger at the head of RUN, one line per "
                                  "idempotency key: its status, who issued and settled it and "
                                  "when. An effect that was issued but whose outcome was never "
                                  "recorded is IN DOUBT: it may have happened. Resuming will not "
                                  "repeat it silently; settle it with reconcile=, "
                                  "run.settle_effect() or 'ckptfs settle'; decide a pending "
                                  "approval with 'ckptfs approve' / 'ckptfs reject'. While its lease (timeout=) has not run "
                                  "out it is shown as RUNNING: the call may still be under way "
                                  "and no other process may reconcile or re-issue it yet.")
    p.add_argument("run_id", metavar="RUN", nargs="?",
                   help="the run (or give --thread for a LangGraph thread: the ledger of its "
                        "saver.effect calls)")
    p.add_argument("--thread", metavar="ID", help="a LangGraph thread id instead of RUN")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--allow-expired", action="store_true",
                   help="show the ledger even if the head has expired (refused by default, "
                        "exit 3: expired state is not served)")


def run(args: argparse.Namespace) -> int:
    from ckptfs.ops.inspect import run_effects

    if not human.run_or_thread(args, "effects"):
        return EXIT_USAGE
    store = human.open_existing(args.store)
    run_id = args.run_id if args.thread is None else human.thread_effects_run(store, args.thread)
    out = run_effects(store.repo, run_id, allow_expired=args.allow_expired)
    if args.json:
        print_json(out)
        return EXIT_OK
    effects = sorted(out["effects"], key=lambda e: (not e["in_doubt"], not e["pending"]))
    running = f" ({out['running']} still running)" if out["running"] else ""
    print(f"{out['run']} @{out['head_seq']}: {out['records']} ledger record(s), "
          f"{len(effects)} key(s), {out['in_doubt']} in doubt{running}, "
          f"{out['pending']} pending approval")
    if effects:
        rows = [[f"RUNNING until {human.when(e['deadline'])}" if e["running"] else
                 "IN DOUBT" if e["in_doubt"] else "pending" if e["pending"] else e["status"],
                 e["key"], e["kind"], e["name"], human.when(e["intended_at"]),
                 human.when(e["settled_at"])] for e in effects]
        print(human.table(rows, ["STATUS", "KEY", "KIND", "NAME", "ISSUED", "SETTLED"]))
    return EXIT_OK
