"""``ckptfs upgrade STORE``: turn a format version 1 store into version 2, in place."""

from __future__ import annotations

import argparse

from ckptfs.cli import EXIT_OK, print_json


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser(
        "upgrade", help="upgrade a format v1 store to v2 in place (no snapshot id changes)",
        description="Rewrite STORE's config as format version 2 (spec/v2.md 10). Existing "
                    "snapshots stay as they are and keep their ids; new commits are written in "
                    "the v2 layout (one file per commit). Readers older than ckptfs 0.2 can no "
                    "longer open the store; to keep a v1 store, copy it instead "
                    "('ckptfs copy SRC DST' writes a v2 copy).")
    p.add_argument("store", metavar="STORE")
    p.add_argument("--dry-run", action="store_true", help="say what would change")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import ckptfs
    from ckptfs.ops.upgrade import upgrade

    store = ckptfs.open_store(args.store)
    r = upgrade(store.repo, dry_run=args.dry_run)
    if args.json:
        print_json({"store": r.store, "before": r.before, "after": r.after,
                    "changed": r.changed, "dry_run": args.dry_run})
    elif not r.changed:
        print(f"{r.store}: already format version {r.after}; nothing to do")
    else:
        verb = "would be upgraded" if args.dry_run else "upgraded"
        print(f"{r.store}: {verb} from format version {r.before} to {r.after} "
              "(existing snapshots unchanged; new commits use one file each)")
    return EXIT_OK
