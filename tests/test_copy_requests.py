"""What ``copy`` asks of the destination: one scan of its chunks/ tells which chunks it holds
and how old each is, so the cost of finding out does not grow with the number of fan-out
folders or of chunks already there (no listing per folder, no age check per chunk); the ages
it reads still decide which chunks are written again (grace rule)."""

from __future__ import annotations

import collections
import os
from pathlib import Path
from typing import Any

import pytest

import ckptfs
from ckptfs.format.names import CHUNKS
from ckptfs.ops.copy import copy_runs
from ckptfs.storage import Storage, open_storage
from ckptfs.store.repository import Repository
from tests.faults import FaultyStorage
from tests.retention_helpers import age_tree

#: format v1 layout on purpose: counts v1 objects per request; v2 copy requests: bench/
pytestmark = pytest.mark.layout(1)

SMALL = ckptfs.ChunkerParams(min_size=256, avg_size=1024, max_size=4096)
LOOKUPS = ("list", "scan", "size", "mtime", "read")


def _source(root: str) -> None:
    """Runs ``base`` (one chunk) and ``many`` (~200 chunks over most of the 256 fan-out
    folders); ``tiny`` and ``wide`` each add one snapshot reusing one of them."""
    s = ckptfs.open_store(root, chunker=SMALL)
    blob, small = os.urandom(300_000), os.urandom(3000)
    s.start_run("base").checkpoint({"data": ckptfs.Blob(small)})
    s.start_run("many").checkpoint({"data": ckptfs.Blob(blob)})
    s.start_run("tiny").checkpoint({"data": ckptfs.Blob(small), "n": 1})
    s.start_run("wide").checkpoint({"data": ckptfs.Blob(blob), "n": 1})


def _copy_counted(src: str, dst_url: str, opts: dict[str, Any], seeded: str, run: str
                  ) -> tuple[collections.Counter[str], collections.Counter[str]]:
    """Copy ``seeded`` into a fresh destination, then ``run`` through a counting wrapper;
    the wrapper's storage operations and (on S3, counted on the botocore client) the
    requests of that second copy."""
    copy_runs(ckptfs.open_store(src).repo, ckptfs.open_store(dst_url, **opts).repo,
              runs=[seeded])
    inner = open_storage(dst_url, **opts)
    requests: collections.Counter[str] = collections.Counter()

    def hook(**kw: Any) -> None:
        requests[kw.get("event_name", "?").rsplit(".", 1)[-1]] += 1

    events = inner.fs.s3.meta.events if hasattr(getattr(inner, "fs", None), "s3") else None
    if events is not None:
        events.register("before-send.s3", hook)
    counted = FaultyStorage(inner)
    try:
        rep = copy_runs(ckptfs.open_store(src).repo, Repository(counted), runs=[run])
    finally:
        if events is not None:
            events.unregister("before-send.s3", hook)
    assert rep.ok and rep.snapshots_copied == 1 and rep.chunks_present >= 1
    return collections.Counter(name for name, _ in counted.log), requests


@pytest.mark.parametrize("kind", ["local", "s3"])
def test_finding_present_chunks_costs_the_same_for_one_folder_or_all(
        kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    src = str(tmp_path / "src")
    _source(src)
    if kind == "s3":
        from tests.conftest import new_s3_url
        opts: dict[str, Any] = request.getfixturevalue("s3_options")
        one, wide = new_s3_url(), new_s3_url()
    else:
        opts, one, wide = {}, str(tmp_path / "one"), str(tmp_path / "wide")
    ops_one, req_one = _copy_counted(src, one, opts, "base", "tiny")
    ops_wide, req_wide = _copy_counted(src, wide, opts, "many", "wide")
    folders = len(open_storage(wide, **opts).list(CHUNKS))
    assert folders > 100  # the wide destination really spans the fan-out
    lookups = {k: ops_wide[k] for k in LOOKUPS}
    assert lookups == {k: ops_one[k] for k in LOOKUPS}, (ops_one, ops_wide)
    assert ops_wide["scan"] == 1 and ops_wide["mtime"] == ops_wide["size"] == 0
    for op in ("ListObjectsV2", "HeadObject", "GetObject"):  # S3: and the requests behind them
        assert req_wide[op] == req_one[op], (op, req_one, req_wide)
    assert (sum(req_wide.values()) > 0) == (kind == "s3")


def test_listed_ages_decide_what_is_written_again(tmp_path: Path) -> None:
    """Chunks the destination holds are relied on while recently modified, and written again
    (refreshed) once older than the reuse window: the ages come from the one scan."""
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    _source(src)
    copy_runs(ckptfs.open_store(src).repo, ckptfs.open_store(dst).repo, runs=["many"])
    chunks = Path(dst) / CHUNKS
    before = {p: p.stat().st_mtime for p in chunks.rglob("*") if p.is_file()}
    rep = copy_runs(ckptfs.open_store(src).repo, ckptfs.open_store(dst).repo, runs=["wide"])
    assert rep.chunks_present == len(before) and rep.chunks_copied == 0
    assert all(p.stat().st_mtime == t for p, t in before.items())  # fresh: relied on
    age_tree(str(chunks), 3600)
    old = {p: p.stat().st_mtime for p in chunks.rglob("*") if p.is_file()}
    s = ckptfs.open_store(src)
    s.resume("wide").checkpoint({**s.read("wide"), "n": 2})
    rep = copy_runs(s.repo, ckptfs.open_store(dst).repo, runs=["wide"])
    assert rep.snapshots_copied == 1 and rep.chunks_copied == 0 and rep.chunks_present == len(old)
    assert all(p.stat().st_mtime > t + 3000 for p, t in old.items())  # old: refreshed
