"""Progress of long commands on stderr: tqdm bars on a terminal, JSON lines when asked, and
nothing in pipes, logs and CI (``--progress auto``, the default).

What is measured: the snapshots a command has handled of all it will handle (when the
operation reports them: copy, export, verify) with rate and ETA, and the bytes and objects read
from (and, for gc, deleted in) the store, counted where the store's ``read``/``read_many``/
``delete`` are called, so that a 100 MB blob or a long mark phase moves the bytes line even
while the snapshot count stands still. Counting wraps those methods on the one storage object
the command opened (``watch``); it changes nothing they do.

``--progress json`` writes one JSON object per line to stderr, at most five a second and one
last with ``"done": true``: ``{"progress": LABEL, "done": bool, "snapshots": n,
"snapshots_total": n|null, "bytes_read": n, "objects_read": n, "objects_deleted": n,
"elapsed_s": s, "bytes_per_s": r, "eta_s": s|null, "note": text}``, and for copy
``"bytes_written": n``: the bytes sent to the destination (chunks, packs, records).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO, cast

from ckptfs.cli.human import clean

MODES = ("auto", "bar", "json", "none")


def add_progress(p: argparse.ArgumentParser) -> None:
    """The ``--progress`` option of a long command."""
    p.add_argument("--progress", choices=MODES, default="auto",
                   help="progress on stderr: 'auto' (default) draws bars only when stderr is a "
                        "terminal; 'bar' always; 'json' one JSON object per line (documented "
                        "in docs/operations/cli-tour.md); 'none' never")


class Progress:
    """Call with ``(done, total, note)`` for snapshots (copy's and export's ``progress=``), or
    ``snapshot(note)`` for one more (verify's); ``watch(storage)`` counts bytes and objects.
    A context manager: leaving it draws the last state and ends the lines."""

    def __init__(self, label: str, *, mode: str = "auto", stream: TextIO | None = None,
                 total: int | None = None, snapshots: bool = True,
                 items: str = "snapshots") -> None:
        self.label = label
        # the terminal itself, not main's SafeStream (which would escape the redraw's '\r');
        # every note, which may name things from the store, is cleaned below
        self.stream = stream or cast(TextIO, getattr(sys.stderr, "raw", sys.stderr))
        if mode == "auto":
            mode = "bar" if _isatty(self.stream) else "none"
        self.mode = mode
        self.total = total
        self.done = 0
        self.bytes = self.objects = self.deleted = 0
        #: bytes handed to the watched destination's writes (``watch_writes``), else None
        self.written: int | None = None
        self.note = ""
        self._t0 = time.monotonic()
        self._last = 0.0
        self._lock = threading.Lock()
        self._bars: list[Any] = []
        self._snaps: Any = None
        self._read: Any = None
        if mode == "bar":
            from tqdm import tqdm

            # a terminal that reports no width (a fresh pseudo-terminal) gets 100 columns
            width: dict[str, Any] = ({"dynamic_ncols": True} if _columns(self.stream)
                                     else {"ncols": 100})
            #: snapshots handled, when the operation reports them (gc and check do not)
            # what the first bar counts: snapshots, or what the operation says (``items``:
            # ``keys rotate`` counts scopes; its JSON lines still say "snapshots")
            self._snaps = tqdm(total=total, desc=f"{label} {items}",
                               unit=" snap" if items == "snapshots" else f" {items[:5]}",
                               file=self.stream, mininterval=0.1, position=0, leave=True,
                               **width) if snapshots else None
            self._read = tqdm(desc=f"{label} read", unit="B", unit_scale=True,
                              file=self.stream, mininterval=0.1, position=int(snapshots),
                              leave=True, **width)
            self._bars = [b for b in (self._snaps, self._read) if b is not None]

    # -- what the operation reports ---------------------------------------------------------
    def __call__(self, done: int, total: int, note: str = "") -> None:
        with self._lock:
            self.total, self.done, self.note = total, done, clean(note)
        self._show()

    def snapshot(self, note: str = "") -> None:
        with self._lock:
            self.done += 1
            self.note = clean(note)
        self._show()

    # -- what the store sees ---------------------------------------------------------------
    def watch(self, storage: object) -> None:
        """Count what ``storage`` reads and deletes from now on (outermost calls only: a
        ``read_many`` that calls ``read`` counts once)."""
        if self.mode == "none":
            return
        depth = threading.local()

        def one(out: Any, _: tuple[Any, ...]) -> None:
            self.bytes += len(out)
            self.objects += 1

        def many(out: Any, _: tuple[Any, ...]) -> None:
            got = [b for b in out if b is not None]
            self.bytes += sum(len(b) for b in got)
            self.objects += len(got)

        def gone(_: Any, __: tuple[Any, ...]) -> None:
            self.deleted += 1

        def ranged(out: Any, _: tuple[Any, ...]) -> None:
            self.bytes += out if isinstance(out, int) else len(out)
            self.objects += 1

        self._count(storage, "read", depth, one)
        self._count(storage, "read_many", depth, many)
        self._count(storage, "read_range", depth, ranged)  # v2 bodies and headers: by range
        self._count(storage, "read_range_into", depth, ranged)
        self._count(storage, "read_ranges", depth, many)
        self._count(storage, "delete", depth, gone)

    def watch_writes(self, storage: object) -> None:
        """Count the bytes ``storage`` is given to write from now on (copy's destination):
        the JSON lines then carry ``bytes_written``, the bar a ``written`` figure."""
        if self.mode == "none":
            return
        self.written = 0
        depth = threading.local()

        def wrote(size: Callable[[tuple[Any, ...]], int]) -> Callable[[Any, tuple[Any, ...]], None]:
            def tally(_: Any, a: tuple[Any, ...]) -> None:
                self.written = (self.written or 0) + size(a)
            return tally

        def parts(ps: Any) -> int:
            return sum(len(p) for p in ps)

        self._count(storage, "write", depth, wrote(lambda a: len(a[1])))
        self._count(storage, "create", depth, wrote(lambda a: len(a[1])))
        self._count(storage, "write_many", depth, wrote(lambda a: sum(len(d) for _, d in a[0])))
        self._count(storage, "write_parts", depth, wrote(lambda a: parts(a[1])))
        self._count(storage, "commit", depth,
                    wrote(lambda a: sum(len(d) for _, d in a[0]) + len(a[2])))

    def _count(self, storage: object, name: str, depth: threading.local,
               tally: Callable[[Any, tuple[Any, ...]], None]) -> None:
        """Wrap ``storage.<name>`` (when it has one) so that each outermost call, not one that
        another wrapped method makes inside it, hands its result and arguments to ``tally``
        (under the lock) and redraws; what the method does is unchanged."""
        inner = getattr(storage, name, None)
        if inner is None:
            return

        def call(*a: Any, **k: Any) -> Any:
            if name == "write_many":  # an iterable is read once: keep it for the count
                a = (list(a[0]), *a[1:])
            level = getattr(depth, "n", 0)
            depth.n = level + 1
            try:
                out = inner(*a, **k)
            finally:
                depth.n = level
            if level == 0:
                with self._lock:
                    tally(out, a)
                self._show()
            return out

        setattr(storage, name, call)

    # -- drawing -----------------------------------------------------------------------------
    def _show(self, final: bool = False) -> None:
        if self.mode == "none":
            return
        now = time.monotonic()
        if not final and now - self._last < (0.1 if self.mode == "bar" else 0.2):
            return
        self._last = now
        with self._lock:
            if self.mode == "bar":
                snaps, read = self._snaps, self._read
                if snaps is not None:
                    if self.total is not None and snaps.total != self.total:
                        snaps.total = self.total
                    snaps.n = self.done
                    snaps.set_postfix_str(self.note[:60], refresh=False)
                    snaps.refresh()
                read.n = self.bytes
                extra = f"{self.objects} objects"
                if self.written is not None:
                    extra += f", {_size(self.written)} written"
                if self.deleted:
                    extra += f", {self.deleted} deleted"
                read.set_postfix_str(extra, refresh=False)
                read.refresh()
            else:
                self.stream.write(json.dumps(self._json(now, final), sort_keys=True) + "\n")
                self.stream.flush()

    def _json(self, now: float, final: bool) -> dict[str, Any]:
        elapsed = now - self._t0
        rate = self.bytes / elapsed if elapsed > 0 else 0.0
        eta = None
        if self.total and 0 < self.done < self.total and elapsed > 0:
            eta = round(elapsed / self.done * (self.total - self.done), 1)
        out = {"progress": self.label, "done": final, "snapshots": self.done,
               "snapshots_total": self.total, "bytes_read": self.bytes,
               "objects_read": self.objects, "objects_deleted": self.deleted,
               "elapsed_s": round(elapsed, 3), "bytes_per_s": round(rate), "eta_s": eta,
               "note": self.note}
        if self.written is not None:
            out["bytes_written"] = self.written
        return out

    def close(self) -> None:
        if self.mode == "none":
            return
        self._show(final=True)
        for bar in self._bars:
            bar.close()
        self._bars = []
        self.mode = "none"

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _size(n: int) -> str:
    from ckptfs.cli.human import size

    return size(n)


def _columns(stream: TextIO) -> int:
    import os

    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):
        return 0


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


#: the name the copy and export commands used before issue 18
ProgressBar = Progress
