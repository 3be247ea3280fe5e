"""What a new store gets and what a store must be to be written: ckptfs writes format version 2
only (it reads version 1). New stores' settings come from the caller or from the environment
(``CKPTFS_CHECK_WINDOW_MS``)."""

from __future__ import annotations

import os
from typing import Any

from ckptfs.errors import NotAStore, UpgradeRequired
from ckptfs.format.names import (
    CHUNKS,
    CONFIG_PATH,
    LEASES,
    MOVED,
    PACKS,
    RUNS,
    SNAPSHOTS,
    TMP,
    TOMBSTONES,
)
from ckptfs.storage.base import Storage

#: the retired environment variable that chose the layout of new stores: "1" is refused
FORMAT_ENV = "CKPTFS_FORMAT_VERSION"
#: environment variable giving new stores a check window (ms) in their config
WINDOW_ENV = "CKPTFS_CHECK_WINDOW_MS"


def refuse_v1_request() -> None:
    """UpgradeRequired when the environment still asks for version 1 stores
    (CKPTFS_FORMAT_VERSION=1): ckptfs no longer writes them, and a store of another version
    than asked must not appear silently."""
    if os.environ.get(FORMAT_ENV, "").strip() == "1":
        raise UpgradeRequired(
            f"{FORMAT_ENV}=1 asks for a format version 1 store, which ckptfs no longer writes "
            "(it still reads them). Unset it: new stores are version 2; readers older than "
            "ckptfs 0.2 cannot open them, 'ckptfs upgrade' turns a version 1 store into one.")


def check_writable(version: int, url: str) -> None:
    """UpgradeRequired when ``version`` is a version 1 store's: read, never changed."""
    if version < 2:
        raise UpgradeRequired(
            f"{url}: a format version 1 store, which ckptfs reads but no longer changes "
            f"(commit, forget, gc, erase, expire). Run 'ckptfs upgrade {url}' first (in "
            "place, it rewrites only the config; readers older than ckptfs 0.2 then no longer "
            f"open the store), or 'ckptfs copy {url} NEW_URL' to keep the version 1 store as "
            "it is.")


def initial_settings(settings: dict[str, Any] | None) -> dict[str, Any]:
    """The settings a new store's config gets: ``settings``, plus the check window
    CKPTFS_CHECK_WINDOW_MS names when ``settings`` has none (spec/v2.md 5.4; the window must
    be in the config, where every writer and collector reads the same value)."""
    out = dict(settings or {})
    text = os.environ.get(WINDOW_ENV, "")
    if "check_window_ms" not in out and text.isdigit():
        out["check_window_ms"] = int(text)
    return out


def refuse_foreign(storage: Storage) -> None:
    """NotAStore when the store's location holds entries ckptfs does not make (a user's
    files: a wrong path): a first checkpoint must not silently make a store among them.
    Hidden names (``.DS_Store``) and ``lost+found`` (a mounted disk's root) do not count."""
    ours = {CONFIG_PATH, CHUNKS, SNAPSHOTS, RUNS, TMP, TOMBSTONES, LEASES, PACKS, MOVED}
    foreign = sorted(n for n in storage.list("")
                     if n not in ours and not n.startswith(".") and n != "lost+found")
    if foreign:
        shown = ", ".join(repr(n) for n in foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise NotAStore(
            f"{storage.url}: holds {len(foreign)} entr{'y' if len(foreign) == 1 else 'ies'} "
            f"that are not a ckptfs store's ({shown}) and no store, so a first checkpoint "
            "does not make one here. Give the store a folder of its own (a new or empty "
            "one), or create it here on purpose with 'ckptfs init URL' (Store.init())")
