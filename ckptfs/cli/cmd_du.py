"""``ckptfs du STORE``: bytes per run and snapshot, sharing, expiry and personal data."""

from __future__ import annotations

import argparse

from ckptfs.cli import EXIT_OK, human, print_json
from ckptfs.cli._args import store_command
from ckptfs.cli import stores as _stores


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = store_command(sub, "du", run, help="disk usage per run and snapshot; expiry; personal data",
                      description="Bytes per run and per snapshot (unique vs shared with other "
                                  "snapshots), oldest snapshot, expired snapshots, dedup ratio, "
                                  "and which entries are labeled as personal data (pii). Every "
                                  "object a snapshot holds counts: its entries' chunks, its "
                                  "manifest, its effect ledger's chunks and the ledger's large "
                                  "results. Text shows KiB/MiB; --json exact bytes.")
    p.add_argument("--run", action="append", dest="runs", metavar="RUN",
                   help="only this run (repeatable; an unknown run is an error)")
    p.add_argument("--snapshots", action="store_true", help="one line per snapshot too")
    p.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    from ckptfs.ops.runs import require_runs
    from ckptfs.ops.usage import usage

    repo = _stores.open_store(args.store).repo
    u = usage(repo, require_runs(repo, args.runs))
    if args.json:
        print_json(u)
        return EXIT_OK
    size = human.size
    rows = []
    for r in u["runs"]:  # type: ignore[attr-defined]
        rows.append([r["run"], str(r["snapshots"]), size(r["stored_bytes"]),
                     size(r["unique_bytes"]), size(r["shared_bytes"]), size(r["logical_bytes"]),
                     human.iso(r["oldest"]), str(len(r["expired"]))])
    print(human.table(rows, ["RUN", "SNAPS", "STORED", "UNIQUE", "SHARED", "LOGICAL", "OLDEST",
                             "EXPIRED"]))
    if args.snapshots:
        for r in u["runs"]:  # type: ignore[attr-defined]
            for s in r["snapshot_list"]:
                pii = f"  pii: {','.join(s['pii_entries'])}" if s["pii_entries"] else ""
                print(f"  {human.clean(r['run'])}@{s['seq']:<6} {s['boundary']:<14} unique "
                      f"{size(s['unique_bytes']):>10}  shared {size(s['shared_bytes']):>10}  "
                      f"expires {human.iso(s['expires'])}"
                      f"{' (expired)' if s['expired'] else ''}{human.clean(pii)}")
    ratio = u["dedup_ratio"]
    print(f"total: {human.count(u['snapshots'], 'snapshot')}, "  # type: ignore[arg-type]
          f"{human.count(u['chunks'], 'chunk')}, "  # type: ignore[arg-type]
          f"{size(u['stored_bytes'])} stored, "  # type: ignore[arg-type]
          f"{size(u['logical_bytes'])} logical, "  # type: ignore[arg-type]
          f"dedup ratio {ratio if ratio is not None else '-'}, {u['expired']} expired")
    for p in u["pii"]:  # type: ignore[attr-defined]
        print(f"personal data: {p['run']}@{p['seq']} entries {', '.join(p['entries'])} "
              f"expires {human.iso(p['expires'])}")
    for prob in u["problems"]:  # type: ignore[attr-defined]
        print(f"problem  {prob}")
    return EXIT_OK
