"""An effect whose process is SIGKILLed while its call runs (issue 35, item 7).

Usage: python effect_killee.py URL RUN MARKER. Starts RUN, commits once, then performs effect
"k1" under a 600 s lease; the call writes MARKER and sleeps until the process is killed.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import ckptfs


def main() -> None:
    url, run_id, marker = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    run = ckptfs.open_store(url).start_run(run_id)
    run.checkpoint({"n": 0})

    def send() -> str:
        marker.write_text("started")
        time.sleep(3600)  # killed here
        return "never"

    run.effect("send", send, key="k1", timeout=600)


if __name__ == "__main__":
    main()
