"""What ``import ckptfs`` and a local-disk commit load: the CLI and every short-lived process
pay the import of each module at start. fsspec (object stores) and filelock (only for local
filesystems without hard links) are imported when a store needs them, not before."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import ckptfs

SCRIPT = """
import sys
import pytest

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


SAVER_SCRIPT = """
import sys
from ckptfs.integrations.langgraph import CkptfsSaver
saver = CkptfsSaver(sys.argv[1])
config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
if sys.argv[2] == "write":
    from langgraph.checkpoint.base import empty_checkpoint
    saver.put(config, empty_checkpoint(), {"step": 0}, {})
else:
    assert saver.get_tuple(config) is not None
print(" ".join(sorted(m for m in HEAVY if m in sys.modules)))
"""
#: what a LangGraph saver's open and get_tuple do not use: cattrs (only registering dataclass
#: or attrs classes needs it) and the retention ops (delete, prune), each tens of ms to import
HEAVY = ("cattrs", "ckptfs.ops.erase", "ckptfs.ops.gc", "ckptfs.ops.retention", "fsspec",
         "filelock")


def test_the_langgraph_saver_reading_a_local_store_loads_no_retention_ops_nor_cattrs(
        tmp_path: Path) -> None:
    pytest.importorskip("langgraph.checkpoint.base")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CKPTFS_LOCAL_")}
    env["PYTHONPATH"] = str(Path(ckptfs.__file__).resolve().parents[1])
    script = f"HEAVY = {HEAVY!r}\n{SAVER_SCRIPT}"
    for mode in ("write", "read"):  # each in a fresh process: the read one is a restart
        out = subprocess.run([sys.executable, "-c", script, str(tmp_path / "s"), mode],
                             check=True, capture_output=True, text=True, env=env)
        assert out.stdout.split() == [], (mode, out.stdout)
