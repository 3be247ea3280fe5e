"""The maintenance requests of the protocol (README "Maintenance", capability
``maintenance``): ``copy SOURCE DEST NOW RUN`` and ``erase STORE NOW RUN REASON``, carried out
with ckptfs's own copy and erase; the runner reads the changed store back."""

from __future__ import annotations

from typing import Any

import ckptfs
from ckptfs.ops.copy import copy_runs
from ckptfs.ops.erase import erase


def do_copy(src: str, dst: str, now: int, run: str) -> str:
    """``copy SOURCE DEST NOW RUN``: copy run RUN of SOURCE into DEST (created when empty)."""
    s, d = ckptfs.open_store(src), ckptfs.open_store(dst)
    try:
        copy_runs(s.repo, d.repo, runs=[run], now=now, workers=1)
    finally:
        s.close()
        d.close()
    return "ok"


def do_erase(store: str, now: int, run: str, reason: str) -> str:
    """``erase STORE NOW RUN REASON``: erase run RUN of STORE whole."""
    s = ckptfs.open_store(store)
    try:
        erase(s.repo, run, reason=reason, now=now)
    finally:
        s.close()
    return "ok"


def every_container(repo: Any) -> list[str]:
    """The paths of every stray record and pack of the store: what gc reads and judges in a
    store without ``complete-locators``, where no rule lets it delete one unread (spec/v2.md
    9.2)."""
    from ckptfs.ops.repack import packs
    from ckptfs.ops.runscan import RecordCache
    from ckptfs.format.containers import RecordRef
    from ckptfs.store.containers import container_path

    cache = RecordCache()
    held: list[Any] = []
    for run_id in repo.run_ids():
        held += [RecordRef(run_id, s) for s in cache.listing(repo.storage, run_id).strays]
    held += list(packs(repo.storage))
    return sorted(container_path(r) for r in held)
