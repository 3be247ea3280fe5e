"""The ``ckptfs`` command line: argument parsing and printing only.

Each subcommand lives in a module ``ckptfs/cli/cmd_<name>.py`` that defines
``register(subparsers) -> None``; modules are discovered, so adding a command touches no
shared file. Exit codes: 0 success, 1 the check found problems, 2 usage error (bad arguments,
a URL no backend can open), 3 store error (not found, corrupt, conflict, credentials, ...),
130 interrupted.

Every character a command prints goes through ``human.SafeStream``: control characters and
bidi overrides from a store (run ids, labels, ledger keys, messages) are shown as ``\\uXXXX``,
never sent to the terminal; JSON output is unchanged in meaning (the escape is JSON's).
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
from collections.abc import Sequence
from typing import Any, TextIO, cast

from ckptfs.errors import CkptfsError, InvalidURL

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, EXIT_STORE, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

OPTION_HELP = ("a backend option, fsspec's storage_options (repeatable): -o endpoint_url=URL, "
               "-o anon=true, -o client_kwargs.region_name=eu-west-1; values are JSON or text; "
               "for every store of the command not on local disk")


class _TrialFailed(Exception):
    """A parse that failed while ``CliParser.trial`` was set (nothing was printed)."""


class CliParser(argparse.ArgumentParser):
    """argparse, but a trial parse raises instead of printing and exiting (CKPTFS_STORE)."""

    trial = False

    def error(self, message: str) -> Any:
        if CliParser.trial:
            raise _TrialFailed(message)
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    from ckptfs._version import __version__

    parser = CliParser(
        prog="ckptfs",
        description="Inspect, verify, copy and maintain ckptfs snapshot stores. "
                    "STORE is a local path or any fsspec URL (s3://bucket/prefix, memory://x, ...).",
        epilog="Exit codes: 0 ok, 1 problems found, 2 usage, 3 store error. "
               "Every read command takes --json for scripts. A STORE left out is taken from "
               "the CKPTFS_STORE environment variable.")
    parser.add_argument("--version", action="version", version=f"ckptfs {__version__}")
    parser.add_argument("-o", "--option", action="append", default=[], dest="top_options",
                        metavar="KEY=VALUE", help=OPTION_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    import ckptfs.cli as pkg

    for mod in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        if mod.name.startswith("cmd_"):
            importlib.import_module(f"ckptfs.cli.{mod.name}").register(sub)
    for cmd in sub.choices.values():  # -o after the command too: one meaning on every command
        cmd.add_argument("-o", "--option", action="append", default=[], dest="options",
                         metavar="KEY=VALUE", help=OPTION_HELP)
        cmd.add_argument("--keyring", default=None, metavar="KEYRING",
                         help="the keyring of an encrypted store (a folder path or URL; "
                              "default: the CKPTFS_KEYRING environment variable)")
    return parser


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """Parse ``argv``; when that fails and CKPTFS_STORE is set, parse again with its value as
    the STORE right after the command (``CKPTFS_STORE=s3://b/p ckptfs log RUN``)."""
    import os

    from ckptfs.cli.stores import STORE_ENV

    env = os.environ.get(STORE_ENV)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    at = next((i for i, a in enumerate(argv) if a in sub.choices), None)
    if (at is not None and argv[at] == "effects" and at + 1 < len(argv)
            and argv[at + 1] in ("settle", "approve", "reject")
            and not os.path.exists(argv[at + 1])):
        del argv[at]  # 'ckptfs effects settle ...' is 'ckptfs settle ...' (not a store so named)
    if not env or at is None:
        return parser.parse_args(argv)
    CliParser.trial = True
    try:
        try:
            return parser.parse_args(argv)
        except _TrialFailed:
            pass
        try:
            return parser.parse_args([*argv[:at + 1], env, *argv[at + 1:]])
        except _TrialFailed:
            pass
    finally:
        CliParser.trial = False
    return parser.parse_args(argv)  # prints the error of the command as typed


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=True, default=str)
    sys.stdout.write("\n")


def main(argv: Sequence[str] | None = None) -> int:
    from ckptfs.cli.human import SafeStream

    saved = sys.stdout, sys.stderr
    sys.stdout = cast(TextIO, SafeStream(sys.stdout))
    sys.stderr = cast(TextIO, SafeStream(sys.stderr))
    try:
        return _main(argv)
    finally:
        sys.stdout, sys.stderr = saved


def _main(argv: Sequence[str] | None) -> int:
    from ckptfs.cli.human import clean

    from ckptfs.cli import stores

    parser = build_parser()
    args = _parse(parser, list(sys.argv[1:] if argv is None else argv))
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        stores.configure(stores.parse_options([*args.top_options, *args.options]),
                         keyring=getattr(args, "keyring", None))
    except ValueError as e:
        print(f"ckptfs: error (usage): {clean(e)}", file=sys.stderr)
        return EXIT_USAGE
    try:
        rc: int = args.func(args)
        return rc
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except CkptfsError as e:
        print(f"ckptfs: error ({e.category}): {clean(e)}", file=sys.stderr)
        return EXIT_USAGE if isinstance(e, InvalidURL) else EXIT_STORE
    except BrokenPipeError:
        return EXIT_OK
    except OSError as e:  # a local file the command itself writes or reads (cat --output FILE, archives)
        print(f"ckptfs: error (storage): {clean(e)}", file=sys.stderr)
        return EXIT_STORE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
