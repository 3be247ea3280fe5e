"""Format version 1 stores for tests: copies of the golden stores (tests/golden/), since
ckptfs writes no version 1 store any more (it reads them, upgrades and copies them)."""

from __future__ import annotations

import shutil
from pathlib import Path

GOLDEN = Path(__file__).resolve().parent / "golden"


def v1_store(into: Path, name: str = "v1-small-chunks") -> str:
    """A copy of the golden version 1 store ``name`` at ``into`` (created); its URL.
    ``v1-small-chunks``: run ``chat``, 6 snapshots over many small chunks; ``v1-basic``: runs
    ``alpha``, ``beta``, ``gamma`` (one reference is missing on every machine);
    ``v1-ledger``: run ``agent`` with effect ledgers."""
    shutil.copytree(GOLDEN / name / "store", into)
    return str(into)
