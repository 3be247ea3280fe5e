"""Run a script as on a filesystem without hard links (exFAT/FAT, some SMB and FUSE mounts).

Usage: python nolinks.py SCRIPT ARGS... ``os.link`` is removed before the script runs, so the
local backend's probe finds no hard links and every create of the store checks and renames under
its folder's lock: the path a filesystem without links takes, on any filesystem. Sound only when
every writer of the store runs this way, as on such a filesystem, where no link-mode writer can
exist (a test's own choice; no setting of ckptfs can make a writer rename over a name where
hard links work: ckptfs/storage/local_temps.py).
"""

from __future__ import annotations

import os
import runpy
import sys

if __name__ == "__main__":
    del os.link
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
