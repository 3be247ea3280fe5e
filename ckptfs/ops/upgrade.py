"""Upgrade a version 1 store to version 2 in place (spec/v2.md section 10).

The config is the one file rewritten: the same config with ``version: 2`` and the optional
feature ``v1-objects`` (the store keeps its loose chunks, manifests and v1 records, which every
v2 reader reads). Nothing else is written and no snapshot id changes; new commits are v2
records. Done under the maintenance lease, so no gc or erase runs meanwhile; a v1 writer still
running is refused at its next config read (it rejects version 2) and its commits until then
stay readable.
"""

from __future__ import annotations

import attrs

from ckptfs.format.models import StoreConfig
from ckptfs.format.names import CONFIG_PATH
from ckptfs.ops.lease import MaintenanceLease
from ckptfs.store.repository import Repository

V1_OBJECTS = "v1-objects"


@attrs.frozen
class UpgradeReport:
    store: str
    before: int
    after: int
    changed: bool


def upgrade(repo: Repository, *, dry_run: bool = False) -> UpgradeReport:
    """Rewrite a v1 store's config as version 2; a v2 store is left as it is."""
    cfg = repo.config
    if cfg.version >= 2:
        return UpgradeReport(repo.url, cfg.version, cfg.version, False)
    new = attrs.evolve(cfg, version=2, optional=tuple(dict.fromkeys(
        (*cfg.optional, V1_OBJECTS))))
    if dry_run:
        return UpgradeReport(repo.url, cfg.version, 2, True)
    with MaintenanceLease(repo.storage, deletes=False) as lease:
        lease.check()
        current = StoreConfig.from_bytes(repo.storage.read(CONFIG_PATH))
        if current.version >= 2:  # upgraded by someone else meanwhile
            return UpgradeReport(repo.url, 1, current.version, False)
        repo.storage.replace(CONFIG_PATH, new.to_bytes())
    repo._config = None
    repo.load_config()
    return UpgradeReport(repo.url, 1, 2, True)
