"""Regenerate the console blocks of docs/operations/cli-tour.md from a real run of the CLI.

``python docs/gen_cli_tour.py`` builds two small stores in a fresh folder (``support-42``: four
steps with a growing message list and a screenshot blob, resumed, stopped at an approval;
``refund-7``: a process that died inside a refund call), runs each command the tour shows as a
``ckptfs`` subprocess, and replaces the text between the ``<!-- tour:NAME -->`` and
``<!-- /tour:NAME -->`` markers of the page with what the commands printed. Nothing is typed
by hand, so the page shows what the installed version prints.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ckptfs
from ckptfs.errors import ApprovalPending

PAGE = Path(__file__).parent / "operations" / "cli-tour.md"

TOUR = [
    "ls store",
    "fork store support-42@3 support-42-debug",
    "log store support-42",
    "show store support-42",
    "cat store support-42@5 plan",
    "diff store support-42@4 support-42@5",
    "copy store backup",
    "copy store backup",
    "export store support-42.zip --run support-42",
    "ls support-42.zip",
    "!flip",
    "verify backup --read-data",
    "ls s3:/typo",
    "log store nope",
]
EFFECTS = ["effects fx-store refund-7", "log fx-store refund-7"]


def _message(i: int) -> dict[str, str]:
    words = " ".join(f"w{(i * 7919 + k) % 10007}" for k in range(3000))
    return {"role": "assistant" if i % 2 else "user", "content": words}


def build(root: Path) -> None:
    """The two stores the tour reads."""
    store = ckptfs.open_store(str(root / "store"))
    run = store.start_run("support-42", schema="agent@2")
    messages: list[dict[str, str]] = []
    for step in range(1, 5):
        messages.append(_message(step))
        run.checkpoint({"messages": list(messages), "plan": {"step": step},
                        "screenshot": ckptfs.Blob(bytes(range(256)) * 195 + bytes(step))})
    run = store.resume("support-42")
    run.checkpoint({"messages": list(messages), "plan": {"step": 5, "next": "approve refund"}})
    try:
        run.wait_for_approval({"refund": 40}, key="refund-approval")
    except ApprovalPending:
        pass
    died = subprocess.run([sys.executable, "-c", _DIES, str(root / "fx-store")], timeout=120)
    assert died.returncode == 9, died
    time.sleep(1.5)  # its one-second lease runs out: the effect is in doubt, not running


#: a process that dies (os._exit) inside the refund call: the effect stays in doubt (its
#: lease is one second, so that the tour need not wait a minute to show it)
_DIES = """
import os, sys
import ckptfs
fx = ckptfs.open_store(sys.argv[1]).start_run("refund-7", schema="state@1")
fx.checkpoint({"order": "A-7"})
fx.effect("orders.lookup", lambda: {"order": "A-7", "amount": 40}, key="refund-7/lookup")
fx.effect("payments.refund", lambda: os._exit(9), key="refund-7/refund", timeout=1)
"""


def _flip_one_byte(root: Path) -> None:
    """Damage one body of the backup: the last byte of its largest pack or record."""
    files = [p for p in (root / "backup").rglob("*") if p.is_file() and p.stat().st_size > 4096]
    target = max(files, key=lambda p: p.stat().st_size)
    data = bytearray(target.read_bytes())
    data[-1] ^= 0xFF
    target.chmod(0o644)
    target.write_bytes(bytes(data))


def run_block(root: Path, commands: list[str]) -> str:
    out = []
    env = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1"}
    for cmd in commands:
        if cmd == "!flip":
            _flip_one_byte(root)
            continue
        p = subprocess.run([sys.executable, "-m", "ckptfs", *cmd.split()], cwd=root, env=env,
                           capture_output=True, text=True, timeout=120)
        text = (p.stdout + p.stderr).rstrip().replace(str(root), "/tmp/tour")
        note = "          # after flipping one byte of the backup" if "verify" in cmd else ""
        out.append(f"$ ckptfs {cmd}{note}\n{text}\n")
    return "```console\n" + "\n".join(out) + "```"


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="tour-"))
    try:
        build(root)
        page = PAGE.read_text()
        for name, commands in (("main", TOUR), ("effects", EFFECTS)):
            block = run_block(root, commands)
            page, n = re.subn(rf"(<!-- tour:{name} -->\n).*?(\n<!-- /tour:{name} -->)",
                              lambda m: m.group(1) + block + m.group(2), page, flags=re.S)
            if n != 1:
                raise SystemExit(f"{PAGE}: no <!-- tour:{name} --> block to replace")
        PAGE.write_text(page)
        print(json.dumps({"page": str(PAGE), "version": ckptfs.__version__}))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
