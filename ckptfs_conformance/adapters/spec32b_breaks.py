"""Issue 32, gaps 24-26: one deliberately broken reader per point ckptfs_conformance/
gen_spec32b.py pins (``--break ...`` of ckptfs's adapter); tests/test_spec32b.py checks that
each fails exactly its vectors."""

from __future__ import annotations

from typing import Any

SPEC32B_BREAKS: tuple[str, ...] = ("v2-remembered-places",)


def apply(rule: str) -> None:
    """Flip one rule (the full rule name)."""
    from ckptfs.store import containers as sc

    if rule == "v2-remembered-places":  # [spec/v2.md 6, One outcome] any place seen counts
        def anywhere(self: Any, d: Any) -> bool:
            return False
        setattr(sc.ChunkReader, "_owned", anywhere)
    else:
        raise ValueError(rule)
