"""``ckptfs restore STORE SNAPSHOT DIR``: a whole snapshot into a local folder."""

from __future__ import annotations

import argparse

from ckptfs.cli import EXIT_OK, human, print_json
from ckptfs.cli._args import store_command
from ckptfs.cli.cmd_show import SNAPSHOT_HELP
from ckptfs.cli.progress import Progress, add_progress


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = store_command(
        sub, "restore", run,
        help="write a whole snapshot into a folder: values as JSON, blobs as files",
        description="Write every entry of SNAPSHOT into the local folder DIR, every chunk "
                    "verified: a value as NAME.json (the JSON 'ckptfs cat' prints), a blob as "
                    "the file NAME (its bytes), a reference as NAME.ref.json (what it points at; "
                    "the data is not fetched); an entry 'a/b' goes into the folder a. "
                    ".ckptfs-snapshot.json holds the manifest. DIR is created when absent and "
                    "must be empty unless --force. Entry names never become paths unchecked: "
                    "a name that breaks the entry-name rule or files that would collide (also "
                    "when case is folded) are refused before anything is written, and links "
                    "in DIR are never followed. An expired snapshot is refused (exit 3) unless "
                    "--allow-expired.")
    p.add_argument("snapshot", metavar="SNAPSHOT", help=SNAPSHOT_HELP)
    p.add_argument("dir", metavar="DIR", help="the local folder to write into (new or empty)")
    p.add_argument("--force", action="store_true",
                   help="write into a folder that is not empty, replacing files of the same "
                        "names (other files are left alone)")
    p.add_argument("--allow-expired", action="store_true",
                   help="restore an expired snapshot (refused by default: expired state is "
                        "not served)")
    p.add_argument("--raw", action="store_true",
                   help="write LangGraph values as stored, not decoded (as 'cat --raw')")
    human.add_thread_args(p, "a run: SNAPSHOT is then '@SEQ' or 'head' of its run")
    p.add_argument("--json", action="store_true", help="print what was written as JSON")
    add_progress(p)


def run(args: argparse.Namespace) -> int:
    from ckptfs.ops.restore import restore

    store = human.open_existing(args.store)
    snap = store.repo.resolve(human.thread_snapshot(store, args.thread, args.ns, args.snapshot))
    with Progress("restore", mode=args.progress, snapshots=False) as bar:
        bar.watch(store.storage)
        written = restore(store.repo, snap, args.dir, force=args.force,
                          allow_expired=args.allow_expired, raw=args.raw, progress=bar.snapshot)
    total = sum(w.bytes for w in written)
    if args.json:
        print_json({"snapshot": snap.id, "run": snap.run, "seq": snap.seq, "dir": args.dir,
                    "files": [w.to_json() for w in written], "bytes": total})
        return EXIT_OK
    for w in written:
        print(f"{w.kind:<5}  {human.size(w.bytes):>9}  {human.clean(w.path)}")
    print(f"restored {snap.run}@{snap.seq} ({human.short(snap.id)}): "
          f"{human.count(len(written), 'entry', 'entries')}, {human.size(total)} into "
          f"{human.clean(args.dir)}")
    return EXIT_OK
