"""Reporting a usage error from inside a command (exit code 2, message on stderr)."""

from __future__ import annotations

import sys

from ckptfs.cli import EXIT_USAGE


def usage_error(command: str, message: str) -> int:
    from ckptfs.cli.human import clean

    print(f"ckptfs {command}: {clean(message)}", file=sys.stderr)
    return EXIT_USAGE
