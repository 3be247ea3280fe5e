"""Formatting for people: sizes, ages, times, short ids, and opening the store a command names."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ckptfs.runtime.store import Store


def size(n: int | None) -> str:
    """``1.5 MiB`` style; ``-`` for unknown."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def age(seconds: int | None) -> str:
    """``42s``, ``7m``, ``3h``, ``12d``; ``-`` for unknown."""
    if seconds is None:
        return "-"
    for unit, span in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= span:
            return f"{seconds // span}{unit}"
    return f"{seconds}s"


def when(ms: int | None) -> str:
    """A UTC time stamp to the second."""
    if ms is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(ms / 1000))


def short(snapshot_id: str | None) -> str:
    """The first 12 hex digits of ``blake3:<hex>`` (accepted back by every command)."""
    if not snapshot_id:
        return "-"
    return snapshot_id.split(":", 1)[-1][:12]


def table(rows: list[list[str]], header: list[str]) -> str:
    """Left-aligned columns separated by two spaces."""
    cols = [header, *rows]
    widths = [max(len(r[i]) for r in cols) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cols)


def open_existing(url: str) -> Store:
    """The store at ``url``; NotAStore (exit 3, with a hint) when there is none."""
    import ckptfs

    store = ckptfs.open_store(url)
    store.repo.config
    return store
