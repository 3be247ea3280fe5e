"""The storage contract, the create-only probe and the read-back rule on the GCS and Azure
emulators (issue 20): gs:// through gcsfs on fake-gcs-server, az:// through adlfs on Azurite.

The tests of tests/test_storage_contract.py that take a store of any backend run here once per
emulator: this module's ``backend`` fixture (which ``storage``, ``store_url`` and
``store_options`` of conftest.py build on) gives the emulators' stores instead of local,
memory and S3.
"""

from __future__ import annotations

from typing import Any

import pytest

from ckptfs.storage import open_storage
from ckptfs.storage.objects import FsspecStorage
from tests.test_storage_contract import TestStorageContract as _Contract
from tests.test_storage_contract import (
    test_create_of_bytes_already_present_returns_on_object_stores,
    test_create_only_is_proven_and_never_empty,
    test_objects_written_by_another_client_are_seen,
)

__all__ = ["test_create_of_bytes_already_present_returns_on_object_stores",
           "test_create_only_is_proven_and_never_empty",
           "test_objects_written_by_another_client_are_seen"]


@pytest.fixture
def backend(cloud_backend: tuple[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """This module's stores: one per emulator (conftest.py's ``cloud_backend``)."""
    return cloud_backend


class TestCloudContract(_Contract):
    """Every test of the storage contract, on gs:// and az://."""


def test_the_probe_finds_exclusive_creates(cloud_backend: tuple[str, dict[str, Any]]) -> None:
    """The create-only probe passes on both emulators: a second conditional create of the
    probe object is refused and the first bytes stay."""
    url, opts = cloud_backend
    s = open_storage(url, **opts)
    assert isinstance(s, FsspecStorage)
    s.write("chunks/aa/x", b"x")  # the first write probes
    assert s.capabilities.create_only and s.capabilities.create_only_how == "exclusive open ('xb')"
    assert s.list("tmp") == []  # the probe object is gone


def test_ranged_reads(cloud_backend: tuple[str, dict[str, Any]]) -> None:
    """``read_range`` and ``read_ranges`` (format v2 reads chunk bodies out of containers):
    one ranged GET each, fewer bytes when the object ends early, nothing past its end or of an
    empty object, None for a missing one."""
    url, opts = cloud_backend
    s = open_storage(url, **opts)
    body = bytes(range(256)) * 8
    s.write("packs/aa/p", body)
    s.write("packs/aa/empty", b"")
    assert s.read_range("packs/aa/p", 10, 20) == body[10:20]
    assert s.read_range("packs/aa/p", 2040, 4000) == body[2040:]
    assert s.read_range("packs/aa/p", 5000, 6000) == b""
    assert s.read_range("packs/aa/empty", 0, 10) == b""
    with pytest.raises(FileNotFoundError):
        s.read_range("packs/aa/missing", 0, 10)
    got = s.read_ranges([("packs/aa/p", 0, 3), ("packs/aa/missing", 0, 3), ("packs/aa/p", 100, 356),
                         ("packs/aa/empty", 0, 1)])
    assert got == [body[:3], None, body[100:356], b""]


def test_list_after_from_a_key(cloud_backend: tuple[str, dict[str, Any]]) -> None:
    """GCS lists from a key (``startOffset``, paginated): every object below the folder whose
    relative name sorts after ``after``, ascending, in one request per 1,000 names. Azure's
    List Blobs has no start key: None, and callers probe names instead (RELIABILITY.md)."""
    url, opts = cloud_backend
    s = open_storage(url, **opts)
    names = [f"{i:020d}" for i in range(1, 8)] + ["retired/00000000000000000002", "zz"]
    s.write_many([(f"runs/r/{n}", b"x") for n in names] + [("runs/r0/x", b"y"),
                                                            ("runs/rr/00000000000000000009", b"z")])
    got = s.list_after("runs/r", f"{3:020d}")
    if url.startswith("az://"):
        assert got is None and not s.lists_after
        return
    assert s.lists_after
    assert got == [f"{i:020d}" for i in range(4, 8)] + ["retired/00000000000000000002", "zz"]
    assert s.list_after("runs/r", "zz") == [] and s.list_after("runs/none", "") == []
    assert s.list_after("runs/r", "") == sorted(names)
