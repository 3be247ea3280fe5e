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
