"""What a new store gets: its layout version and the settings of its config, from the caller
or from the environment (``CKPTFS_FORMAT_VERSION``, ``CKPTFS_CHECK_WINDOW_MS``)."""

from __future__ import annotations

import os
from typing import Any

from ckptfs.format.models import FORMAT_VERSION, SUPPORTED_VERSIONS


#: environment variable choosing the layout of new stores (1 or 2; default 2)
FORMAT_ENV = "CKPTFS_FORMAT_VERSION"
#: environment variable giving new version 2 stores a check window (ms) in their config
WINDOW_ENV = "CKPTFS_CHECK_WINDOW_MS"


def default_version(version: int | None = None) -> int:
    """The layout a new store gets: ``version``, else CKPTFS_FORMAT_VERSION, else the newest."""
    if version is None:
        text = os.environ.get(FORMAT_ENV, "")
        version = int(text) if text in ("1", "2") else FORMAT_VERSION
    if version not in SUPPORTED_VERSIONS:
        raise ValueError(f"store format version {version} is not one of {SUPPORTED_VERSIONS}")
    return version


def initial_settings(version: int, settings: dict[str, Any] | None) -> dict[str, Any]:
    """The settings a new store's config gets: ``settings``, plus on version 2 stores the
    check window CKPTFS_CHECK_WINDOW_MS names when ``settings`` has none (spec/v2.md 5.4; the
    window must be in the config, where every writer and collector reads the same value)."""
    out = dict(settings or {})
    text = os.environ.get(WINDOW_ENV, "")
    if version >= 2 and "check_window_ms" not in out and text.isdigit():
        out["check_window_ms"] = int(text)
    return out
