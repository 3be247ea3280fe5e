"""Formatting for people: sizes, ages, times, short ids, text safe for a terminal, and
opening the store a command names."""

from __future__ import annotations

import argparse
import re
import time
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ckptfs.runtime.refs import RefPolicy
    from ckptfs.runtime.store import Store

#: characters that must not reach a terminal as they are: C0 controls, DEL, C1 controls (ESC
#: and CSI start escape sequences), and the Unicode format characters that reorder or hide
#: text (bidi embeddings, overrides and isolates, marks, line/paragraph separators)
UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e"
                    "\u2060-\u2069\ufeff]")
_UNSAFE_IN_STREAM = re.compile(UNSAFE.pattern.replace("\x00-\x1f", "\x00-\x08\x0b-\x1f"))


def _escape(m: re.Match[str]) -> str:
    return f"\\u{ord(m.group()):04x}"


def clean(text: object) -> str:
    """``text`` with every UNSAFE character written as ``\\uXXXX`` (newlines and tabs too): for
    one field of a line (a label, a ledger key, a message from the store). The escape is also
    JSON's, so a JSON text stays valid and means the same after cleaning."""
    return UNSAFE.sub(_escape, str(text))


def clean_lines(text: str) -> str:
    """``text`` with every UNSAFE character but newline and tab escaped like ``clean``."""
    return _UNSAFE_IN_STREAM.sub(_escape, text)


class SafeStream:
    """A text stream that writes through ``clean_lines``: every character a command prints
    passes here (``main`` installs it on stdout and stderr), so nothing a store holds can
    reach the terminal as a control sequence. Raw bytes (``cat`` of a blob) go to ``buffer``
    untouched; ``raw`` is the stream underneath."""

    def __init__(self, raw: IO[str]) -> None:
        self.raw = raw

    def write(self, s: str) -> int:
        self.raw.write(clean_lines(s))
        return len(s)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


def add_allow_refs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allow-refs", action="append", default=[], metavar="FOLDER|SCHEME://HOST",
                   help="verify external references below this local folder or on this host "
                        "(repeatable; SCHEME://* for any host). Without it no reference is "
                        "opened or requested: a store cannot make ckptfs read files or send "
                        "requests of its choosing")


def ref_policy(args: argparse.Namespace) -> RefPolicy:
    """The RefPolicy of ``--allow-refs`` (InvalidName, a usage error, for a bad entry)."""
    from ckptfs.runtime.refs import RefPolicy

    return RefPolicy.allow(*getattr(args, "allow_refs", []))


def size(n: int | None) -> str:
    """``1.5 MiB`` style; ``-`` for unknown."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def age(seconds: int | None) -> str:
    """``42s``, ``7m``, ``3h``, ``12d``; ``-`` for unknown."""
    if seconds is None:
        return "-"
    for unit, span in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= span:
            return f"{seconds // span}{unit}"
    return f"{seconds}s"


def when(ms: int | None) -> str:
    """A UTC time stamp to the second."""
    if ms is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(ms / 1000))


def short(snapshot_id: str | None) -> str:
    """The first 12 hex digits of ``blake3:<hex>`` (accepted back by every command)."""
    if not snapshot_id:
        return "-"
    return snapshot_id.split(":", 1)[-1][:12]


def table(rows: list[list[str]], header: list[str]) -> str:
    """Left-aligned columns separated by two spaces, every cell cleaned (see ``clean``)."""
    cols = [header, *[[clean(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cols) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cols)


def thread_run(store: Store, thread_id: str, ns: str = "") -> str:
    """The run CkptfsSaver keeps LangGraph thread ``thread_id`` (namespace ``ns``) in: its
    newest generation (``<run>.2`` after a deletion); NotFound when the store has none."""
    from ckptfs.errors import NotFound
    from ckptfs.integrations.lg_names import live_run, run_id_for

    found = live_run(store.runs(), thread_id, ns)
    if found is None:
        raise NotFound(f"no LangGraph thread {thread_id!r}{f' namespace {ns!r}' if ns else ''} "
                       f"in {store.url} (its run would be {run_id_for(thread_id, ns)}); "
                       "'ckptfs ls' lists the runs")
    return found


def thread_effects_run(store: Store, thread_id: str) -> str:
    """The run holding the effect ledger of LangGraph thread ``thread_id`` (its
    ``saver.effect`` calls); NotFound when the thread has recorded none."""
    from ckptfs.errors import NotFound
    from ckptfs.integrations.lg_names import effects_run_id

    run_id = effects_run_id(thread_id)
    if run_id not in store.runs():
        raise NotFound(f"LangGraph thread {thread_id!r} has no effects in {store.url} (its "
                       f"ledger would be run {run_id}: only saver.effect calls make one)")
    return run_id


def add_thread_args(p: argparse.ArgumentParser, instead: str) -> None:
    """``--thread ID`` and ``--ns NS``: a LangGraph thread instead of ``instead``."""
    p.add_argument("--thread", metavar="ID", help=f"a LangGraph thread id instead of {instead}")
    p.add_argument("--ns", metavar="NS", default="", help="the thread's checkpoint namespace")


def thread_snapshot(store: Store, thread_id: str | None, ns: str, ref: str) -> str:
    """The snapshot reference a command was given: ``ref`` itself, or with ``--thread`` the
    thread's run with ``ref`` as ``@SEQ`` (or ``head``) of it."""
    if thread_id is None:
        return ref
    run_id = thread_run(store, thread_id, ns)
    return run_id if ref in ("head", "@head") else f"{run_id}{ref}"


def run_or_thread(args: argparse.Namespace, command: str) -> bool:
    """For a command that takes ``RUN`` or ``--thread ID``, one of the two: False after printing
    the usage error when it got neither or both. ``CKPTFS_STORE=... ckptfs CMD RUN`` parses RUN
    as STORE (RUN is optional); it is put back where it belongs."""
    import os
    import sys

    from ckptfs.cli.stores import STORE_ENV

    if args.run_id is None and args.thread is None and os.environ.get(STORE_ENV):
        args.store, args.run_id = os.environ[STORE_ENV], args.store
    if (args.run_id is None) == (args.thread is None):
        print(f"ckptfs {command}: the following arguments are required: RUN (or --thread ID, a "
              "LangGraph thread id; one of the two)", file=sys.stderr)
        return False
    return True


def open_existing(url: str) -> Store:
    """The store at ``url``; NotAStore (exit 3, with a hint) when there is none."""
    from ckptfs.cli import stores as _stores

    store = _stores.open_store(url)
    store.repo.config
    return store


def count(n: int, word: str, plural: str | None = None) -> str:
    """``1 snapshot``, ``3 snapshots``: a number with its noun in the right number."""
    return f"{n} {word if n == 1 else plural or word + 's'}"


def duration(ms: int | None) -> str:
    """``1h``, ``90s``, ``1d12h``, ``250ms``: a span as the duration options take it."""
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms}ms"
    left, out = ms // 1000, ""
    for unit, span in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if left >= span:
            out += f"{left // span}{unit}"
            left %= span
    return out


def iso(ms: int | None) -> str:
    """A UTC time stamp in ISO 8601 (``2026-11-29T19:43:46Z``); ``never`` for None."""
    if ms is None:
        return "never"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


def spans(seqs: list[int]) -> str:
    """``@1..@5, @7``: sequence numbers as ranges."""
    out: list[str] = []
    start = prev = seqs[0]
    for s in [*seqs[1:], None]:
        if s is not None and s == prev + 1:
            prev = s
            continue
        out.append(f"@{start}" if start == prev else f"@{start}..@{prev}")
        if s is not None:
            start = prev = s
    return ", ".join(out)
