"""Opening the stores a command names, with the backend options of ``-o KEY=VALUE``.

``-o`` is restic's spelling of fsspec's ``storage_options``: ``-o endpoint_url=http://...``,
``-o anon=true``, ``-o client_kwargs.region_name=eu-west-1`` (a dotted key builds a nested
dict). A value that parses as JSON (true, 3, {"a": 1}) is taken as that, any other as text.
The options go to every store the command opens that is not on local disk (local stores take
none); ``main`` sets them once per command (``configure``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ckptfs.runtime.store import Store

#: the store a command uses when its STORE argument is left out
STORE_ENV = "CKPTFS_STORE"

_options: dict[str, Any] = {}


def parse_options(items: Iterable[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings as a storage_options dict; ValueError for a malformed one."""
    out: dict[str, Any] = {}
    for item in items:
        key, eq, raw = item.partition("=")
        if not eq or not key or any(not part for part in key.split(".")):
            raise ValueError(f"-o takes KEY=VALUE (e.g. -o endpoint_url=http://127.0.0.1:9000),"
                             f" not {item!r}: it is a backend option on every command; to "
                             f"write an entry to a file, 'ckptfs cat' takes --output FILE")
        try:
            value: Any = json.loads(raw)
        except ValueError:
            value = raw
        *parents, leaf = key.split(".")
        into = out
        for part in parents:
            nxt = into.setdefault(part, {})
            if not isinstance(nxt, dict):
                raise ValueError(f"-o {item!r}: {part!r} was given a value already")
            into = nxt
        if leaf in into:
            raise ValueError(f"-o {key} given twice")
        into[leaf] = value
    return out


_keyring: list[str] = []


def configure(options: dict[str, Any], keyring: str | None = None) -> None:
    _options.clear()
    _options.update(options)
    _keyring[:] = [keyring] if keyring else []


def _is_local(url: str) -> bool:
    return "://" not in url or url.startswith("file://")


def open_store(url: str, **kw: Any) -> Store:
    """``ckptfs.open_store`` with the command's ``-o`` options for a store not on local disk."""
    import ckptfs

    opts = {} if _is_local(os.fspath(url)) else dict(_options)
    if _keyring and "keyring" not in kw:
        kw["keyring"] = _keyring[0]
    return ckptfs.open_store(url, storage_options=opts, **kw)
