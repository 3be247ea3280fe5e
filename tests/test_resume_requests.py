"""What resuming a run asks of an S3 bucket (moto) in a format v2 store (issue 14): a bounded
number of requests whatever the history's length, and no request the head search already
answered. The forward listing from the head hint (spec/v2.md 4) has no delimiter, so it also
returns the run's retired markers (``retired/`` sorts after the digits): the retired range is
read from it, not listed again."""

from __future__ import annotations

import collections
from typing import Any

import pytest

import ckptfs
from ckptfs.ops.retention import forget_snapshots
from tests.conftest import S3Requests, new_s3_url



def _resume_counts(url: str, opts: dict[str, Any]) -> collections.Counter[str]:
    """The requests of a fresh store object's ``resume``, by S3 operation."""
    st = ckptfs.open_store(url, **opts)
    st.repo.storage.fs.invalidate_cache()  # type: ignore[attr-defined]
    with S3Requests(st) as ops:
        run = st.resume("r")
    assert run.state["i"] == run.seq - 1
    return ops


@pytest.mark.parametrize("forgotten", [False, True], ids=["plain", "with-retired-range"])
def test_resume_lists_twice_whatever_the_length(s3_options: dict[str, Any],
                                                forgotten: bool) -> None:
    counts = []
    for n in (3, 40):
        url = new_s3_url()
        st = ckptfs.open_store(url, **s3_options)
        run = st.start_run("r")
        for i in range(n):
            run.checkpoint({"i": i})
        if forgotten:
            forget_snapshots(st.repo, {"r": set(range(1, n - 1))})
        st.close()
        counts.append(_resume_counts(url, s3_options))
    small, large = counts
    assert small == large, (small, large)
    # one look at the maintenance lease, one listing forward from the hint; the retired
    # marker (when there is one) comes from that listing, and is then read (one GET)
    assert large["ListObjectsV2"] == 2, large
    assert sum(large.values()) <= (8 if forgotten else 6), large
