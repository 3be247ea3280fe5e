"""What ``import ckptfs`` and a local-disk commit load: the CLI and every short-lived process
pay the import of each module at start. fsspec (object stores) and filelock (only for local
filesystems without hard links) are imported when a store needs them, not before."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import ckptfs

SCRIPT = """
import sys
import ckptfs
st = ckptfs.open_store(sys.argv[1])
run = st.start_run("r")
run.checkpoint({"i": 1})
assert st.read("r")["i"] == 1
print(" ".join(m for m in ("fsspec", "filelock") if m in sys.modules))
"""


def test_a_local_store_in_link_mode_loads_neither_fsspec_nor_filelock(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CKPTFS_LOCAL_")}
    env["PYTHONPATH"] = str(Path(ckptfs.__file__).resolve().parents[1])
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "s")], check=True,
                         capture_output=True, text=True, env=env)
    assert out.stdout.split() == [], out.stdout
