"""copy (and export) carry the retention layer: expiry overrides, retired ranges and
tombstones reach the destination before the records they govern, and no copy brings back
expired, forgotten or erased data (spec/retention.md section 9)."""

from __future__ import annotations

import os
import time
import zipfile
from pathlib import Path

import pytest
from tests.clihelp import cli, cli_json
from tests.retention_helpers import files_containing

import ckptfs
from ckptfs.errors import ConflictError, ErasedError, ExpiredError, NotFound
from ckptfs.ops.copy import copy_runs
from ckptfs.ops.erase import erase
from ckptfs.ops.expire import set_expiry
from ckptfs.ops.gc import gc
from ckptfs.ops.verify import verify
from ckptfs.storage.local import LocalStorage
from ckptfs.store.lifecycle import effective_expiry
from ckptfs.store.repository import Snapshot


HOUR = 3_600_000


def _ms() -> int:
    return int(time.time() * 1000)


def _run(url: str, run_id: str, n: int, secret: str = "") -> list[Snapshot]:
    """``n`` snapshots, each with a unique chunked value (and ``secret`` planted in it)."""
    run = ckptfs.open_store(url).start_run(run_id)
    for i in range(1, n + 1):
        run.checkpoint({"i": i, "text": f"{secret}{run_id}-{i}-" + os.urandom(3000).hex()})
    return list(ckptfs.open_store(url).snapshots(run_id))


def _copy(src: str, dst: str, **kw: object) -> dict[str, object]:
    rep = copy_runs(ckptfs.open_store(src).repo, ckptfs.open_store(dst).repo, **kw)  # type: ignore[arg-type]
    assert rep.ok
    return rep.to_json()


def _clean(*urls: str) -> None:
    for u in urls:
        rep = verify(ckptfs.open_store(u).repo, read_data=True)
        assert rep.ok, rep.problems


def _idempotent(src: str, dst: str) -> None:
    again = _copy(src, dst)
    assert again["snapshots_copied"] == again["chunks_copied"] == again["bytes_copied"] == 0
    assert again["controls_written"] == 0 and again["erased"] == []


# -- expiry ---------------------------------------------------------------------------------------
PAST = "2000-01-01T00:00:00Z"


def _eff(url: str, run_id: str, seq: int) -> int | None:
    s = ckptfs.open_store(url)
    return effective_expiry(s.storage, run_id, seq, s.get(f"{run_id}@{seq}").expires)


def test_expire_then_copy_never_serves_the_expired_snapshot(tmp_path: Path) -> None:
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    _run(src, "r", 5)
    soon = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(_ms() / 1000 + 3600))
    cli("expire", src, "r", "--at", soon)  # the whole run, shortened
    cli("expire", src, "r@2", "--at", PAST)  # already over: not sent at all
    rep = cli_json("copy", src, dst)
    assert rep["snapshots_copied"] == 4 and rep["snapshots_skipped"] == 1
    d = ckptfs.open_store(dst)
    assert d.repo.seqs("r") == [1, 3, 4, 5]
    with pytest.raises(NotFound):
        d.read("r@2")
    assert all(_eff(dst, "r", s) == _eff(src, "r", s) is not None for s in (1, 3, 4, 5))
    # expired in the source after it was copied: the next copy stops the destination serving it
    ckptfs.open_store(dst).read("r@3")
    cli("expire", src, "r@3", "--at", PAST)
    assert cli_json("copy", src, dst)["controls_written"] == 1
    with pytest.raises(ExpiredError):
        ckptfs.open_store(dst).read("r@3")
    _idempotent(src, dst)
    _clean(src, dst)


def test_copy_never_lengthens_a_lifetime_in_the_destination(tmp_path: Path) -> None:
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    _run(src, "r", 3)
    _copy(src, dst)
    set_expiry(ckptfs.open_store(dst).repo, "r@1", _ms() + HOUR)  # shortened here ...
    set_expiry(ckptfs.open_store(src).repo, "r", None)  # ... while the source says "never"
    set_expiry(ckptfs.open_store(src).repo, "r@2", _ms() + 2 * HOUR)
    set_expiry(ckptfs.open_store(dst).repo, "r", None)  # the destination says "never" ...
    set_expiry(ckptfs.open_store(dst).repo, "r@3", None)
    set_expiry(ckptfs.open_store(src).repo, "r@3", _ms() + 3 * HOUR)  # ... the source not
    before1 = _eff(dst, "r", 1)
    _copy(src, dst)
    assert _eff(dst, "r", 1) == before1  # the earlier of the two stays
    assert _eff(dst, "r", 2) == _eff(src, "r", 2)
    assert _eff(dst, "r", 3) == _eff(src, "r", 3) is not None
    _idempotent(src, dst)


class _Recording(LocalStorage):
    """Local storage that records the order of its writes."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.log: list[str] = []

    def create(self, path: str, data: bytes) -> None:
        self.log.append(path)
        super().create(path, data)

    def replace(self, path: str, data: bytes) -> None:
        self.log.append(path)
        super().replace(path, data)


def test_a_run_forgotten_whole_is_copied_as_a_marker(tmp_path: Path) -> None:
    """A run gc forgot whole in the source: a backup copy has nothing of it to send and writes
    nothing for it; a mirror copy carries the marker (the id is closed there too)."""
    src, dst, mirror = str(tmp_path / "src"), str(tmp_path / "dst"), str(tmp_path / "mirror")
    _run(src, "gone", 2)
    _run(src, "kept", 1)
    set_expiry(ckptfs.open_store(src).repo, "gone", 1)
    gc(ckptfs.open_store(src).repo, grace_ms=0)
    assert ckptfs.open_store(src).repo.seqs("gone") == []
    rep = _copy(src, dst)  # used to fail: "no run 'gone'"
    assert rep["runs"] == 2 and rep["snapshots_copied"] == 1 and rep["controls_written"] == 0
    assert not ckptfs.open_store(dst).storage.list("runs/gone")
    rep = _copy(src, mirror, mirror=True)
    assert rep["runs"] == 2 and rep["snapshots_copied"] == 1
    with pytest.raises(ConflictError):
        ckptfs.open_store(mirror).start_run("gone")
    _idempotent(src, dst)
    assert _copy(src, mirror, mirror=True)["controls_written"] == 0


# -- erase ------------------------------------------------------------------------------------
def _two_runs(src: str) -> None:
    _run(src, "victim", 3, secret="SECRET-7f3a")
    _run(src, "other", 2)


def _erased_in(dst: str, run_id: str) -> None:
    d = ckptfs.open_store(dst)
    for ref in (run_id, f"{run_id}@1"):
        with pytest.raises(ErasedError):
            d.read(ref)
    with pytest.raises(ErasedError):
        d.start_run(run_id)
    assert d.repo.erased(run_id) is not None
    assert files_containing(dst, b"SECRET-7f3a") == []
    assert d.read("other@2")["i"] == 2


def test_erase_before_the_first_copy(tmp_path: Path) -> None:
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    _two_runs(src)
    erase(ckptfs.open_store(src).repo, "victim", reason="request #1")
    rep = _copy(src, dst)
    assert rep["snapshots_copied"] == 2 and rep["erased"] == []  # nothing there to erase
    _erased_in(dst, "victim")
    stone = ckptfs.open_store(dst).repo.erased("victim")
    assert stone is not None and "request #1" in str(stone)
    _idempotent(src, dst)
    _clean(src, dst)


def test_erase_of_one_snapshot_after_a_copy(tmp_path: Path) -> None:
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    snaps = _run(src, "r", 3, secret="")
    _copy(src, dst)
    erase(ckptfs.open_store(src).repo, "r", seq=2, reason="request #3")
    assert _copy(src, dst)["erased"] == ["r@2"]
    d = ckptfs.open_store(dst)
    with pytest.raises(ErasedError):
        d.read("r@2")
    with pytest.raises(NotFound):
        d.get(snaps[1].id)
    assert d.repo.seqs("r") == [1, 3] and d.read("r@3")["i"] == 3
    _idempotent(src, dst)
    _clean(src, dst)


def test_a_run_erased_in_the_destination_is_not_copied_back(tmp_path: Path) -> None:
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    _two_runs(src)
    _copy(src, dst)
    erase(ckptfs.open_store(dst).repo, "victim", reason="erased at the copy only")
    rep = _copy(src, dst)
    assert rep["snapshots_copied"] == 0 and rep["snapshots_skipped"] == 3
    _erased_in(dst, "victim")


def test_export_carries_tombstones_and_leaves_expired_data_out(tmp_path: Path) -> None:
    src = str(tmp_path / "src")
    _two_runs(src)
    erase(ckptfs.open_store(src).repo, "victim", reason="request #4")
    set_expiry(ckptfs.open_store(src).repo, "other@1", 1)
    out = str(tmp_path / "x.zip")
    cli("export", src, out)
    names = zipfile.ZipFile(out).namelist()
    assert "tombstones/victim.cbor" in names
    z = ckptfs.open_store(f"zip://::{out}")
    with pytest.raises(ErasedError):
        z.read("victim")
    assert z.repo.seqs("other") == [2]
    assert cli_json("verify", f"zip://::{out}")["ok"]
