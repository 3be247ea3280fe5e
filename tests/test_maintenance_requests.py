"""What ``forget`` and ``gc`` ask of an S3 bucket (moto) in a format v2 store (issue 15): the
request count, not the bytes, sets their time there. One listing per run tells the records,
their ages and sizes, the retired range and which expiry overrides exist; a record is read
once per operation (by its header), and gc's second mark reads only records that changed.
Before: forget read every record plus two expiry overrides per snapshot (3 GETs each), gc
asked two HEADs per stray record and read every record in each of its passes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import ckptfs
from ckptfs.ops.gc import gc
from ckptfs.ops.retention import Policy, forget
from ckptfs.ops.verify import verify
from tests.conftest import S3Requests, new_s3_url


N = 30


@pytest.fixture
def s3_store(s3_options: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    yield new_s3_url(), s3_options


def _history(url: str, opts: dict[str, Any], n: int) -> ckptfs.Store:
    st = ckptfs.open_store(url, **opts)
    run = st.start_run("r")
    for i in range(n):
        run.checkpoint({"i": i, "text": f"snapshot {i} " * 50})
    st.start_run("other").checkpoint({"x": 1})
    return st


def test_forget_reads_each_record_once_and_no_expiry_per_snapshot(
        s3_store: tuple[str, dict[str, Any]]) -> None:
    url, opts = s3_store
    _history(url, opts, N)
    st = ckptfs.open_store(url, **opts)  # a fresh process: nothing known
    c = S3Requests(st)
    rep = forget(st.repo, Policy(keep_last=1))
    got = c.take()
    assert len(rep.forgotten) == N - 1
    # one GET per retained record (N + 1), a few for the lease and the retired marker
    assert got["GetObject"] <= N + 1 + 4, got
    assert got["HeadObject"] <= 2, got
    assert ckptfs.open_store(url, **opts).read("r")["i"] == N - 1


def test_gc_after_forget_asks_no_head_per_object_and_reads_records_once(
        s3_store: tuple[str, dict[str, Any]]) -> None:
    url, opts = s3_store
    _history(url, opts, N)
    forget(ckptfs.open_store(url, **opts).repo, Policy(keep_last=1))
    st = ckptfs.open_store(url, **opts)
    c = S3Requests(st)
    rep = gc(st.repo, grace_ms=0)
    got = c.take()
    assert rep.containers.containers_deleted == N - 1, rep
    assert not rep.problems, rep.problems
    # ages and sizes from the listings (a HEAD only where s3fs probes an empty folder)
    assert got["HeadObject"] <= 6, got
    # the N - 1 strays' headers once, the 2 visible records once (the second mark reuses them:
    # same ETag), the lease and the retired markers
    assert got["GetObject"] <= (N - 1) + 2 + 6, got
    assert got["DeleteObjects"] + got["DeleteObject"] <= 3, got
    assert verify(ckptfs.open_store(url, **opts).repo, read_data=True).ok
    assert ckptfs.open_store(url, **opts).read("r")["i"] == N - 1


def test_gc_second_mark_reads_a_record_that_changed(
        s3_store: tuple[str, dict[str, Any]]) -> None:
    """The reuse is by ETag: a record the collector read whose bytes change (withdrawn and
    made again, here rewritten in place by hand) is read again by the next pass."""
    from ckptfs.format.names import record_path
    from ckptfs.ops.runscan import RecordCache, list_run

    url, opts = s3_store
    st = _history(url, opts, 2)
    repo = ckptfs.open_store(url, **opts).repo
    cache = RecordCache()
    first = cache.records(repo, cache.listing(repo.storage, "r"), [1, 2])
    assert [r.record is not None for r in first] == [True, True]
    again = cache.records(repo, list_run(repo.storage, "r"), [1, 2])
    assert [a.record for a in again] == [f.record for f in first]
    data = st.repo.storage.read(record_path("r", 2))
    st.repo.storage.delete(record_path("r", 2))
    st.repo.storage.create(record_path("r", 2), data)  # made again, same bytes: same ETag
    same = cache.records(repo, list_run(repo.storage, "r"), [2])
    assert same[0] is cache.reads[("r", 2)]
    st.repo.storage.delete(record_path("r", 2))
    st.repo.storage.create(record_path("r", 2), data[:-1] + bytes([data[-1] ^ 1]))
    changed = cache.records(repo, list_run(repo.storage, "r"), [2])  # other bytes, other ETag
    assert changed[0] is not same[0] and changed[0].error is not None  # read again: damaged


def test_gc_after_forget_in_one_process_reads_no_header_again(
        s3_store: tuple[str, dict[str, Any]]) -> None:
    """``forget --prune``: the gc after the forget, in the same process, finds every record
    header it needs under the ETag the forget read it by: no GET per record. (A policy with a
    label rule: forget reads every record; keep-last alone reads only what it keeps, below.)"""
    url, opts = s3_store
    _history(url, opts, N)
    st = ckptfs.open_store(url, **opts)
    forget(st.repo, Policy(keep_last=1, keep_labels=(("none", "x"),)))
    c = S3Requests(st)
    rep = gc(st.repo, grace_ms=0)
    got = c.take()
    assert rep.containers.containers_deleted == N - 1 and not rep.problems, rep
    assert got["GetObject"] <= 6, got  # the lease and the retired markers
    assert verify(ckptfs.open_store(url, **opts).repo, read_data=True).ok


def test_forget_by_seq_reads_only_the_records_it_keeps(
        s3_store: tuple[str, dict[str, Any]]) -> None:
    """issue 15: a policy decidable from the run listing (keep-last, by seq) is decided from
    the headers of the records it keeps only (spec/v2.md 9.1). Since the retired marker lists
    the ids of what it retires (retention.md 3: the proof a backup copy needs once these
    records are gone), the forgotten records' headers are read too, after the decision: one
    ranged GET each, in one overlapped batch, never a whole record."""
    url, opts = s3_store
    _history(url, opts, N)
    st = ckptfs.open_store(url, **opts)  # a fresh process: nothing known
    c = S3Requests(st)
    rep = forget(st.repo, Policy(keep_last=1))
    got = c.take()
    # the two kept records' headers, the lease and the retired marker; then one header read
    # per forgotten record, for the marker's ids
    assert got["GetObject"] <= 2 + 4 + (N - 1), got
    assert sum(got.values()) <= 24 + (N - 1), got
    assert [(d.run, d.seq) for d in rep.forgotten] == [("r", s) for s in range(1, N)]
    assert all(d.id is None for d in rep.forgotten)  # not read: the listing decided
    assert {(d.run, d.seq) for d in rep.decisions if d.keep} == {("r", N), ("other", 1)}
    assert all(d.id is not None for d in rep.decisions if d.keep)
    assert rep.bytes_freed is None and rep.chunks_freed is None and not rep.problems
    again = ckptfs.open_store(url, **opts)
    assert again.repo.seqs("r") == [N] and again.read("r")["i"] == N - 1
    assert again.repo.seqs("other") == [1]


def test_gc_after_a_by_seq_forget_reads_each_stray_once(
        s3_store: tuple[str, dict[str, Any]]) -> None:
    """After a keep-last forget (which read only the kept records) the gc of the same process
    reads each stray's header once and the kept records not again."""
    url, opts = s3_store
    _history(url, opts, N)
    st = ckptfs.open_store(url, **opts)
    forget(st.repo, Policy(keep_last=1))
    c = S3Requests(st)
    rep = gc(st.repo, grace_ms=0)
    got = c.take()
    assert rep.containers.containers_deleted == N - 1 and not rep.problems, rep
    assert got["GetObject"] <= (N - 1) + 6, got
    assert verify(ckptfs.open_store(url, **opts).repo, read_data=True).ok
