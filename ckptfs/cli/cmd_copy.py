"""``ckptfs copy SRC DST``: copy runs between stores, incrementally and resumably."""

from __future__ import annotations

import argparse
import sys
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
    p.add_argument("--encrypt", action="store_true",
                   help="DST is (or becomes) an encrypted store: from a plaintext SRC, its "
                        "keyring is --dst-keyring, else --keyring (or CKPTFS_KEYRING); every "
                        "run gets a key scope of its own there")
    p.add_argument("--dst-keyring", default=None, metavar="KEYRING",
                   help="DST's keyring when it is not SRC's (a folder path or URL; an empty "
                        "folder for a new DST): the copy seals every run again under a key "
                        "scope of this keyring, subjects kept together")
    p.add_argument("--decrypt", action="store_true",
                   help="allow copying an encrypted SRC into a plaintext DST, which then holds "
                        "the copied runs in the clear (refused without it)")
    add_progress(p)
    p.set_defaults(func=run)


def _dst_keyring(src: Any, args: argparse.Namespace) -> dict[str, Any]:
    """How DST is opened (spec/encryption.md 7.1): with --dst-keyring, that keyring; with
    --decrypt, without any; with --encrypt from a plaintext SRC, the command's keyring
    (--keyring or CKPTFS_KEYRING); from an encrypted SRC, SRC's keyring (a copy under the same
    keys, encryption.md 7). Otherwise as every command opens a store."""
    import os

    from ckptfs.storage.encrypted import EncryptedStorage
    from ckptfs.storage.keyring import KEYRING_ENV

    st = src.storage
    if args.dst_keyring:
        return {"keyring": args.dst_keyring}
    if args.decrypt:
        return {"keyring": None}
    if isinstance(st, EncryptedStorage):
        return {"keyring": st.keyring}
    if args.encrypt:
        ring = args.keyring or os.environ.get(KEYRING_ENV)
        if not ring:
            raise ValueError("--encrypt needs the destination's keyring: --dst-keyring KEYRING, "
                             "--keyring KEYRING or CKPTFS_KEYRING")
        return {"keyring": ring}
    return {}


def _open_src(args: argparse.Namespace) -> Any:
    """SRC, with the command's keyring when it is encrypted; a plaintext SRC with --encrypt
    (whose --keyring names DST's keyring) without it."""
    if args.encrypt and not args.dst_keyring:
        store = _stores.open_store(args.src, keyring=None)  # CKPTFS_KEYRING still opens an
        store.repo.config                                    # encrypted SRC
        return store
    return human.open_existing(args.src)


def run(args: argparse.Namespace) -> int:
    from ckptfs.cli import EXIT_USAGE
    from ckptfs.ops.copy import copy_runs

    if args.decrypt and (args.encrypt or args.dst_keyring):
        print("ckptfs: error (usage): --decrypt writes a plaintext DST; it contradicts "
              f"{'--encrypt' if args.encrypt else '--dst-keyring'}", file=sys.stderr)
        return EXIT_USAGE
    src = _open_src(args)
    try:
        how = _dst_keyring(src, args)
    except ValueError as e:
        print(f"ckptfs: error (usage): {e}", file=sys.stderr)
        return EXIT_USAGE
    _refuse_silent_decrypt(src, args)
    dst = _stores.open_store(args.dst, **how)
    if args.encrypt:
        _refuse_plaintext_dst(dst)
    with Progress("copy", mode=args.progress) as bar:
        bar.watch(src.storage)
        if dst.storage is not src.storage:
            bar.watch_writes(dst.storage)
        report = copy_runs(src.repo, dst.repo, runs=args.runs, progress=bar, mirror=args.mirror,
                           dry_run=args.dry_run, decrypt=args.decrypt)
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


def _refuse_silent_decrypt(src: Any, args: argparse.Namespace) -> None:
    """An encrypted SRC and an existing plaintext DST, without --decrypt: refused
    (KeyringError, exit 3) before anything is opened for writing, saying what it would do."""
    from ckptfs.format.crypto import FEATURE
    from ckptfs.storage.encrypted import EncryptedStorage
    from ckptfs.storage.keyring import KeyringError

    if args.decrypt or args.dst_keyring or not isinstance(src.storage, EncryptedStorage):
        return
    cfg = _stores.open_store(args.dst, keyring=None).repo.load_config()
    if cfg is not None and FEATURE not in cfg.required:
        raise KeyringError(f"{src.url} is encrypted and {args.dst} is a plaintext store: the "
                           "copy would write the copied runs there decrypted. Pass --decrypt "
                           "to do so knowingly, or copy into an encrypted store")


def _refuse_plaintext_dst(dst: Any) -> None:
    """--encrypt into a store that exists in plaintext: refused (KeyringError, exit 3)."""
    from ckptfs.storage.encrypted import EncryptedStorage
    from ckptfs.storage.keyring import KeyringError

    if not isinstance(dst.storage, EncryptedStorage):
        raise KeyringError(f"{dst.url} is a plaintext store: --encrypt copies into an "
                           "encrypted store (a new one, or one opened with its keyring)")


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
