"""``ckptfs du STORE``: bytes per run and snapshot, sharing, expiry and personal data."""

from __future__ import annotations

import argparse
import time

from ckptfs.cli import EXIT_OK, print_json
from ckptfs.cli import stores as _stores


def _t(ms: object) -> str:
    if not isinstance(ms, int):
        return "never"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("du", help="disk usage per run and snapshot; expiry; personal data",
                       description="Bytes per run and per snapshot (unique vs shared with other "
                                   "snapshots), oldest snapshot, expired snapshots, dedup ratio, "
                                   "and which entries are labeled as personal data (pii).")
    p.add_argument("store", metavar="STORE")
    p.add_argument("--run", action="append", dest="runs", metavar="RUN")
    p.add_argument("--snapshots", action="store_true", help="one line per snapshot too")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import ckptfs
    from ckptfs.ops.usage import usage

    from ckptfs.ops.runs import require_runs

    repo = _stores.open_store(args.store).repo
    u = usage(repo, require_runs(repo, args.runs))
    if args.json:
        print_json(u)
        return EXIT_OK
    print(f"{'RUN':<32} {'SNAPS':>5} {'STORED':>12} {'UNIQUE':>12} {'SHARED':>12} "
          f"{'LOGICAL':>12}  OLDEST                EXPIRED")
    for r in u["runs"]:  # type: ignore[attr-defined]
        print(f"{r['run']:<32} {r['snapshots']:>5} {r['stored_bytes']:>12} "
              f"{r['unique_bytes']:>12} {r['shared_bytes']:>12} {r['logical_bytes']:>12}  "
              f"{_t(r['oldest'])}  {len(r['expired'])}")
        if args.snapshots:
            for s in r["snapshot_list"]:
                pii = f"  pii: {','.join(s['pii_entries'])}" if s["pii_entries"] else ""
                print(f"  @{s['seq']:<6} {s['boundary']:<14} unique {s['unique_bytes']:>10}  "
                      f"shared {s['shared_bytes']:>10}  expires {_t(s['expires'])}"
                      f"{' (expired)' if s['expired'] else ''}{pii}")
    print(f"total: {u['snapshots']} snapshots, {u['chunks']} chunks, {u['stored_bytes']} bytes "
          f"stored, {u['logical_bytes']} logical, dedup ratio {u['dedup_ratio']}, "
          f"{u['expired']} expired")
    for p in u["pii"]:  # type: ignore[attr-defined]
        print(f"personal data: {p['run']}@{p['seq']} entries {', '.join(p['entries'])} "
              f"expires {_t(p['expires'])}")
    for prob in u["problems"]:  # type: ignore[attr-defined]
        print(f"problem  {prob}")
    return EXIT_OK
