"""Copy into a v2 store on a bucket copies runs side by side (issue 15: copy local -> S3 was
0.27x of plain concurrent PUTs, one run after another, each request a round trip). The
records of one run still arrive in seq order (spec/retention.md section 9, step 4); those of
different runs overlap. The report is the same as a copy one run at a time."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import attrs

import ckptfs
from ckptfs.ops.copy import copy_runs
from ckptfs.ops.verify import verify
from ckptfs.storage import open_storage
from ckptfs.store.repository import Repository
from tests.conftest import new_s3_url
from tests.faults import FaultyStorage


RUNS = ("a", "b", "c")


def _source(root: str) -> dict[str, list[bytes]]:
    """Three runs of three snapshots: small ones (bodies in the record) and one of 1.5 MB
    (bodies in a pack when one run is copied at a time, in its record side by side)."""
    s = ckptfs.open_store(root)
    want: dict[str, list[bytes]] = {}
    for r in RUNS:
        run = s.start_run(r)
        want[r] = []
        for i in range(3):
            data = os.urandom(1_500_000 if i == 1 else 3000)
            run.checkpoint({"data": ckptfs.Blob(data)})
            want[r].append(data)
    return want


def _check(url: str, opts: dict[str, Any], want: dict[str, list[bytes]]) -> None:
    st = ckptfs.open_store(url, **opts)
    assert verify(st.repo, read_data=True).ok
    for r, states in want.items():
        assert st.repo.seqs(r) == [1, 2, 3]
        for i, data in enumerate(states, 1):
            assert st.read(f"{r}@{i}")["data"].read() == data


def test_records_of_different_runs_are_created_side_by_side(
        tmp_path: Path, s3_options: dict[str, Any]) -> None:
    """The first record of run ``a`` waits until a record of another run is being created:
    one run at a time, none ever is (the wait ends at its bound and the test fails); side by
    side, one is. Each run's records still come in seq order."""
    want = _source(str(tmp_path / "src"))
    url = new_s3_url()
    ckptfs.open_store(url, **s3_options).init()
    other = threading.Event()
    order: dict[str, list[str]] = {r: [] for r in RUNS}
    waited: list[bool] = []

    def before(k: int, op: str, path: str) -> None:
        parts = path.split("/")
        if op != "create" or len(parts) != 3 or parts[0] != "runs":
            return
        order[parts[1]].append(parts[2])
        if parts[1] != "a":
            other.set()
        elif not waited:
            waited.append(other.wait(timeout=20))

    counted = FaultyStorage(open_storage(url, **s3_options), before=before)
    rep = copy_runs(ckptfs.open_store(str(tmp_path / "src")).repo, Repository(counted),
                    workers=3)
    assert rep.ok and rep.snapshots_copied == 9
    assert waited == [True]  # a record of another run was under way meanwhile
    for r in RUNS:
        assert order[r] == sorted(order[r]) and len(order[r]) == 3
    _check(url, s3_options, want)


def test_side_by_side_reports_what_one_run_at_a_time_reports(
        tmp_path: Path, s3_options: dict[str, Any]) -> None:
    """On a bucket the default copies side by side; its report (merged per run) equals the
    report of a copy one run at a time, and copying again finds everything present."""
    want = _source(str(tmp_path / "src"))
    src = ckptfs.open_store(str(tmp_path / "src")).repo
    one, many = new_s3_url(), new_s3_url()
    dst = ckptfs.open_store(many, **s3_options).repo
    assert dst.storage.lists_after  # the default is side by side here
    r1 = copy_runs(src, ckptfs.open_store(one, **s3_options).repo, workers=1)
    r4 = copy_runs(src, dst)
    skip = {"bytes_copied", "config_created"}  # pack bytes depend on how runs were batched
    assert {k: v for k, v in attrs.asdict(r4).items() if k not in skip} == \
        {k: v for k, v in attrs.asdict(r1).items() if k not in skip}
    assert r4.runs == 3 and r4.snapshots_copied == 9 and r4.bytes_copied > 4_500_000
    _check(many, s3_options, want)
    again = copy_runs(src, ckptfs.open_store(many, **s3_options).repo)
    assert again.ok and again.snapshots_copied == again.chunks_copied == 0
    assert again.snapshots_present == 9
