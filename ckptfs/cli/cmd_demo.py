"""``ckptfs demo``: an agent pays invoices, is SIGKILLed mid-payment, resumes, pays exactly once."""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
from collections import Counter
from typing import Any

from ckptfs.cli import EXIT_OK, EXIT_PROBLEMS

POINTS = {
    "before-intent": "just before the intent commit",
    "after-intent": "after the intent commit, before the payment call",
    "in-fn": "inside the payment call, after the service charged the card",
    "before-result": "after the payment call, before the result commit",
    "after-result": "after the result commit",
}


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("demo", help="watch a run get killed mid-payment and resume without paying twice",
                       description="A scripted agent (no LLM, no network) pays two invoices through "
                                   "run.effect with a fake payment service; its process is killed "
                                   "with SIGKILL at a random point and a new process resumes it.")
    p.add_argument("--store", default="./ckptfs-demo-store", help="store folder (default %(default)s)")
    p.add_argument("--seed", type=int, help="choose the kill point reproducibly")
    p.add_argument("--kill-at", choices=list(POINTS), help="kill here instead of a random point")
    p.add_argument("--worker", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ckptfs.examples.payments import INVOICES, PaymentService, pay_key, worker_main

    if args.worker is not None:
        return worker_main(args.worker)
    seed = args.seed if args.seed is not None else random.randrange(10_000)
    rng = random.Random(seed)
    invoice = rng.choice([inv for inv, _ in INVOICES])
    point = args.kill_at or rng.choice(list(POINTS))
    store = os.path.abspath(args.store)
    log = store.rstrip("/") + ".payments.jsonl"
    import ckptfs

    if args.keyring:  # an encrypted demo store: made here, opened by the workers through
        from ckptfs.storage.keyring import KEYRING_ENV  # the environment's keyring

        os.environ[KEYRING_ENV] = args.keyring
        if not os.path.isdir(store):
            ckptfs.open_store(store, keyring=args.keyring).init()
    taken = set(ckptfs.open_store(store).runs()) if os.path.isdir(store) else set()
    run_id = next(f"demo-{seed}-{n}" for n in range(1, len(taken) + 2)
                  if f"demo-{seed}-{n}" not in taken)
    print(f"ckptfs demo (seed {seed}): store {args.store}, run {run_id}, "
          f"payment service log {os.path.basename(log)}")
    print(f"the agent pays {', '.join(f'{i} ({a} EUR)' for i, a in INVOICES)}; its process "
          f"will be killed with SIGKILL {POINTS[point]} of {invoice}")
    base = [sys.executable, "-m", "ckptfs.cli", "demo", "--worker", "--store", store,
            "--run", run_id, "--service-log", log]
    rc = _worker(1, base + ["--kill-at", point, "--kill-invoice", invoice])
    if rc != -9:
        print(f"  (the worker was not killed: exit code {rc})")
    if _worker(2, base) != 0:
        return EXIT_PROBLEMS
    charged = Counter(c["key"] for c in PaymentService(log).charges() if c["key"].startswith(run_id))
    parts = [f"{inv} charged {charged[pay_key(run_id, inv)]}x" for inv, _ in INVOICES]
    ok = all(charged[pay_key(run_id, inv)] == 1 for inv, _ in INVOICES)
    print(f"payment service log: {', '.join(parts)} -> "
          + ("every payment happened exactly once" if ok else "WRONG: a payment was not made once"))
    return EXIT_OK if ok else EXIT_PROBLEMS


def _worker(n: int, cmd: list[str]) -> int:
    """Run one worker process and tell its story from the JSON events it prints."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    print(f"worker {n} (pid {proc.pid}):")
    for line in proc.stdout:
        try:
            ev = json.loads(line)
        except ValueError:
            print("  " + line.rstrip())
            continue
        text = _describe(ev)
        if text:
            print("  " + text)
    return proc.wait()


def _describe(ev: dict[str, Any]) -> str | None:
    kind = ev.pop("event")
    if kind == "snapshot":
        what = {"before_effect": f"intent of {ev['key']}",
                "after_effect": f"result of {ev['key']}"}.get(ev["boundary"], "")
        return (f"snapshot seq {ev['seq']:<2} {ev['boundary']:<13} {ev['id'][7:19]} "
                f"attempt {ev['attempt']}  {what}").rstrip()
    if kind == "charged":
        return f"payment service charged {ev['amount']} EUR for {ev['invoice']}: {ev['charge_id']}"
    if kind == "killed":
        return f"** killed by SIGKILL at '{ev['point']}' of {ev['key']} **"
    if kind == "resumed":
        doubt = f"; in doubt: {', '.join(ev['in_doubt'])}" if ev["in_doubt"] else ""
        return (f"resumed from snapshot {ev['id'][7:19]} (seq {ev['seq']}, {ev['boundary']}, "
                f"attempt {ev['attempt']}); this is attempt {ev['now_attempt']}{doubt}")
    if kind == "reconcile":
        found = ev["found"]
        return (f"reconcile {ev['key']}: the service has charge {found['charge_id']} -> recorded "
                "as completed, not charged again" if found else
                f"reconcile {ev['key']}: the service never saw it -> issued again, same key")
    if kind == "paid":
        if ev["how"] == "replayed":
            return f"{ev['invoice']}: completed earlier -> recorded result returned, not re-run"
        return None
    if kind == "in-doubt":
        return f"{ev['key']} is in doubt (EffectInDoubt): intent recorded, no result"
    if kind == "fenced":
        return f"fenced: {ev['message']}"
    if kind == "done":
        return f"finished: paid {ev['paid']}"
    return None
