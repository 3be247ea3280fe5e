"""A copied record that the sweep handshake withdraws (spec/retention.md "Sweeps and writers")
takes its bodies with it: the destination must forget where they were, or the next copy into
the same Repository names bodies in a deleted record (a broken snapshot). The withdrawal is
what the handshake does when a collector's sweep may have taken what the record relies on:
delete the record and raise ConflictError; here it is made to happen on the first record."""

from __future__ import annotations

from pathlib import Path

import pytest

import ckptfs
from ckptfs.errors import ConflictError
from ckptfs.format.names import record_path
from ckptfs.ops.copy import copy_runs
from ckptfs.ops.verify import verify

BIG = "shared text " * 2000  # bodies the two runs share: deduplicated by the copy


def test_bodies_of_a_withdrawn_copy_record_are_not_named_by_the_next(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = ckptfs.open_store(str(tmp_path / "src"))
    src.start_run("a").checkpoint({"text": BIG, "n": 1})
    src.start_run("b").checkpoint({"text": BIG, "n": 2})
    dst = ckptfs.open_store(str(tmp_path / "dst"))
    sweeps = dst.repo.objects.sweeps
    real = sweeps.after_record

    def withdraw_first(manifest: object, results: object, after: object = None) -> None:
        m = manifest
        if m.run == "a":  # type: ignore[attr-defined]
            dst.repo.storage.delete(record_path("a", 1))
            raise ConflictError("the sweep may have taken what seq 1 relies on (withdrawn)")
        real(manifest, results, after)  # type: ignore[arg-type]

    monkeypatch.setattr(sweeps, "after_record", withdraw_first)
    first = copy_runs(src.repo, dst.repo, runs=["a"], workers=1)
    assert first.conflicts and "withdrawn" in first.conflicts[0], first.conflicts
    assert not dst.repo.storage.exists(record_path("a", 1))
    monkeypatch.setattr(sweeps, "after_record", real)
    copy_runs(src.repo, dst.repo, runs=["b", "a"], workers=1)  # the same Repository goes on
    fresh = ckptfs.open_store(str(tmp_path / "dst"))
    report = verify(fresh.repo, read_data=True)
    assert report.ok, report.problems
    assert fresh.read("b") == {"text": BIG, "n": 2}
    assert fresh.read("a") == {"text": BIG, "n": 1}
