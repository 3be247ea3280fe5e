"""``ckptfs keys rotate [KEYRING]``: replace an encrypted store's master key (spec/encryption.md
4.3): every scope key in the keyring is rewrapped under the new key; no object of the store,
and none of its copies, is rewritten."""

from __future__ import annotations

import argparse
import os

from ckptfs.cli import EXIT_OK, print_json
from ckptfs.cli._usage import usage_error
from ckptfs.cli.progress import Progress, add_progress


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("keys", help="manage the keyring of an encrypted store",
                       description="Manage the keyring of an encrypted store.")
    keys = p.add_subparsers(dest="keys_command", metavar="ACTION")
    r = keys.add_parser(
        "rotate", help="replace the keyring's master key (rewraps scope keys, rewrites no data)",
        description="Replace the master key of KEYRING (default: --keyring, or the "
                    "CKPTFS_KEYRING environment variable) with a new key file, a new passphrase "
                    "(read from the environment variable --new-passphrase-env names, never from "
                    "the command line) or an AWS KMS key, and rewrap every scope key under it. "
                    "The store and its copies are not touched. The old master key (or "
                    "passphrase) is read as every command reads it (CKPTFS_KEYRING_PASSPHRASE). "
                    "Safe to interrupt: before its switch the old key still opens every scope, "
                    "after it the new one; run it again to complete. Run it while no writer "
                    "creates runs (a scope created meanwhile is carried over when seen).")
    r.add_argument("ring", metavar="KEYRING", nargs="?", default=None,
                   help="the keyring folder or URL (default: --keyring or CKPTFS_KEYRING)")
    new = r.add_mutually_exclusive_group()
    new.add_argument("--new-passphrase-env", metavar="VAR",
                     help="protect the keyring by argon2id over the passphrase in environment "
                          "variable VAR (default: a new master key file in the keyring folder)")
    new.add_argument("--kms-key-id", metavar="KEY_ID",
                     help="wrap the scope keys with this AWS KMS key (boto3's default "
                          "credentials and region)")
    r.add_argument("--json", action="store_true", help="print the result as JSON")
    add_progress(r)
    # -o and --keyring after 'rotate' too (the top-level ones belong to 'keys'); SUPPRESS, so
    # that a value given before 'rotate' is not overwritten by this parser's default
    r.add_argument("-o", "--option", action="append", default=argparse.SUPPRESS,
                   dest="options", metavar="KEY=VALUE", help="a backend option of KEYRING")
    r.add_argument("--keyring", default=argparse.SUPPRESS, metavar="KEYRING",
                   help="the keyring (as KEYRING)")
    r.set_defaults(func=rotate)
    p.set_defaults(func=lambda args: usage_error("keys", "give an action: keys rotate"))


def rotate(args: argparse.Namespace) -> int:
    from ckptfs.cli import stores
    from ckptfs.storage.keyring import KEYRING_ENV, Keyring
    from ckptfs.storage.open import open_storage

    url = args.ring or getattr(args, "keyring", None) or os.environ.get(KEYRING_ENV)
    if not url:
        return usage_error("keys rotate", "name the keyring: KEYRING, --keyring or "
                                          f"{KEYRING_ENV}")
    passphrase = None
    if args.new_passphrase_env:
        passphrase = os.environ.get(args.new_passphrase_env)
        if not passphrase:
            return usage_error("keys rotate", f"environment variable "
                                              f"{args.new_passphrase_env} holds no passphrase")
    opts = {} if "://" not in url or url.startswith("file://") else dict(stores._options)
    ring = Keyring(open_storage(url, **opts))
    before = ring.gen
    with Progress("rotate", mode=args.progress, items="scopes") as bar:
        bar.watch(ring.storage)
        new = ring.rotate(passphrase=passphrase, kms_key_id=args.kms_key_id,
                          progress=lambda done, total: bar(done, total, "scope keys rewrapped"))
        scopes = bar.done
    protected = ("AWS KMS key " + args.kms_key_id if args.kms_key_id else
                 "a passphrase (argon2id)" if passphrase else "a new master key file")
    if args.json:
        print_json({"keyring": url, "generation": new.gen, "previous_generation": before,
                    "scopes_rewrapped": scopes, "protected_by": protected})
    else:
        print(f"rotated the master key of {url}: generation {before} -> {new.gen}, "
              f"{scopes} scope key(s) rewrapped, now protected by {protected}. The old master "
              "key opens nothing in this keyring any more; destroy its backups (and keyring "
              "backups made before now, which it still opens)")
    return EXIT_OK
