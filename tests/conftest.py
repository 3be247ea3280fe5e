"""Shared fixtures: stores on every backend the suite can run locally."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

import ckptfs
from ckptfs.storage import Storage, open_storage


@pytest.fixture(params=["local", "memory"])
def store_url(request: pytest.FixtureRequest, tmp_path: object) -> Iterator[str]:
    """A fresh, empty store URL on each backend."""
    if request.param == "local":
        yield str(tmp_path / "store")  # type: ignore[operator]
    else:
        url = f"memory://ckptfs-test-{uuid.uuid4().hex}"
        yield url
        import fsspec

        fs = fsspec.filesystem("memory")
        if fs.exists(url):
            fs.rm(url, recursive=True)


@pytest.fixture
def store(store_url: str) -> ckptfs.Store:
    return ckptfs.open_store(store_url)


@pytest.fixture
def storage(store_url: str) -> Iterator[Storage]:
    """The raw storage backend of a fresh store URL (every backend ``store_url`` has)."""
    s = open_storage(store_url)
    yield s
    s.close()
