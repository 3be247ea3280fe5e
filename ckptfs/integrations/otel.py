"""OpenTelemetry spans and metrics for ckptfs (extra ``otel``): ``ckptfs.integrations.otel.
instrument()`` once at start-up, after the application configured its providers.

Each ``ckptfs.observe`` event becomes a span, a child of the span current where the work
ran (a commit inside an agent step's span is a child of it): ``ckptfs.commit``,
``ckptfs.effect.in_doubt``, ``ckptfs.maintenance``, with attributes ``ckptfs.run``,
``ckptfs.seq``, ``ckptfs.boundary``, ``ckptfs.bytes``, ``ckptfs.outcome``, ... (identifiers and
numbers only: never state, results, labels or reasons). A commit that lost its race or failed
has status ERROR. Metrics:

* ``ckptfs.commit.duration`` (histogram, s), by ``ckptfs.outcome``;
* ``ckptfs.commit.bytes`` (counter, By): chunk bytes handed to successful commits;
* ``ckptfs.commits`` (counter) by ``ckptfs.outcome``; ``ckptfs.conflicts`` (counter);
* ``ckptfs.effects.in_doubt`` (counter); ``ckptfs.maintenance.actions`` (counter) by
  ``ckptfs.action``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

try:
    from opentelemetry import metrics, trace
    from opentelemetry.trace import Status, StatusCode
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("ckptfs.integrations.otel needs OpenTelemetry: "
                      "pip install 'ckptfs[otel]'") from e

from ckptfs import observe
from ckptfs._version import __version__


def instrument(*, tracer_provider: Any = None, meter_provider: Any = None
               ) -> Callable[[], None]:
    """Report ckptfs's events as spans and metrics through the given providers (default: the
    global ones); returns the function that stops it."""
    tracer = trace.get_tracer("ckptfs", __version__, tracer_provider=tracer_provider)
    meter = metrics.get_meter("ckptfs", __version__, meter_provider=meter_provider)
    duration = meter.create_histogram("ckptfs.commit.duration", unit="s",
                                      description="time of a ckptfs commit")
    written = meter.create_counter("ckptfs.commit.bytes", unit="By",
                                   description="chunk bytes handed to ckptfs commits")
    commits = meter.create_counter("ckptfs.commits", description="ckptfs commits by outcome")
    conflicts = meter.create_counter("ckptfs.conflicts",
                                     description="commits that lost the race for their seq")
    in_doubt = meter.create_counter("ckptfs.effects.in_doubt",
                                    description="effects found in doubt")
    actions = meter.create_counter("ckptfs.maintenance.actions",
                                   description="gc, forget, erase and copy runs")

    def on(event: observe.Event) -> None:
        attributes = {f"ckptfs.{k}": v for k, v in event.fields.items()}
        span = tracer.start_span(f"ckptfs.{event.kind}", start_time=event.start_ns,
                                 attributes=attributes)
        outcome = event.fields.get("outcome")
        if event.kind == "commit":
            by = {"ckptfs.outcome": str(outcome)}
            commits.add(1, by)
            duration.record(event.seconds, by)
            if outcome == "ok":
                written.add(int(event.fields.get("bytes", 0)))
            else:
                span.set_status(Status(StatusCode.ERROR, f"commit {outcome}"))
                if outcome == "conflict":
                    conflicts.add(1)
        elif event.kind == "effect.in_doubt":
            in_doubt.add(1)
        elif event.kind == "maintenance":
            actions.add(1, {"ckptfs.action": str(event.fields.get("action"))})
        span.end(end_time=event.end_ns)

    return observe.add_listener(on)
