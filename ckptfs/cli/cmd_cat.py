"""``ckptfs cat STORE SNAPSHOT ENTRY``: one entry's content."""

from __future__ import annotations

import argparse
import json
import sys

from ckptfs.cli import EXIT_OK, human, print_json
from ckptfs.cli._args import store_command
from ckptfs.cli.cmd_show import SNAPSHOT_HELP


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = store_command(sub, "cat", run, help="print an entry: a value as JSON, a blob as raw bytes",
                      description="Print entry ENTRY of SNAPSHOT, every chunk verified. A value "
                                  "is printed as JSON (bytes as {\"$bytes\": base64}, NaN and "
                                  "infinities as {\"$float\": \"NaN\"}, integers of more than "
                                  "14,000 bits as {\"$int\": \"0x...\"}, map keys starting "
                                  "with '$' get one more '$', typed values as {\"$typed\": "
                                  "[name, payload]}, LangGraph's msgpack values decoded as "
                                  "{\"$lg\": \"module.Name\", \"data\": ...} unless --raw); "
                                  "a blob is written raw to "
                                  "stdout or --output FILE; a reference prints what it points at. "
                                  "An expired "
                                  "snapshot is refused (exit 3) unless --allow-expired.")
    p.add_argument("snapshot", metavar="SNAPSHOT", help=SNAPSHOT_HELP)
    p.add_argument("entry", metavar="ENTRY", help="entry name, as 'ckptfs show' lists them")
    p.add_argument("--output", metavar="FILE",
                   help="write to FILE instead of stdout (-o is a backend option KEY=VALUE here, "
                        "as on every command)")
    human.add_thread_args(p, "a run: SNAPSHOT is then '@SEQ' or 'head' of its run")
    p.add_argument("--raw", action="store_true",
                   help="show LangGraph values as stored ({\"__lg__\": ..., \"data\": bytes})")
    p.add_argument("--json", action="store_true",
                   help="print a blob as JSON too ({\"$bytes\": base64}) instead of raw bytes")
    p.add_argument("--allow-expired", action="store_true",
                   help="print the entry even if the snapshot has expired (refused by default, "
                        "exit 3: expired state is not served)")


def run(args: argparse.Namespace) -> int:
    from ckptfs.format.models import Reference
    from ckptfs.ops.inspect import entry, entry_json, iter_blob, read_value, to_json_value

    store = human.open_existing(args.store)
    snap = store.repo.resolve(human.thread_snapshot(store, args.thread, args.ns, args.snapshot))
    e = entry(snap, args.entry)
    if isinstance(e, Reference):
        print_json(entry_json(e))
        return EXIT_OK
    if e.kind == "blob" and not args.json:
        pieces = iter_blob(store.repo, snap, args.entry, allow_expired=args.allow_expired)
        if args.output:
            with open(args.output, "wb") as f:
                for piece in pieces:
                    f.write(piece)
        else:
            for piece in pieces:
                sys.stdout.buffer.write(piece)
            sys.stdout.buffer.flush()
        return EXIT_OK
    value = read_value(store.repo, snap, args.entry, allow_expired=args.allow_expired)
    if not args.raw:
        from ckptfs.ops.lg_values import decode_lg

        value = decode_lg(value)
    text = json.dumps(to_json_value(value), indent=2, sort_keys=True, ensure_ascii=False,
                      allow_nan=False) + "\n"
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return EXIT_OK
