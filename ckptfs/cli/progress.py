"""A one-line progress bar on stderr, shown only when stderr is a terminal (quiet in pipes,
logs and CI). Small on purpose: tqdm is not worth a dependency for one line."""

from __future__ import annotations

import sys
import time
from typing import TextIO, cast

from ckptfs.cli.human import clean


class ProgressBar:
    """Call with ``(done, total, note)``; redraws at most ten times a second; ``close()`` ends
    the line. A no-op when the stream is not a TTY or ``enabled`` is False."""

    def __init__(self, label: str, *, stream: TextIO | None = None,
                 enabled: bool | None = None) -> None:
        self.label = label
        # the terminal itself, not main's SafeStream (which would escape the redraw's '\r');
        # the note, which may name things from the store, is cleaned below
        self.stream = stream or cast(TextIO, getattr(sys.stderr, "raw", sys.stderr))
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self._last = 0.0
        self._drawn = False

    def __call__(self, done: int, total: int, note: str = "") -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if done < total and now - self._last < 0.1:
            return
        self._last = now
        width = 30
        filled = width * done // total if total else width
        line = (f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} "
                f"{clean(note)}")
        self.stream.write(line[:200].ljust(80))
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
