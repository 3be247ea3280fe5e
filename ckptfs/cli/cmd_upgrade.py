"""``ckptfs upgrade STORE``: turn a format version 1 store into version 2, in place."""

from __future__ import annotations

import argparse

from ckptfs.cli import EXIT_OK, print_json
from ckptfs.cli import stores as _stores
from ckptfs.cli._args import store_command

#: a v2 store whose records are not all complete: nothing changed
EXIT_NOT_UPGRADED = 1


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = store_command(
        sub, "upgrade", run,
        help="upgrade a store in place: v1 to v2, or give a v2 store complete locators "
             "(no snapshot id changes)",
        description="Rewrite STORE's config as format version 2 (spec/v2.md 10). Existing "
                    "snapshots stay as they are and keep their ids; new commits are written in "
                    "the v2 layout (one file per commit). Readers older than ckptfs 0.2 can no "
                    "longer open the store; to keep a v1 store, copy it instead "
                    "('ckptfs copy SRC DST' writes a v2 copy). On a v2 store written by an "
                    "earlier ckptfs: check that every visible record locates every chunk it "
                    "needs and then add the required feature complete-locators, which lets gc "
                    "delete old records without reading them (spec/v2.md 2, 9.2); and the "
                    "required feature compressed-headers (new records' headers zstd-compressed, "
                    "spec/v2.md 3.1; readers older than ckptfs 0.3 refuse the store).")
    p.add_argument("--dry-run", action="store_true", help="say what would change")
    p.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    from ckptfs.format.models import COMPLETE_LOCATORS, COMPRESSED_HEADERS
    from ckptfs.ops.upgrade import upgrade

    store = _stores.open_store(args.store)  # with -o and --keyring, as every command
    r = upgrade(store.repo, dry_run=args.dry_run)
    if args.json:
        print_json({"store": r.store, "before": r.before, "after": r.after,
                    "changed": r.changed, "dry_run": args.dry_run, "checked": r.checked,
                    "holes": list(r.holes), "holes_total": r.holes_total,
                    "added": list(r.added)})
    elif r.holes_total:
        print(f"{r.store}: not changed: {r.holes_total} visible record(s) do not locate "
              "every chunk they need, so gc must keep reading old records (spec/v2.md 9.2):")
        for h in r.holes:
            print(f"  {h}")
        print("Commit those runs again (or copy the store) and run 'ckptfs upgrade' again.")
        return EXIT_NOT_UPGRADED
    elif r.before == r.after == 2 and r.changed:
        verb = "would get" if args.dry_run else "now has"
        if COMPLETE_LOCATORS in r.added:
            print(f"{r.store}: {verb} the feature complete-locators ({r.checked} record(s) "
                  "checked): gc deletes old records no visible one locates without reading them")
        if COMPRESSED_HEADERS in r.added:
            print(f"{r.store}: {verb} the feature compressed-headers: new records' headers "
                  "are stored zstd-compressed (about half the bytes); readers older than "
                  "ckptfs 0.3 can no longer open the store")
    elif not r.changed:
        print(f"{r.store}: already format version {r.after}; nothing to do")
    else:
        verb = "would be upgraded" if args.dry_run else "upgraded"
        print(f"{r.store}: {verb} from format version {r.before} to {r.after} "
              "(existing snapshots unchanged; new commits use one file each)")
    return EXIT_OK
