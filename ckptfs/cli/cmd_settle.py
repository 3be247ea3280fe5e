"""``ckptfs settle|approve|reject STORE RUN KEY``: the operator's answers the ledger waits for.

``settle`` records how an in-doubt effect ended (``--result JSON`` or ``--failed MESSAGE``);
``approve`` and ``reject`` decide a pending approval. Each resumes the run at its head and calls
the API (``run.settle_effect``, ``run.approve``, ``run.reject``), so the ledger records exactly
what those record (``via: manual``, a new attempt, one snapshot at ``after_effect`` or
``approval``); they refuse, exit 3, when the effect is not in doubt, is still running under
its lease, or the approval is not pending.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from ckptfs.cli import EXIT_OK, human, print_json
from ckptfs.cli._usage import usage_error
from ckptfs.errors import EffectInProgress


#: what ``settle`` says when the effect's owner may still be running its call
SETTLE_ADVICE = ("Settle it only once that call has ended: let the owner record the outcome, "
                 "or stop its process (on this host, settle works at once once it is gone), "
                 "or run 'ckptfs settle' again after that time.")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("store", metavar="STORE")
    p.add_argument("run_id", metavar="RUN")
    p.add_argument("key", metavar="KEY", help="the idempotency key ('ckptfs effects' lists them)")
    p.add_argument("--json", action="store_true", help="print the settled effect as JSON")


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser(
        "settle", help="record how an in-doubt effect ended (after checking the outside world)",
        description="Record the outcome of effect KEY of RUN, which was issued but whose "
                    "outcome was never recorded (IN DOUBT in 'ckptfs effects'). Check first "
                    "whether it happened (the payment provider, the ticket system, ...). "
                    "The same as run.settle_effect(KEY, result=... | failed=...).")
    _common(p)
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--result", metavar="JSON",
                     help="it happened; its result as JSON (what the call would have returned)")
    how.add_argument("--failed", metavar="MESSAGE", help="it did not happen, or failed: why")
    p.set_defaults(func=run_settle)
    for name, verb in (("approve", "approve"), ("reject", "reject")):
        q = sub.add_parser(name, help=f"{verb} a pending approval of a run",
                           description=f"{verb.capitalize()} the pending approval KEY of RUN "
                                       f"(listed as 'pending' by 'ckptfs effects'); the run "
                                       f"reads the decision when it resumes. The same as "
                                       f"run.{verb}(KEY, ...). A request is decided once.")
        _common(q)
        if name == "approve":
            q.add_argument("--decision", metavar="JSON", default="true",
                           help="the decision the run reads, as JSON (default: true)")
        else:
            q.add_argument("--reason", metavar="TEXT", help="why (the run reads it)")
        q.set_defaults(func=run_decide, approved=name == "approve")


def _open_run(args: argparse.Namespace) -> Any:
    store = human.open_existing(args.store)
    store.ref_policy = human.ref_policy(args)  # opens no reference: deny all
    return store.resume(args.run_id, lenient_refs=True)


def _done(args: argparse.Namespace, run: Any, what: str) -> int:
    from ckptfs.ops.inspect import effect_json, snapshot_json

    eff = run.ledger.effects[args.key]
    snap = run.snapshot
    if args.json:
        print_json({"effect": effect_json(eff, int(time.time() * 1000)),
                    "snapshot": snapshot_json(snap)})
    else:
        print(f"{what} {human.clean(args.key)} of {snap.run}: recorded at {snap.run}@{snap.seq} "
              f"({human.short(snap.id)}), attempt {snap.attempt}")
    return EXIT_OK


def run_settle(args: argparse.Namespace) -> int:
    result: Any = None
    if args.result is not None:
        try:
            result = json.loads(args.result)
        except ValueError as e:
            return usage_error("settle", f"--result is not JSON ({e}); quote it, e.g. "
                                         "--result '{\"id\": \"r-1\"}'")
    run = _open_run(args)
    try:
        if args.failed is not None:
            run.settle_effect(args.key, failed=args.failed)
            return _done(args, run, "settled (failed)")
        run.settle_effect(args.key, result=result)
    except EffectInProgress as e:  # the API's advice (wait=True) is no command-line advice
        raise EffectInProgress(e.record, run.store.now(), advice=SETTLE_ADVICE) from None
    return _done(args, run, "settled (completed)")


def run_decide(args: argparse.Namespace) -> int:
    if args.approved:
        try:
            decision = json.loads(args.decision)
        except ValueError as e:
            return usage_error("approve", f"--decision is not JSON ({e})")
        run = _open_run(args)
        run.approve(args.key, decision)
        return _done(args, run, "approved")
    run = _open_run(args)
    run.reject(args.key, args.reason)
    return _done(args, run, "rejected")
