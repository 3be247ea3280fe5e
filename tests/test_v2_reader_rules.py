"""Reader rules of spec/v2.md that the conformance vectors found the code breaking (each test
failed before its fix)."""

from __future__ import annotations

from pathlib import Path

import pytest

import ckptfs
from ckptfs.errors import CorruptSnapshot
from ckptfs.format import containers as ct
from ckptfs.format.names import record_path



def _store_with_bodies(p: Path) -> tuple[Path, ct.Container, bytes]:
    s = ckptfs.open_store(str(p))
    s.start_run("r1").checkpoint({"blob": ckptfs.Blob(bytes(range(256)) * 40)})
    s.close()
    f = p / record_path("r1", 1)
    data = f.read_bytes()
    return f, ct.decode(data, what="record"), data


def test_damaged_body_without_other_copy_is_corrupt_not_missing(tmp_path: Path) -> None:
    """spec/v2.md 6 step 5: found somewhere but never with the right digest is corrupt."""
    f, c, data = _store_with_bodies(tmp_path / "s")
    b = c.header.bodies[0]
    damaged = bytearray(data)
    damaged[c.body_start + b.offset + b.stored - 1] ^= 1
    f.write_bytes(bytes(damaged))
    snap = ckptfs.open_store(str(tmp_path / "s"))
    with pytest.raises(CorruptSnapshot):
        snap.read("r1")["blob"].read()


def test_damaged_forward_is_absent_so_an_unheld_chunk_is_missing(tmp_path: Path) -> None:
    """spec/v2.md 8: a damaged forward is treated as absent for reading; a chunk no container,
    forward or loose object holds is missing (6 step 5, 11), not corrupt."""
    from ckptfs.errors import MissingObject
    from ckptfs.format.names import forward_path

    p = tmp_path / "s"
    s = ckptfs.open_store(str(p))
    r = s.start_run("r1")
    r.checkpoint({"blob": ckptfs.Blob(bytes(range(256)) * 40)})
    r.checkpoint({"blob": ckptfs.Blob(bytes(range(256)) * 40), "n": 2})
    s.close()
    (p / record_path("r1", 1)).unlink()  # r1@2 locates its chunks in r1@1, now absent
    (p / forward_path(record_path("r1", 1))).parent.mkdir(parents=True)
    (p / forward_path(record_path("r1", 1))).write_bytes(b"\xa1\x66bodies")  # torn
    with pytest.raises(MissingObject):
        ckptfs.open_store(str(p)).read("r1@2")["blob"].read()
