"""``ckptfs repair STORE RUN``: make a run's last good snapshot its head again."""

from __future__ import annotations

import argparse

from ckptfs.cli import EXIT_OK, human, print_json
from ckptfs.cli._args import store_command


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = store_command(
        sub, "repair", run,
        help="make the last good snapshot of a run with a damaged head its head again",
        description="When the newest record of RUN is damaged (a flipped byte, a truncated "
                    "file), nothing can resume the run: a reader never falls back to an older "
                    "record, since a writer would then reuse a taken sequence number. repair "
                    "commits the run's last readable snapshot again as a new record above the "
                    "damaged ones (same entries, effects, labels and schema; its parent is the "
                    "good snapshot), and records in it which records it set aside. Nothing is "
                    "deleted: the damaged records stay as evidence, and 'verify' and 'log' show "
                    "them as repaired. A run whose head is sound is left alone. Like restic's "
                    "'repair snapshots'.")
    p.add_argument("run_id", metavar="RUN", help="the run whose head is damaged")
    p.add_argument("--dry-run", "-n", action="store_true",
                   help="say what would be done and write nothing")
    p.add_argument("--forget", action="store_true",
                   help="also forget the damaged records (now, or those an earlier repair set "
                        "aside): gc, which frees nothing while a record cannot be read, works "
                        "again and deletes them. Without it they are kept as evidence")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    from ckptfs.ops.repair import repair_run

    store = human.open_existing(args.store)
    res = repair_run(store.repo, args.run_id, writer=store.writer_name, dry_run=args.dry_run,
                     forget=args.forget)
    if args.json:
        print_json(res.to_json())
        return EXIT_OK
    run_id = human.clean(res.run)
    url = human.clean(store.url)
    if not res.needed:
        g = res.good
        print(f"run {run_id}: its head @{g.seq if g else '?'} reads fine; nothing to repair")
        if res.forgotten:
            print(f"forgot the damaged record{'s' if len(res.forgotten) > 1 else ''} "
                  f"{_seqs(res.forgotten)} an earlier repair set aside; 'ckptfs gc {url}' "
                  f"deletes {'them' if len(res.forgotten) > 1 else 'it'}")
        return EXIT_OK
    for d in res.damaged:
        print(f"damaged  {run_id}@{d.seq}  {d.category}: {human.clean(d.why)}")
    g = res.good
    assert g is not None
    many = len(res.damaged) > 1
    verb = "would commit" if res.dry_run else "committed"
    print(f"last good snapshot: {run_id}@{g.seq} ({human.short(g.id)}, boundary {g.boundary})")
    print(f"{verb} it again as {run_id}@{res.new_seq}"
          + ("" if res.new_snapshot is None else f" ({human.short(res.new_snapshot)})")
          + ", the run's new head")
    damaged = _seqs([d.seq for d in res.damaged])
    if res.forgotten:
        print(f"{'would forget' if res.dry_run else 'forgot'} the damaged record"
              f"{'s' if many else ''} {damaged}; 'ckptfs gc {url}' deletes "
              f"{'them' if many else 'it'}")
    else:
        print(f"kept the damaged record{'s' if many else ''} {damaged} as evidence: gc frees "
              f"no data while {'they are' if many else 'it is'} there; 'ckptfs repair {url} "
              f"{run_id} --forget' forgets {'them' if many else 'it'} when you are done")
    if res.dry_run:
        print("dry run: nothing was written")
    else:
        print(f"resume the run as usual: it continues at @{(res.new_seq or 0) + 1}")
    return EXIT_OK


def _seqs(seqs: "list[int] | tuple[int, ...]") -> str:
    return ", ".join(f"@{s}" for s in seqs)
