"""``ckptfs diff STORE A B``: what changed between two snapshots."""

from __future__ import annotations

import argparse

from ckptfs.cli import EXIT_OK, human, print_json
from ckptfs.cli._args import store_command
from ckptfs.cli.cmd_show import SNAPSHOT_HELP


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = store_command(sub, "diff", run,
                      help="entries added, removed and changed between two snapshots",
                      description="Compare snapshot A with snapshot B (of any runs): entries "
                                  "added, removed and changed, chunks the two share, and the "
                                  "bytes B holds that A does not.")
    p.add_argument("a", metavar="A", help=SNAPSHOT_HELP)
    p.add_argument("b", metavar="B", help="the other snapshot, same forms as A")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    from ckptfs.ops.inspect import diff

    store = human.open_existing(args.store)
    d = diff(store.repo.resolve(args.a), store.repo.resolve(args.b))
    if args.json:
        print_json(d)
        return EXIT_OK
    a, b = d["a"], d["b"]
    print(f"a: {a['run']}@{a['seq']} {human.short(a['snapshot'])}  ({a['boundary']})")
    print(f"b: {b['run']}@{b['seq']} {human.short(b['snapshot'])}  ({b['boundary']})")
    for e in d["added"]:
        print(f"+ {e['name']}  {e['kind']}  {human.size(e['size'])}")
    for e in d["removed"]:
        print(f"- {e['name']}  {e['kind']}  {human.size(e['size'])}")
    for e in d["changed"]:
        print(f"~ {e['name']}  {e['kind']}  {human.size(e['size_a'])} -> {human.size(e['size_b'])}")
    print(f"{len(d['added'])} added, {len(d['removed'])} removed, {len(d['changed'])} changed, "
          f"{d['unchanged']} unchanged; chunks: {d['chunks_shared']} shared of "
          f"{d['chunks_b']} in b; {human.size(d['bytes_new'])} new in b")
    return EXIT_OK
