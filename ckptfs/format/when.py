"""Expiry times as callers give them: seconds since the epoch, an aware datetime, or a timedelta
from now; refused when the magnitude is implausible.

One rule for ``Ref(expires_at=)``, ``checkpoint(expires_at=)`` and ``start_run(expires_at=)``
(issue 18: ``Ref`` took only seconds, raised a raw TypeError for a timedelta, and read epoch
milliseconds as seconds, an expiry tens of thousands of years away). Reads the clock for a
timedelta and nothing else.
"""

from __future__ import annotations

import datetime
import math
import time
from typing import Any

from ckptfs.errors import InvalidArgument

#: the latest expiry accepted, in seconds since the epoch (the year 5138). Epoch milliseconds
#: of any time after 1973 are above it, so they are refused rather than read as seconds.
MAX_EPOCH_S = 100_000_000_000


def epoch_seconds(value: Any, *, what: str = "expires_at") -> float | None:
    """``value`` as seconds since the epoch (None stays None). A timedelta counts from now; a
    datetime must carry a time zone; a number is seconds and must be finite and at most
    MAX_EPOCH_S. Anything else is InvalidArgument, saying what is accepted."""
    if value is None:
        return None
    if isinstance(value, datetime.timedelta):
        return time.time() + value.total_seconds()
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            raise InvalidArgument(f"{what}: a datetime needs a time zone (e.g. "
                                  "datetime.now(timezone.utc) + timedelta(days=7)); a naive "
                                  "one could mean any of 24 hours")
        return value.timestamp()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        secs = float(value)
        if not math.isfinite(secs):
            raise InvalidArgument(f"{what}: {value!r} is not a time; give seconds since the "
                                  "epoch, an aware datetime or a timedelta")
        if secs > MAX_EPOCH_S:
            raise InvalidArgument(
                f"{what}: {value!r} is after the year 5000 when read as seconds since the "
                f"epoch; it looks like milliseconds (or finer): divide by 1000, or pass a "
                f"datetime or timedelta")
        return secs
    raise InvalidArgument(f"{what} takes seconds since the epoch, an aware datetime or a "
                          f"timedelta, not {type(value).__name__}")


def epoch_ms(value: Any, *, what: str = "expires_at") -> int | None:
    """``epoch_seconds`` in whole milliseconds, as manifests store expiry."""
    secs = epoch_seconds(value, what=what)
    return None if secs is None else int(secs * 1000)
