"""The text summary of a gc run, shared by ``gc`` and ``forget --prune``."""

from __future__ import annotations

import time
from typing import Any

from ckptfs.cli import human


def gc_lines(r: Any) -> list[str]:
    """What the collection (a GcReport) did, in words, and when the space it could not free
    yet will be free: objects younger than the grace period go in a gc run after it."""
    verb = "would delete" if r.dry_run else "deleted"
    lines = [f"problem  {human.clean(p)}" for p in r.problems]
    lines.append(f"{human.count(len(r.expired), 'expired snapshot')}, "
                 f"{human.count(r.stray_records, 'stray record')}; {verb} "
                 f"{human.count(r.manifests_deleted, 'manifest')}, "
                 f"{human.count(r.chunks_deleted, 'chunk')}, "
                 f"{human.count(r.tmp_deleted, 'temp file')}: {human.size(r.bytes_freed)}")
    if r.young_kept:
        later = int(time.time() * 1000) + r.grace_ms
        lines.append(f"{human.count(r.young_kept, 'unreferenced object')} kept: younger than "
                     f"the {human.duration(r.grace_ms)} grace period (writers may still be "
                     f"using them); a gc run after {human.iso(later)} frees them")
    return lines
