"""Issue 32: the reference's side of points spec/v2.md settled that no vector can reach (the
others are pinned by vectors: ckptfs_conformance/gen_spec32.py)."""

from __future__ import annotations

import pytest

from ckptfs.errors import FormatError
from ckptfs.format import containers as ct
from ckptfs.format.digest import Digest


def _pair() -> tuple[Digest, Digest]:
    """Two digests that share their first 8 bytes (made up: no real BLAKE3 pair is known)."""
    return Digest(b"\x11" * 8 + b"\x01" * 24), Digest(b"\x11" * 8 + b"\x02" * 24)


def test_a_writer_refuses_to_locate_two_chunks_by_one_prefix() -> None:
    """spec/v2.md 3.5: no two rows of one record share a prefix; a writer that would write
    them carries a body or fails the commit (ckptfs fails it)."""
    a, b = _pair()
    where = {a: ct.Location(ct.RecordRef("r", 1), 100, 10),
             b: ct.Location(ct.RecordRef("r", 1), 110, 10)}
    with pytest.raises(FormatError, match="share their first 8 bytes"):
        ct.make_locators(where)
    containers, rows = ct.make_locators({a: where[a]})  # one of them alone is fine
    assert len(rows) == 1 and containers == (ct.RecordRef("r", 1),)


def test_a_reader_refuses_a_record_with_two_rows_of_one_prefix() -> None:
    a, b = _pair()
    row = [a.raw[:8], 0, 100, 10]
    with pytest.raises(FormatError, match="second row"):
        getattr(ct, "_locators")({"containers": [["r", 1]], "chunks": [row, list(row)]}, "r")
    getattr(ct, "_locators")({"containers": [["r", 1]], "chunks": [row]}, "r")


def test_the_commit_path_refuses_two_chunks_of_one_prefix() -> None:
    """The writer's own record encoder (record_bytes: the table and its row cache) refuses
    what make_locators refuses."""
    from ckptfs.format import record_bytes

    a, b = _pair()
    where = {a.raw: ct.Location(ct.RecordRef("r", 1), 100, 10),
             b.raw: ct.Location(ct.RecordRef("r", 1), 110, 10)}
    with pytest.raises(FormatError, match="share their first 8 bytes"):
        record_bytes.locator_table(where)
    with pytest.raises(FormatError, match="share their first 8 bytes"):
        record_bytes.LocatorRows().table(where)
    assert record_bytes.LocatorRows().table({a.raw: where[a.raw]})
