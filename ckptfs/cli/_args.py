"""What many commands share: a subcommand that takes STORE first, and ``--break-lease``.

One helper for each shape that used to be written out in every ``cmd_*`` module, so that a
command's parser and its lease take-over mean the same everywhere. The help texts and the
order of the arguments are those the modules had (``ckptfs CMD --help`` is unchanged).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

#: the help of ``--break-lease`` (forget, gc and erase: the commands that take the lease)
BREAK_LEASE_HELP = ("take the maintenance lease even if another forget/gc/erase seems to "
                    "hold it (only when you know that process is gone; prints a warning)")


def store_command(sub: "argparse._SubParsersAction[argparse.ArgumentParser]", name: str,
                  run: Callable[[argparse.Namespace], int], **parser: Any,
                  ) -> argparse.ArgumentParser:
    """Subcommand ``name`` (``help=``, ``description=`` ... as ``add_parser`` takes them) whose
    first argument is ``STORE`` and that runs ``run(args)``; the caller adds the rest."""
    p = sub.add_parser(name, **parser)
    p.add_argument("store", metavar="STORE")
    p.set_defaults(func=run)
    return p


def add_break_lease(p: argparse.ArgumentParser) -> None:
    """The ``--break-lease`` option of a command that takes the store's maintenance lease."""
    p.add_argument("--break-lease", action="store_true", help=BREAK_LEASE_HELP)


def break_lease(args: argparse.Namespace) -> None:
    """With ``--break-lease``: take over a maintenance lease whose holder is gone, and print
    the warning ``break_warning`` gives (who held it) on stderr. Without it: nothing."""
    if not args.break_lease:
        return
    import sys

    from ckptfs.cli import stores as _stores
    from ckptfs.ops.lease import break_held_lease, break_warning

    storage = _stores.open_store(args.store).storage
    warning = break_warning(storage, break_held_lease(storage))
    if warning:
        print(warning, file=sys.stderr)
