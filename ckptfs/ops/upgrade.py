"""Upgrade a store in place (spec/v2.md section 10 and 2, "complete locators").

A version 1 store: the config is the one file rewritten: the same config with ``version: 2``,
the optional feature ``v1-objects`` (the store keeps its loose chunks, manifests and v1
records, which every v2 reader reads) and the required feature ``complete-locators`` (its v1
records locate nothing, their chunks are loose objects gc judges by the mark; every v2 record
the new code writes follows the rule). Nothing else is written and no snapshot id changes; new
commits are v2 records.

A version 2 store without ``complete-locators`` (written by an earlier ckptfs, whose writers
may have located a chunk in a container only process memory named): every visible record is
checked; the feature is added only when each chunk every visible snapshot needs is a body of
its record, located by it, or (``v1-objects``) a loose object. Otherwise nothing changes and
the records with holes are reported (commit them again, or copy the store, to fill them).

Both also get the required feature ``compressed-headers`` (spec/v2.md 2, 3.1.1): new records'
headers are stored as zstd frames; existing records keep their form. A v2 store that has
complete locators but not this feature gets it alone (nothing to check).

Done under the maintenance lease, so no gc or erase runs meanwhile. A writer of an earlier
ckptfs still running is refused at its next config read (it does not know the required
feature); stop such writers before upgrading, since one that keeps the old config in memory
could still write a record with a hole (RELIABILITY.md).
"""

from __future__ import annotations

import attrs

from ckptfs.format.models import COMPLETE_LOCATORS, COMPRESSED_HEADERS, V2_REQUIRED, StoreConfig
from ckptfs.format.names import CONFIG_PATH
from ckptfs.ops.lease import MaintenanceLease
from ckptfs.ops.locator_holes import V1_OBJECTS, locator_holes
from ckptfs.store.repository import Repository

#: the most records with holes an upgrade names (the count is always given)
HOLES_SHOWN = 20


@attrs.frozen
class UpgradeReport:
    store: str
    before: int
    after: int
    changed: bool
    #: v2 stores: records checked for complete locators, and those with holes
    checked: int = 0
    holes: tuple[str, ...] = ()
    holes_total: int = 0
    #: the required features this upgrade added (or would add)
    added: tuple[str, ...] = ()


def _with(features: tuple[str, ...], *f: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys((*features, *f)))


def upgrade(repo: Repository, *, dry_run: bool = False) -> UpgradeReport:
    """Rewrite a v1 store's config as version 2, or give a v2 store ``complete-locators``
    (after checking its visible records) and ``compressed-headers``; a store that has both is
    left as it is."""
    cfg = repo.config
    if cfg.version >= 2:
        if COMPLETE_LOCATORS in cfg.required:
            return _compressed(repo, cfg, dry_run=dry_run)
        return _locators(repo, cfg, dry_run=dry_run)
    added = tuple(f for f in V2_REQUIRED if f not in cfg.required)
    new = attrs.evolve(cfg, version=2, optional=_with(cfg.optional, V1_OBJECTS),
                       required=_with(cfg.required, *V2_REQUIRED))
    if dry_run:
        return UpgradeReport(repo.url, cfg.version, 2, True, added=added)
    with MaintenanceLease(repo.storage, deletes=False) as lease:
        lease.check()
        current = StoreConfig.from_bytes(repo.storage.read(CONFIG_PATH))
        if current.version >= 2:  # upgraded by someone else meanwhile
            return UpgradeReport(repo.url, 1, current.version, False)
        repo.storage.replace(CONFIG_PATH, new.to_bytes())
    repo._config = None
    repo.load_config()
    return UpgradeReport(repo.url, 1, 2, True, added=added)


def _compressed(repo: Repository, cfg: StoreConfig, *, dry_run: bool) -> UpgradeReport:
    """A v2 store with complete locators: add ``compressed-headers`` if it lacks it (new
    records' headers are then zstd frames; readers before 0.3.0 refuse the store)."""
    if COMPRESSED_HEADERS in cfg.required:
        return UpgradeReport(repo.url, 2, 2, False)
    if dry_run:
        return UpgradeReport(repo.url, 2, 2, True, added=(COMPRESSED_HEADERS,))
    with MaintenanceLease(repo.storage, deletes=False, config=cfg) as lease:
        lease.check()
        current = StoreConfig.from_bytes(repo.storage.read(CONFIG_PATH))
        if COMPRESSED_HEADERS in current.required:
            return UpgradeReport(repo.url, 2, 2, False)
        repo.storage.replace(CONFIG_PATH, attrs.evolve(
            current, required=_with(current.required, COMPRESSED_HEADERS)).to_bytes())
    repo._config = None
    repo.load_config()
    return UpgradeReport(repo.url, 2, 2, True, added=(COMPRESSED_HEADERS,))


def _locators(repo: Repository, cfg: StoreConfig, *, dry_run: bool) -> UpgradeReport:
    if dry_run:
        checked, holes = check_locators(repo)
        return UpgradeReport(repo.url, 2, 2, not holes, checked, tuple(holes[:HOLES_SHOWN]),
                             len(holes), added=() if holes else V2_REQUIRED)
    with MaintenanceLease(repo.storage, deletes=False, config=cfg) as lease:
        lease.check()
        checked, holes = check_locators(repo, lease.keep)
        current = StoreConfig.from_bytes(repo.storage.read(CONFIG_PATH))
        if holes or COMPLETE_LOCATORS in current.required:
            return UpgradeReport(repo.url, 2, 2, False, checked, tuple(holes[:HOLES_SHOWN]),
                                 len(holes))
        lease.check()
        added = tuple(f for f in V2_REQUIRED if f not in current.required)
        repo.storage.replace(CONFIG_PATH, attrs.evolve(
            current, required=_with(current.required, *V2_REQUIRED)).to_bytes())
    repo._config = None
    repo.load_config()
    return UpgradeReport(repo.url, 2, 2, True, checked, added=added)


def check_locators(repo: Repository, keep: object = None) -> tuple[int, list[str]]:
    """``locator_holes`` as ``RUN@SEQ: why`` lines (what upgrade reports)."""
    checked, holes = locator_holes(repo, keep=keep)
    return checked, [f"{h.run}@{h.seq}: {h.why}" for h in holes]
