"""The text summary of a gc run, shared by ``gc`` and ``forget --prune``."""

from __future__ import annotations

import time
from typing import Any

from ckptfs.cli import human


def gc_lines(r: Any) -> list[str]:
    """What the collection (a GcReport) did, in the words of snapshots, runs and bytes: the
    expired snapshots it forgot, one total it freed, and what it kept for the grace period
    (only what a gc run after it frees) with when that will be free. Containers, forwards and
    stray records are the JSON's detail, not an operator's words (issue 35, item 2)."""
    dry = r.dry_run
    lines = [f"problem  {human.clean(p)}" for p in r.problems]
    if r.expired:
        runs = {e.split("@", 1)[0] for e in r.expired}
        lines.append(f"{'would forget' if dry else 'forgot'} "
                     f"{human.count(len(r.expired), 'expired snapshot')} of "
                     f"{human.count(len(runs), 'run')}")
    parts = []
    if r.manifests_deleted:
        parts.append(f"the data of {human.count(r.manifests_deleted, 'forgotten snapshot')}")
    elif r.chunks_deleted:
        parts.append("content no snapshot uses")
    if r.tmp_deleted:
        parts.append(human.count(r.tmp_deleted, "temp file") + " of crashed writers")
    if r.bytes_freed or parts:
        lines.append(f"{'would free' if dry else 'freed'} {human.size(r.bytes_freed)}"
                     + (f": {', '.join(parts)}" if parts else ""))
    elif not r.young_kept:
        lines.append("nothing to free: every snapshot's data is in use")
    if r.young_kept:
        later = int(time.time() * 1000) + r.grace_ms
        what = (f"the data of {human.count(r.snapshots_kept_young, 'forgotten snapshot')}"
                if r.snapshots_kept_young else "content no snapshot uses yet")
        lines.append(f"kept {human.size(r.bytes_kept_young)}, {what}: younger than the "
                     f"{human.duration(r.grace_ms)} grace period (writers may still be using "
                     f"it); a gc run after {human.iso(later)} frees it")
    return lines
