"""What ckptfs reports about its work: commits, conflicts, in-doubt effects, maintenance.

Every event is logged through ``logging`` (``ckptfs.commit``, ``ckptfs.effects``,
``ckptfs.maintenance``; commits at DEBUG, conflicts and in-doubt effects at WARNING,
maintenance at INFO) and handed to the listeners added with ``add_listener`` (the
OpenTelemetry integration, ``ckptfs.integrations.otel``, is one). An event carries only
identifiers and numbers: run ids, sequence numbers, boundary and effect names, effect keys,
byte counts, durations. Never state, results, arguments, labels, reasons or URIs: whatever a
log or trace pipeline keeps, it keeps no state plaintext.

A leaf module (like ``ckptfs.errors``): every layer may report through it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Union

import attrs

#: what an event field may hold: identifiers and numbers only
Field = Union[str, int, float, bool]

_logs = {k: logging.getLogger(f"ckptfs.{k}") for k in ("commit", "effects", "maintenance")}
# a library's loggers print nothing until the application configures logging (no "last
# resort" lines on stderr for a conflict the caller handles)
logging.getLogger("ckptfs").addHandler(logging.NullHandler())


@attrs.frozen
class Event:
    """One thing ckptfs did. ``kind``: ``commit`` (fields run, seq, boundary, bytes, chunks,
    outcome: ok, conflict, unknown or error), ``effect.in_doubt`` (run, key, name, attempt),
    ``maintenance`` (action and its counts). ``start_ns``/``end_ns``: ``time.time_ns()``
    when it began and ended (equal for an instant)."""

    kind: str
    fields: Mapping[str, Field]
    start_ns: int
    end_ns: int

    @property
    def seconds(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9


Listener = Callable[[Event], None]
_listeners: list[Listener] = []
_lock = threading.Lock()


def add_listener(listener: Listener) -> Callable[[], None]:
    """Call ``listener`` with every event from now on; returns the function that stops it. A
    listener that raises is logged and otherwise ignored: reporting never fails a commit."""
    with _lock:
        _listeners.append(listener)

    def remove() -> None:
        with _lock:
            if listener in _listeners:
                _listeners.remove(listener)

    return remove


def emit(event: Event) -> None:
    """Log ``event`` and hand it to the listeners."""
    area = event.kind.partition(".")[0]
    log = _logs["effects" if area == "effect" else area if area in _logs else "maintenance"]
    level = _level(event)
    if log.isEnabledFor(level):
        text = " ".join(f"{k}={_shown(v)}" for k, v in event.fields.items())
        log.log(level, "%s %s ms=%.1f", event.kind, text, (event.end_ns - event.start_ns) / 1e6)
    with _lock:
        listeners = tuple(_listeners)
    for listener in listeners:
        try:
            listener(event)
        except Exception:  # a broken exporter must not fail the work it reports
            logging.getLogger("ckptfs").warning("an event listener failed", exc_info=True)


def _level(event: Event) -> int:
    if event.kind == "commit":
        return logging.DEBUG if event.fields.get("outcome") == "ok" else logging.WARNING
    if event.kind.startswith("effect"):
        return logging.WARNING
    return logging.INFO


def _shown(v: Field) -> str:
    if isinstance(v, str):
        return repr(v[:200]) if (not v or " " in v or "=" in v or len(v) > 200) else v
    return str(v)


def now_ns() -> int:
    return time.time_ns()


def instant(kind: str, **fields: Field) -> None:
    """Emit an event that has no duration."""
    t = now_ns()
    emit(Event(kind, fields, t, t))


def maintenance(action: str, start_ns: int, **counts: Field) -> None:
    """A maintenance action (gc, forget, erase, ...) ended: its counts, never its reasons."""
    emit(Event("maintenance", {"action": action, **counts}, start_ns, now_ns()))
