"""``ckptfs ls STORE``: the runs of a store with their heads."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ckptfs.cli import EXIT_OK, EXIT_PROBLEMS, human, print_json
from ckptfs.cli._args import store_command


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = store_command(sub, "ls", run, help="list runs: head, length, last boundary, age, size",
                      description="List the runs of STORE: head snapshot and sequence number, "
                                  "number of snapshots, boundary of the head, its age and the "
                                  "bytes of state it holds. Exit status 1 when a run's head "
                                  "cannot be read (the run cannot be resumed until 'ckptfs "
                                  "repair').")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    from ckptfs.ops.inspect import list_runs

    store = human.open_existing(args.store)
    rows = list_runs(store.repo)
    # a run whose head cannot be read cannot be resumed: exit 1, as verify, so scripts notice
    rc = EXIT_PROBLEMS if any(r["status"] == "damaged" for r in rows) else EXIT_OK
    if args.json:
        print_json({"store": store.url, "runs": rows})
        return rc
    if not rows:
        print(f"no runs in {store.url}")
        return EXIT_OK
    threads = [_thread(r) for r in rows]
    print(human.table(
        [[r["run"], *([t] if any(threads) else []), str(r["head_seq"] or "-"),
          str(r["snapshots"]), human.short(r["head"]),
          r["boundary"] or "-", str(r["attempt"] or "-"), human.age(r["age_seconds"]),
          human.size(r["state_bytes"]),
          r["error"] or ("" if r["status"] == "live" else _status(r))]
         for r, t in zip(rows, threads)],
        ["RUN", *(["THREAD"] if any(threads) else []), "HEAD", "SNAPS", "SNAPSHOT", "BOUNDARY",
         "ATTEMPT", "AGE", "STATE", ""]))
    for r in rows:
        if r["status"] == "damaged":
            print(f"run {human.clean(r['run'])}: its head @{r['head_seq']} cannot be read, so the "
                  f"run cannot be resumed; 'ckptfs repair {human.clean(store.url)} "
                  f"{human.clean(r['run'])}' makes its last good snapshot the head again",
                  file=sys.stderr)
    return rc


def _thread(row: dict[str, Any]) -> str:
    """The LangGraph thread id a run holds (``id`` or ``id ns=NS``), from its head's labels: a
    thread's run id is a hash of it. Empty for other runs."""
    from ckptfs.integrations.lg_names import NS_LABEL, THREAD_LABEL

    labels = row.get("labels") or {}
    if THREAD_LABEL not in labels:
        return ""
    ns = labels.get(NS_LABEL) or ""
    return str(labels[THREAD_LABEL]) + (f" ns={ns}" if ns else "")


def _status(row: dict[str, object]) -> str:
    """The last column for a run that is not live: ``erased at <time>`` or ``forgotten``."""
    if row["status"] == "erased":
        detail = str(row["status_detail"] or "")
        at = detail.find(" at ")
        return "erased" + (detail[at:].split(" (reason")[0] if at >= 0 else "")
    return str(row["status"])
