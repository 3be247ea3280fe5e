"""How long enumerations shrink in the default suite, and grow back with --long.

The default suite must stay within about ten minutes on two cores, so an enumeration whose full
form takes minutes runs a deterministic sample by default: every case of the kinds that found
bugs before (single points, the default layout) and a seeded sample of the rest. ``--long`` (or
``CKPTFS_LONG=1``) runs every case. The sample is the same on every run, so a failure reproduces.
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from typing import TypeVar

import pytest

T = TypeVar("T")


def long_run() -> bool:
    """True when the long enumerations run (--long sets CKPTFS_LONG=1 in pytest_configure)."""
    return bool(os.environ.get("CKPTFS_LONG"))


def sample(items: Sequence[T], n: int, *, seed: str) -> list[T]:
    """Every item with --long; otherwise ``n`` of them chosen by ``seed`` (the first and the last
    always among them, the order kept)."""
    if long_run() or len(items) <= n:
        return list(items)
    keep = {0, len(items) - 1} | set(random.Random(seed).sample(range(1, len(items) - 1), n - 2))
    return [items[i] for i in sorted(keep)]


def long_only(why: str) -> None:
    """Skip the rest of this test unless the long enumerations run; ``why`` says what the
    default suite covers instead."""
    if not long_run():
        pytest.skip(f"long variant (run with --long or CKPTFS_LONG=1): {why}")
