"""gc after a keep-last forget on S3 (moto) in a store with complete locators (spec/v2.md 9.2):
the old strays no visible record locates are deleted without reading their headers, so the
requests do not grow with the number forgotten. Before the rule, gc read each stray's header
(one ranged GET each: about 500 of the bench's 534 requests)."""

from __future__ import annotations

from typing import Any


import ckptfs
from ckptfs.format.models import COMPLETE_LOCATORS
from ckptfs.ops.gc import gc
from ckptfs.ops.retention import Policy, forget
from ckptfs.ops.verify import verify
from tests.conftest import S3Requests, new_s3_url



def _history(url: str, opts: dict[str, Any], n: int) -> None:
    st = ckptfs.open_store(url, **opts)
    run = st.start_run("r")
    for i in range(n):
        run.checkpoint({"i": i, "text": f"snapshot {i} " * 50})
    st.start_run("other").checkpoint({"x": 1})


def _gc_requests(url: str, opts: dict[str, Any], n: int) -> dict[str, int]:
    _history(url, opts, n)
    forget(ckptfs.open_store(url, **opts).repo, Policy(keep_last=1))
    st = ckptfs.open_store(url, **opts)  # a fresh process: nothing known
    assert COMPLETE_LOCATORS in st.repo.config.required
    c = S3Requests(st)
    rep = gc(st.repo, grace_ms=0)
    got = dict(c.take())
    assert rep.containers.containers_deleted == n - 1 and not rep.problems, rep
    assert rep.manifests_deleted == n - 1
    fresh = ckptfs.open_store(url, **opts)
    assert fresh.read("r")["i"] == n - 1 and fresh.read("other")["x"] == 1
    assert verify(fresh.repo, read_data=True).ok
    return got


def test_gc_after_keep_last_reads_no_stray_header(s3_options: dict[str, Any]) -> None:
    small = _gc_requests(new_s3_url(), s3_options, 10)
    big = _gc_requests(new_s3_url(), s3_options, 40)
    # the 2 visible records' headers, the lease and the retired markers: no stray's header
    assert big.get("GetObject", 0) <= 2 + 6, big
    assert big.get("DeleteObjects", 0) + big.get("DeleteObject", 0) <= 3, big
    # 30 more strays, not one request more
    assert big == small, (small, big)
