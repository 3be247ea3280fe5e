"""A reader refuses a format version or required feature it does not know, saying who reads it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import ckptfs
from ckptfs.errors import UnsupportedFeature, UnsupportedVersion
from ckptfs.format import cbor, framing, models
from ckptfs.format.digest import Digest
from ckptfs.format.models import RunRecord
from ckptfs.format.names import CONFIG_PATH, record_path, snapshot_path


def _store_with_run(tmp_path: Path) -> tuple[str, ckptfs.Store]:
    url = str(tmp_path / "s")
    store = ckptfs.open_store(url)
    store.start_run("r", schema=("agent", 1)).checkpoint({"x": 1})
    return url, store


def _commit_raw(store: ckptfs.Store, seq: int, **changes: Any) -> None:
    """Commit seq ``seq`` of run r as a copy of seq 1's manifest with top-level ``changes``."""
    m = store.get("r@1").manifest.to_cbor()
    m.update(changes, seq=seq)
    data = cbor.encode(m)
    d = Digest.of(data)
    store.storage.write(snapshot_path(d), framing.frame(data))
    rec = RunRecord(run="r", seq=seq, snapshot=d, size=len(data), created=m["created"])
    store.storage.create(record_path("r", seq), rec.to_bytes())


def _rewrite_config(url: str, **changes: Any) -> None:
    path = Path(url) / CONFIG_PATH
    cfg = cbor.decode(path.read_bytes(), what="config")
    cfg.update(changes)
    path.write_bytes(cbor.encode(cfg))


def test_newer_manifest_version_names_the_version_and_writer(tmp_path: Path) -> None:
    _, store = _store_with_run(tmp_path)
    _commit_raw(store, 2, format=2, writer="ckptfs-python/9.0.0")
    with pytest.raises(UnsupportedVersion) as ei:
        store.read("r@2")
    msg = str(ei.value)
    assert "format version 2" in msg and "ckptfs-python/9.0.0" in msg
    assert "reads format version 1 only" in msg and "later ckptfs release reads it" in msg
    assert store.read("r@1") == {"x": 1}  # older snapshots stay readable


def test_known_version_row_gives_the_release_that_reads_it(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    _, store = _store_with_run(tmp_path)
    _commit_raw(store, 2, format=0)
    monkeypatch.setitem(models.MANIFEST_READERS, 0, ">= 0.0.1, < 0.1.0")
    with pytest.raises(UnsupportedVersion, match=r"ckptfs >= 0.0.1, < 0.1.0 reads format version 0"):
        store.read("r@2")


def test_required_feature_in_manifest_is_refused(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _, store = _store_with_run(tmp_path)
    _commit_raw(store, 2, required=["ledger-v9", "zeta"])
    monkeypatch.setitem(models.FEATURE_READERS, "zeta", ">= 3.1")
    with pytest.raises(UnsupportedFeature) as ei:
        store.read("r@2")
    msg = str(ei.value)
    assert "ledger-v9, zeta" in msg
    assert "feature 'ledger-v9' is unknown to this ckptfs, so a later release reads it" in msg
    assert "ckptfs >= 3.1 reads feature 'zeta'" in msg


def test_store_config_version_and_feature(tmp_path: Path) -> None:
    url, _ = _store_with_run(tmp_path)
    _rewrite_config(url, version=7)
    with pytest.raises(UnsupportedVersion, match="store config is format version 7.*later ckptfs"):
        ckptfs.open_store(url).read("r")
    _rewrite_config(url, version=1, required=["sharded-runs"])
    with pytest.raises(UnsupportedFeature, match="sharded-runs"):
        ckptfs.open_store(url).read("r")


def test_cli_reports_the_version_error(tmp_path: Path) -> None:
    url, _ = _store_with_run(tmp_path)
    _rewrite_config(url, version=7)
    p = subprocess.run([sys.executable, "-m", "ckptfs.cli", "verify", url],
                       capture_output=True, text=True)
    assert p.returncode == 1
    assert "unsupported-version" in p.stdout and "format version 7" in p.stdout
