"""``ckptfs fork STORE SNAPSHOT NEW_RUN``: start a new run from any snapshot."""

from __future__ import annotations

import argparse

from ckptfs.cli import EXIT_OK, human, print_json
from ckptfs.cli._args import store_command
from ckptfs.cli.cmd_show import SNAPSHOT_HELP


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = store_command(sub, "fork", run, help="start a new run from any snapshot",
                      description="Create run NEW_RUN whose first snapshot holds the state of "
                                  "SNAPSHOT (any run, any sequence number) and names it as its "
                                  "parent, so 'ckptfs log' shows where it came from. No data is "
                                  "copied: the new snapshot shares every chunk.")
    p.add_argument("snapshot", metavar="SNAPSHOT", help=SNAPSHOT_HELP)
    p.add_argument("new_run", metavar="NEW_RUN", help="id of the new run (must not exist)")
    p.add_argument("--json", action="store_true", help="print the new snapshot as JSON")
    human.add_allow_refs(p)


def run(args: argparse.Namespace) -> int:
    from ckptfs.ops.inspect import snapshot_json

    store = human.open_existing(args.store)
    store.ref_policy = human.ref_policy(args)
    src = store.repo.resolve(args.snapshot)
    forked = store.fork(src.id, args.new_run, lenient_refs=True)
    labels = {k: dict(e.labels) for k, e in src.manifest.entries.items() if e.labels}
    snap = forked.checkpoint(forked.state, src.boundary, entry_labels=labels)
    if args.json:
        print_json(snapshot_json(snap))
    else:
        print(f"forked {src.run}@{src.seq} ({human.short(src.id)}) into {snap.run}@{snap.seq} "
              f"({human.short(snap.id)})")
    return EXIT_OK
