"""``ckptfs copy SRC DST``: copy runs between stores, incrementally and resumably."""

from __future__ import annotations

import argparse
from typing import Any
from typing import TYPE_CHECKING

from ckptfs.cli import EXIT_OK, EXIT_PROBLEMS, human, print_json
from ckptfs.cli.progress import Progress, add_progress
from ckptfs.cli import stores as _stores

if TYPE_CHECKING:
    from ckptfs.ops.copy import CopyReport


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser(
        "copy", help="copy runs to another store (incremental, resumable, any backends)",
        description="Copy every run (or each --run) of SRC into DST, which may be on any backend "
                    "and is created with SRC's config if absent. Only chunks DST lacks are sent; "
                    "every object is verified against its digest on the way; each snapshot's "
                    "chunks, then manifest, then run record are written in sequence order, so "
                    "DST is a valid store at every moment. Interrupted, run it again: it "
                    "continues where it stopped. Running it twice copies nothing the second time. "
                    "A copy is a backup: DST keeps its own history, and snapshots forgotten in "
                    "SRC stay in DST (forget there, or pass --mirror). Erasures always travel: a "
                    "run or snapshot erased in SRC is erased in DST too. Expiry overrides "
                    "travel ahead of the records (the earlier expiry wins) and expired "
                    "snapshots are not sent; something forgotten or erased in DST is not sent "
                    "again.",
        epilog="Exit 1 when a run's history differs between the stores (written to both); "
               "nothing more of that run is copied.")
    p.add_argument("src", metavar="SRC")
    p.add_argument("dst", metavar="DST")
    p.add_argument("--run", action="append", dest="runs", metavar="RUN",
                   help="copy only this run (repeatable)")
    p.add_argument("--mirror", action="store_true",
                   help="also repeat SRC's forgets in DST: what SRC forgot is forgotten in DST "
                        "(its gc then frees the space)")
    p.add_argument("--dry-run", action="store_true",
                   help="say what would be copied, skipped, erased and (with --mirror) "
                        "forgotten; change nothing")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    add_progress(p)
    p.set_defaults(func=run)


def _dst_keyring(src: Any, args: argparse.Namespace) -> dict[str, Any]:
    """A copy of an encrypted store is encrypted under the same keyring (encryption.md 7):
    a new destination is opened with the source's keyring."""
    from ckptfs.storage.encrypted import EncryptedStorage

    st = src.storage
    return {"keyring": st.keyring} if isinstance(st, EncryptedStorage) else {}


def run(args: argparse.Namespace) -> int:
    from ckptfs.ops.copy import copy_runs

    src = human.open_existing(args.src)
    dst = _stores.open_store(args.dst, **_dst_keyring(src, args))
    with Progress("copy", mode=args.progress) as bar:
        bar.watch(src.storage)
        if dst.storage is not src.storage:
            bar.watch_writes(dst.storage)
        report = copy_runs(src.repo, dst.repo, runs=args.runs, progress=bar, mirror=args.mirror,
                           dry_run=args.dry_run)
    if args.json:
        print_json(report.to_json())
    elif report.dry_run:
        _print_plan(report, dst.url)
    else:
        print(f"{report.runs} run(s): {report.snapshots_copied} snapshot(s) copied, "
              f"{report.snapshots_present} already there; {report.chunks_copied} chunk(s) "
              f"copied, {report.chunks_present} already there; "
              f"{human.size(report.bytes_copied)} written to {dst.url}")
        life = report.life
        if report.snapshots_skipped or life.controls_written or life.erased:
            print(f"retention: {report.snapshots_skipped} snapshot(s) not copied (expired, "
                  f"forgotten or erased), {life.controls_written} expiry/retired/tombstone "
                  f"object(s) written" + "".join(f"; erased {e} here too" for e in life.erased))
        if life.forgotten:
            print(f"mirror: forgot {human.count(len(life.forgotten), 'snapshot')} here too "
                  f"({_refs(life.forgotten)}); 'ckptfs gc {dst.url}' frees what nothing uses")
        for c in report.conflicts:
            print(f"conflict: {c}")
    return EXIT_OK if report.ok else EXIT_PROBLEMS


def _print_plan(report: CopyReport, dst: str) -> None:
    """What a copy would do (``--dry-run``), in the words of the copy's own report."""
    life = report.life
    print(f"dry run, nothing changed in {dst}")
    print(f"{report.runs} run(s): would copy {human.count(report.snapshots_copied, 'snapshot')}"
          + (f" ({_refs(report.would_copy)})" if report.would_copy else "")
          + f"; {report.snapshots_present} already there; {report.snapshots_skipped} not "
          "copied (expired, forgotten here, or erased)")
    if life.erased:
        print(f"would erase here too: {', '.join(life.erased)}")
    if report.mirror:
        print(f"would forget here too: {_refs(life.forgotten) or 'nothing'}")
    if life.controls_written:
        print(f"would write {life.controls_written} expiry/retired/tombstone object(s)")
    if report.config_created:
        print(f"would create {dst} with the source's config")
    for c in report.conflicts:
        print(f"conflict: {c}")


def _refs(refs: list[str]) -> str:
    """``r0@1..@8; r1@3, @5``: ``RUN@SEQ`` items, each run's seqs as ranges."""
    by_run: dict[str, list[int]] = {}
    for ref in refs:
        run, _, seq = ref.rpartition("@")
        by_run.setdefault(run, []).append(int(seq))
    return "; ".join(f"{human.clean(run)}{human.spans(sorted(seqs))}"
                     for run, seqs in by_run.items())
