"""``ckptfs init STORE``: create an empty store (it is otherwise created by the first checkpoint)."""

from __future__ import annotations

import argparse

from ckptfs.cli import EXIT_OK, human, print_json


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("init", help="create an empty store at a URL",
                       description="Create a store (its ckptfs.cbor config) at STORE. Does nothing "
                                   "but print the config in force when a store already exists.")
    p.add_argument("store", metavar="STORE")
    p.add_argument("--json", action="store_true", help="print the config as JSON")
    p.add_argument("--format-version", type=int, choices=(1, 2), default=None,
                   help="the store layout: 2 (default: one file per commit, spec/v2.md) or 1 "
                        "(for readers older than ckptfs 0.2)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import ckptfs

    store = ckptfs.open_store(args.store)
    existed = store.repo.load_config() is not None
    store.init(version=args.format_version)
    cfg = store.repo.config
    c = cfg.chunker
    if args.json:
        print_json({"store": store.url, "created": not existed, "format": cfg.version,
                    "chunker": c.to_cbor()})
    else:
        verb = "exists" if existed else "created"
        print(f"store {verb}: {store.url} (format version {cfg.version})")
        print(f"chunker: {c.algorithm} min {human.size(c.min_size)} avg {human.size(c.avg_size)} "
              f"max {human.size(c.max_size)}")
    return EXIT_OK
