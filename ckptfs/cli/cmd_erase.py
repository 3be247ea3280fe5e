"""``ckptfs erase STORE RUN [--snapshot SEQ] --reason TEXT``: erase now, leave a tombstone."""

from __future__ import annotations

import argparse
import time

from ckptfs.cli import EXIT_OK, EXIT_PROBLEMS, human, print_json
from ckptfs.cli._args import add_break_lease, break_lease, store_command
from ckptfs.cli._usage import usage_error
from ckptfs.format.names import parse_uint
from ckptfs.cli import stores as _stores


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = store_command(sub, "erase", run,
                      help="erase a run (or one snapshot) now, leaving a tombstone",
                      description="Fence the run so no writer can commit to it again, delete "
                                  "its records, manifests and every chunk no other snapshot "
                                  "uses (immediately, no grace period), and leave a tombstone "
                                  "saying what was erased, when and why.")
    p.add_argument("run_id", metavar="RUN", nargs="?")
    p.add_argument("--subject", metavar="S",
                   help="encrypted stores: destroy the key scope of subject S (every run about "
                        "S, in this store and in every copy of it), then delete what this "
                        "store holds of it")
    p.add_argument("--snapshot", metavar="SEQ|ID",
                   help="only this snapshot (a seq, RUN@SEQ, or a snapshot id of RUN)")
    p.add_argument("--reason", required=False, help="why (e.g. 'GDPR request #123')")
    add_break_lease(p)
    p.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    from ckptfs.ops.erase import erase_run

    if args.subject is not None:
        if args.run_id is not None or args.snapshot is not None:
            return usage_error("erase", "give RUN or --subject S, not both")
        from ckptfs.ops.erase_scope import erase_subject

        rep = erase_subject(_stores.open_store(args.store).storage, args.subject)
        if args.json:
            print_json(rep.to_json())
        else:
            print(f"erased key scope {rep.scope}: its key is destroyed (tombstone "
                  f"{rep.tombstone}); deleted {rep.deleted} object(s) of it here. Copies made "
                  "before can no longer open it.")
        return EXIT_OK
    if args.run_id is None or not args.reason:
        return usage_error("erase", "give RUN and --reason (or --subject S)")
    repo = _stores.open_store(args.store).repo
    seq = None
    if args.snapshot is not None:
        ref = args.snapshot
        if ref.isascii() and ref.isdigit():
            seq = parse_uint(ref, what="--snapshot")
        else:
            snap = repo.resolve(ref)
            if snap.run != args.run_id:
                return usage_error("erase", f"{ref} belongs to run {snap.run!r}, not "
                                 f"{args.run_id!r}")
            seq = snap.seq
    break_lease(args)  # --break-lease: take over a lease whose holder is gone
    report = erase_run(repo, args.run_id, seq=seq, reason=args.reason)
    stone = report.tombstone
    if args.json:
        print_json(report.to_json())
    else:
        what = args.run_id if seq is None else f"{args.run_id}@{seq}"
        print(f"erased {what}: {len(stone.snapshots)} snapshot(s), {stone.manifests_deleted} "
              f"manifest(s), {stone.chunks_deleted} chunk(s) ({human.size(stone.bytes_deleted)}); "
              f"{stone.chunks_kept_shared} chunk(s) kept because other snapshots use them")
        if report.unresolved and report.removable_at is not None:
            at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(report.removable_at / 1000))
            print(f"kept {len(report.unresolved)} pack(s) that no snapshot uses and that are "
                  "younger than the grace period: each belongs to a commit in flight or one "
                  "that crashed before its record (of this run or another; nothing in a pack "
                  "says which):")
            for u in report.unresolved:
                print(f"  {u.path} ({human.size(u.stored)})")
            print(f"run this erase again after {at} to remove them (or 'ckptfs gc' then); "
                  "if no writer is running now, they are leftovers of crashed commits")
    if report.linked:
        import sys

        print(f"warning: {len(report.linked)} file(s) erase removed from the store had other "
              "names outside it (hard links), where their bytes, erased content among them, "
              "survive: " + ", ".join(report.linked[:5]) + (", ..." if len(report.linked) > 5
                                                           else "")
              + ". Such names come from copies of the store made with hard links ('cp -al', "
              "'rsync --link-dest'): run this erase on those copies too, or delete them",
              file=sys.stderr)
        return EXIT_PROBLEMS
    return EXIT_OK
