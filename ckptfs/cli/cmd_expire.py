"""``ckptfs expire STORE RUN|SNAPSHOT --at/--in/--never``: change a lifetime later."""

from __future__ import annotations

import argparse
import datetime

from ckptfs.cli import EXIT_OK, print_json
from ckptfs.cli._args import store_command
from ckptfs.cli._usage import usage_error
from ckptfs.cli import stores as _stores


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = store_command(sub, "expire", run, help="set when a run or a snapshot expires",
                      description="Set the expiry of every snapshot of a run (RUN) or of one "
                                  "snapshot (RUN@SEQ, blake3:..., hex prefix). Expired "
                                  "snapshots are never restored and gc removes them.")
    p.add_argument("target", metavar="RUN|SNAPSHOT")
    when = p.add_mutually_exclusive_group(required=True)
    when.add_argument("--at", help="ISO 8601 time with a zone, e.g. 2030-01-01T00:00:00Z")
    when.add_argument("--in", dest="within", metavar="DURATION", help="from now: 90s, 36h, 7d")
    when.add_argument("--never", action="store_true", help="remove the expiry")
    p.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    import time

    from ckptfs.ops.expire import set_expiry
    from ckptfs.ops.retention import parse_duration

    now = int(time.time() * 1000)
    expires: int | None = None
    try:
        if args.at:
            t = datetime.datetime.fromisoformat(args.at.replace("Z", "+00:00"))
            if t.tzinfo is None:
                raise ValueError("--at needs a time zone (e.g. ...Z or +02:00)")
            expires = int(t.timestamp() * 1000)
        elif args.within:
            expires = now + parse_duration(args.within)
    except ValueError as e:
        return usage_error("expire", str(e))
    got = set_expiry(_stores.open_store(args.store).repo, args.target, expires, now)
    if args.json:
        print_json({"run": got.run, "seq": got.seq, "expires": got.expires})
    else:
        what = got.run if got.seq is None else f"{got.run}@{got.seq}"
        when = "never" if got.expires is None else time.strftime(
            "%Y-%m-%dT%H:%M:%SZ", time.gmtime(got.expires / 1000))
        print(f"{what} expires {when}")
    return EXIT_OK
