"""What a copy would do, without doing it (``ckptfs copy --dry-run``), and the checks a copy
makes before it writes anything: which runs, and the destination's config (created from the
source's when absent; a destination lacking a feature the source requires is refused).

The plan takes the same decisions as the copy, through the same code (``RunLife`` with
``dry=True``, which writes nothing): for each run, the erasures it would repeat, the seqs it
would retire or (with ``mirror``) forget, then for each source snapshot whether it is already
in the destination, would be skipped (expired, or forgotten or erased in the destination) or
would be sent. It reads the source's records and manifests and the destination's listings and
records; it sends no chunk, and does not count the bytes a copy would send (that needs every
snapshot's chunk list against what the destination holds).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

import attrs

from ckptfs.errors import CkptfsError, ConflictError, NotFound, UnsupportedFeature
from ckptfs.format import crypto
from ckptfs.format.models import (
    FORMAT_VERSION,
    V2_REQUIRED,
    WRITER_FEATURES,
    Manifest,
    StoreConfig,
)
from ckptfs.format.names import CONFIG_PATH
from ckptfs.ops.copy_history import diverged
from ckptfs.ops.copy_retention import RunLife, tombstoned_runs
from ckptfs.ops.copy_run import source_manifest
from ckptfs.storage.encrypted_open import is_encrypted_view
from ckptfs.store.lifecycle import read_tombstone
from ckptfs.store.new_store import check_writable, refuse_v1_request
from ckptfs.store.repository import Repository

if TYPE_CHECKING:
    from ckptfs.ops.copy import CopyReport


def select_runs(src: Repository, runs: Iterable[str] | None, dst: Repository | None = None
                ) -> list[str]:
    """``runs`` (default: every run of ``src``, erased ones included, whose tombstones travel);
    NotFound for a run ``src`` does not know. An encrypted ``src`` names no run it erased
    whole (the name died with the run's key: spec/encryption.md 5), so the runs of ``dst``
    are asked for by name: one tombstone lookup for each run ``dst`` holds that ``src`` does
    not list, so that the erasure reaches a copy key destruction cannot reach."""
    known = set(src.run_ids()) | tombstoned_runs(src.storage)
    if dst is not None and is_encrypted_view(src.storage):
        for run_id in sorted(set(dst.run_ids()) - known):
            try:
                if read_tombstone(src.storage, run_id) is not None:
                    known.add(run_id)
            except CkptfsError:
                continue  # not erased here, or unreadable: nothing to repeat
    run_ids = list(runs) if runs is not None else sorted(known)
    for run_id in run_ids:
        if run_id not in known:
            raise NotFound(f"no run {run_id!r} in {src.url}; 'ckptfs ls {src.url}' lists the runs")
    return run_ids


def refuse_missing_features(src: Repository, dst: Repository, dst_cfg: StoreConfig) -> None:
    """UnsupportedFeature when ``dst`` lacks a data feature ``src`` requires."""
    # encryption is how a store is kept, not what its data needs: a copy decides it
    # (ckptfs.ops.copy_keys)
    missing = sorted(set(src.config.required) - set(dst_cfg.required) - WRITER_FEATURES
                     - {crypto.FEATURE})
    if missing:
        raise UnsupportedFeature(
            f"{src.url} requires feature(s) {', '.join(missing)} that {dst.url} does not declare; "
            "copy into a new, empty destination instead")


def writer_features(cfg: StoreConfig) -> tuple[str, ...]:
    """``cfg``'s required features with the writer features a new (version 2) store gets:
    complete locators, which this copy's writes follow, and compressed record headers,
    which it writes (spec/v2.md 2)."""
    data = tuple(f for f in cfg.required if f not in WRITER_FEATURES)
    return (*data, *V2_REQUIRED)


def kept_as(cfg: StoreConfig, dst: Repository) -> StoreConfig:
    """``cfg`` (the source's) with the destination's encryption: the required feature and the
    setting of the keyring ``dst`` is opened with (spec/encryption.md 3), or neither for a
    plaintext destination."""
    from ckptfs.storage.encrypted_open import SETTING, new_config_fields

    required = tuple(f for f in cfg.required if f != crypto.FEATURE)
    settings = {k: v for k, v in cfg.settings.items() if k != SETTING}
    enc = new_config_fields(dst.storage)
    if enc is not None:
        required, settings = required + enc[0], {**settings, **enc[1]}
    return attrs.evolve(cfg, required=required, settings=settings)


def ensure_config(src: Repository, dst: Repository) -> bool:
    """Give ``dst`` the source's config (same chunker) if it has none; refuse a destination
    that lacks a feature the source requires. True when the config was created."""
    src_cfg = src.config
    dst_cfg = dst.load_config()
    if dst_cfg is None:
        # the source's config (chunker, settings, features), in version 2 (a v1 source's
        # optional features, such as v1-objects, do not describe the copy)
        refuse_v1_request()
        cfg = attrs.evolve(src_cfg, version=FORMAT_VERSION)
        cfg = attrs.evolve(cfg, required=writer_features(cfg))
        cfg = kept_as(cfg, dst)
        try:
            data = cfg.to_bytes() if cfg != src_cfg else src.storage.read(CONFIG_PATH)
            dst.storage.create(CONFIG_PATH, data)
            dst._configured(StoreConfig.from_bytes(data))  # what was created: not read back
            return True
        except FileExistsError:
            dst_cfg = dst.config
    check_writable(dst_cfg.version, dst.url)
    refuse_missing_features(src, dst, dst_cfg)
    return False


def plan_copy(src: Repository, dst: Repository, run_ids: list[str], *, mirror: bool,
              now: int | None, report: CopyReport) -> CopyReport:
    """Fill ``report`` with what copying ``run_ids`` would do; nothing is written to ``dst``
    (a destination without a config is planned as empty: ``config_created`` says it would
    get one)."""
    report.mirror, report.dry_run = mirror, True
    now = int(time.time() * 1000) if now is None else now
    dst_cfg = dst.load_config()
    if dst_cfg is None:
        report.config_created = True
    else:
        check_writable(dst_cfg.version, dst.url)
        refuse_missing_features(src, dst, dst_cfg)
    stones = tombstoned_runs(dst.storage)
    for run_id in run_ids:
        report.runs += 1
        life = RunLife(src, dst, run_id, now, report.life, stones, mirror=mirror, dry=True)
        try:
            seqs = life.carry()
            report.snapshots_skipped += len(life.src_seqs) - len(seqs)
            have = set(life.dst_seqs)
            for seq in seqs:
                _plan_snapshot(src, dst, life, seq, seq in have, report)
        except ConflictError as e:
            report.conflicts.append(str(e))
            continue
        life.finish()
    return report


def _plan_snapshot(src: Repository, dst: Repository, life: RunLife, seq: int, present: bool,
                   report: CopyReport) -> None:
    """Count one source snapshot as present, skipped or to send, as the copy decides it
    (``copy_run.RunCopy._prepare``)."""
    run_id = life.run
    _, rec = life.history.record(seq)
    if present:
        if life.history.dst_id(seq) != rec.snapshot:
            raise diverged(src, dst, run_id, seq)
        life.admit(seq, lambda: src.snapshot_at(run_id, seq).manifest.expires, present=True)
        report.snapshots_present += 1
        return
    where = f"run {run_id!r} seq {seq} (snapshot {rec.snapshot.short})"
    manifest = Manifest.from_bytes(source_manifest(src, rec, where), what=where)
    if not life.admit(seq, lambda: manifest.expires, present=False):
        report.snapshots_skipped += 1
        return
    report.snapshots_copied += 1
    report.would_copy.append(f"{run_id}@{seq}")
