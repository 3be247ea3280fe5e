"""The bench harness itself: its data compresses like text and its W1 peers restore exactly."""

from __future__ import annotations

import os

import pytest
import zstandard

from bench import common
from bench.data import message, messages
from bench.peers import Ckptfs, CkptfsAppend, PickleFsync


def test_messages_are_deterministic_text_that_compresses_about_3x() -> None:
    import cbor2

    ms = messages(300)
    assert ms == messages(300) and ms[7] == message(7) and ms[7] != message(7, seed=1)
    raw = cbor2.dumps(ms)
    assert 900 <= len(raw) / 300 <= 1100  # about 1 KB a message
    ratio = len(raw) / len(zstandard.compress(raw, 3))
    assert 2.5 <= ratio <= 3.5, ratio  # like chat text, not repeated characters


@pytest.mark.parametrize("peer", [Ckptfs.name, CkptfsAppend.name, PickleFsync.name])
def test_w1_worker_round_trip_and_fsync_count(peer: str, tmp_path: os.PathLike[str]) -> None:
    from bench import w1

    path = os.path.join(tmp_path, "s")
    out = w1.write_worker(peer, 12, path)
    assert out["steps"] == 12 and len(out["lat"]) == 12
    assert out["fsyncs"] >= 12  # every checkpoint is durable
    assert len(w1.restore_worker(peer, 12, path)["lat"]) == w1.RESTORE_REPEATS
    with pytest.raises(AssertionError):  # the restore check really compares states
        w1.restore_worker(peer, 13, path)


def test_sizes_and_percentiles(tmp_path: os.PathLike[str]) -> None:
    p = os.path.join(tmp_path, "d")
    os.makedirs(p)
    with open(os.path.join(p, "a"), "wb") as f:
        f.write(b"x" * 5000)
    total, du_kib, files = common.tree_size(p)
    assert (total, files) == (5000, 1) and du_kib >= 4
    assert common.pct([1, 2, 3, 4, 100], 99) == 100 and common.pct([1, 2, 3, 4], 50) == 2
    assert common.verdict(0.4, 0.5) == "PASS" and common.verdict(0.6, 0.5) == "MISS"


@pytest.mark.parametrize("name", ["r36", "r36.md"])
def test_write_result_names_one_markdown_file(
        name: str, tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """``--out r36`` and ``--out r36.md`` both write bench/results/r36.md (the second wrote
    r36.md.md)."""
    monkeypatch.setattr(common, "RESULTS", os.fspath(tmp_path))
    path = common.write_result(name, "# r\n")
    assert os.listdir(tmp_path) == ["r36.md"] and path == os.path.join(tmp_path, "r36.md")
