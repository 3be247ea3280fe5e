"""verify's check of objects that have other names than the store's (hard links).

A hard link is not refused by readers, unlike a symbolic link (spec/format.md 9.2): it leads
nowhere else (the file read is the one at the store's name, and its bytes are checked against
their digest as any object's), and a writer's own commit gives its file a second name for a
moment (a named temp file linked, then removed), which a crash can leave until gc's temp
sweep. What another name does change is deletion: gc and erase remove the store's name, and
the bytes stay under the other one, so an erase could not remove them; and a change made
through the other name changes the store's object. verify reports such objects; names that
are the store's own temp files in ``tmp/`` are not reported (gc removes those).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ckptfs.errors import CkptfsError

if TYPE_CHECKING:
    from ckptfs.ops.verify import VerifyReport
    from ckptfs.store.repository import Repository


def check_hard_links(repo: Repository, report: VerifyReport) -> None:
    """Add a problem (category ``storage``) for every object whose file has other names
    outside the store's ``tmp/``."""
    from ckptfs.ops.verify import Problem

    try:
        linked = repo.storage.hard_linked()
    except CkptfsError as e:
        report.problems.append(Problem(e.category, None, None, None, str(e)))
        return
    for path, others in linked.items():
        if others <= 0:
            continue
        report.problems.append(Problem(
            "storage", None, None, None,
            f"{path}: its file has {others} other name(s) than the store's (a hard link, as "
            "'ln' or 'cp -al' make). It reads as any object, but gc and erase remove only the "
            "store's name: its bytes stay under the other name(s), which an erase cannot "
            "reach, and a change made there changes the store. Give it a file of its own "
            "(in its folder: cp -p NAME NAME.copy && mv NAME.copy NAME), then verify again; "
            "if a writer was committing just now, verify again first (a commit links its "
            "file before it removes its temp file's name)."))
