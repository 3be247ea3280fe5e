"""The runs a command names must exist: one check shared by every ``--run`` option.

A mistyped ``--run`` used to select nothing, and a command that checks "every snapshot of the
selected runs" then reported 0 problems and passed (issue 18). ``copy`` and ``export`` refused
unknown runs already; ``require_runs`` gives verify, check, du and forget the same rule and the
same message. A run "exists" when it has a folder under ``runs/`` (records, even if all of them
were forgotten) or a tombstone (it was erased): both are things the store still knows about.
"""

from __future__ import annotations

from collections.abc import Iterable

from ckptfs.errors import NotFound
from ckptfs.store.lifecycle import tombstoned
from ckptfs.store.repository import Repository


def known_runs(repo: Repository) -> set[str]:
    """Every run id the store knows: those with a folder under ``runs/`` and the erased ones."""
    found = set(repo.run_ids())
    found.update(run_id for run_id, _ in tombstoned(repo.storage))
    return found


def require_runs(repo: Repository, runs: Iterable[str] | None) -> list[str] | None:
    """``runs`` as a list (None stays None: every run), or NotFound naming the first unknown
    one, with the hint that lists the runs. Reads only listings: it writes nothing."""
    if runs is None:
        return None
    wanted = list(runs)
    if not wanted:
        return wanted
    known = known_runs(repo)
    missing = [r for r in wanted if r not in known]
    if missing:
        names = ", ".join(repr(r) for r in missing)
        raise NotFound(f"no run {names} in {repo.url}; 'ckptfs ls {repo.url}' lists the runs")
    return wanted
