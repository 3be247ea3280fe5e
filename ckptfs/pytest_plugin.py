"""pytest plugin, opt-in: fixtures for testing code that uses ckptfs.

Load it with ``pytest_plugins = ["ckptfs.pytest_plugin"]`` in a ``conftest.py`` or with
``pytest -p ckptfs.pytest_plugin``; installing ckptfs does not load it into every pytest run.

The checks themselves live in ``ckptfs.testing`` (no pytest needed there).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ckptfs.runtime.store import Store, open_store


@pytest.fixture
def ckptfs_store(tmp_path: Path) -> Store:
    """A fresh, empty local store in the test's temporary directory."""
    return open_store(str(tmp_path / "ckptfs-store"))
