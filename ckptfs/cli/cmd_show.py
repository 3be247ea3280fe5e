"""``ckptfs show STORE SNAPSHOT``: one manifest, readable."""

from __future__ import annotations

import argparse

from ckptfs.cli import EXIT_OK, human, print_json
from ckptfs.cli._args import store_command

SNAPSHOT_HELP = ("a snapshot: RUN (its head), RUN@SEQ, blake3:<hex> or a unique hex prefix "
                 "of at least 6 digits")


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = store_command(sub, "show", run, help="print a snapshot's manifest",
                      description="Print the manifest of SNAPSHOT: where it sits in its run's "
                                  "history and every entry with its kind, type, size and chunks.")
    p.add_argument("snapshot", metavar="SNAPSHOT", help=SNAPSHOT_HELP)
    human.add_thread_args(p, "a run: SNAPSHOT is then '@SEQ' or 'head' of its run")
    p.add_argument("--json", action="store_true", help="the whole manifest as JSON")


def run(args: argparse.Namespace) -> int:
    from ckptfs.ops.inspect import manifest_json

    store = human.open_existing(args.store)
    m = manifest_json(store.repo.resolve(
        human.thread_snapshot(store, args.thread, args.ns, args.snapshot)))
    if args.json:
        print_json(m)
        return EXIT_OK
    print(f"snapshot  {m['snapshot']}")
    print(f"run       {m['run']} @{m['seq']}  boundary {m['boundary']}  attempt {m['attempt']}")
    print(f"created   {human.when(m['created'])}  by {human.clean(m['writer'])}  "
          f"schema {human.clean(m['schema'])}")
    print(f"parent    {m['parent'] or '-'}")
    if m["resumed_from"]:
        print(f"resumed   from {m['resumed_from']}")
    if m["expires"] is not None:
        print(f"expires   {human.when(m['expires'])}")
    for k, v in sorted(m["labels"].items()):
        print(f"label     {human.clean(k)}={human.clean(v)}")
    if m["required"]:
        print(f"requires  {human.clean(', '.join(m['required']))}")
    for k in sorted(m["extra"]):
        print(f"extra     {human.clean(k)}")
    print(f"entries   {m['entry_count']}  ({human.size(m['state_bytes'])} captured)")
    rows = []
    for name, e in m["entries"].items():
        if e["kind"] == "ref":
            rows.append([name, "ref", "-", human.size(e["size"]), "-", e["uri"]])
        else:
            rows.append([name, e["kind"], e["encoding"] or e["type"], human.size(e["size"]),
                         "inline" if e["inline"] else str(len(e["chunks"])),
                         human.short(e["digest"])])
    if rows:
        text = human.table(rows, ["NAME", "KIND", "TYPE", "SIZE", "CHUNKS", "DIGEST/URI"])
        print("\n".join("  " + line for line in text.splitlines()))
    return EXIT_OK
