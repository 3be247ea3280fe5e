"""Issue 35 item 12, the cases an earlier session left: bad input that escaped as a bare
Python error or misled. Each is now a ckptfs error naming what to fix. CLI cases run ``ckptfs``
as a subprocess; the S3 cases talk to a moto server on loopback."""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

import ckptfs
from ckptfs.errors import CkptfsError, InvalidArgument, NotAStore, StorageError
from tests.clihelp import cli


@pytest.mark.skipif(not sys.platform.startswith("linux") or not os.path.isdir("/proc"),
                    reason="needs Linux's /proc")
def test_a_store_under_proc_names_the_path_not_tmp(tmp_path: Path) -> None:
    """Before: 'StorageError: tmp: No such file or directory', naming a folder of the store
    and not where it was."""
    url = f"/proc/ckptfs-{uuid.uuid4().hex[:8]}"
    with pytest.raises(StorageError) as e:
        ckptfs.open_store(url).start_run("r").checkpoint({"a": 1})
    assert str(e.value).startswith(url), e.value
    assert "file system that can hold" in str(e.value)
    p = cli("init", url, check=3)
    assert f"error (storage): {url}" in p.stderr, p.stderr


def test_the_plain_data_error_names_registered_types(tmp_path: Path) -> None:
    """Before: a bare TypeError that listed only the plain types, as if nothing else could be
    stored, although registered types (built in and the application's) can."""
    run = ckptfs.open_store(str(tmp_path / "s")).start_run("r")
    with pytest.raises(InvalidArgument) as e:
        run.checkpoint({"a": {1: "int key"}})
    assert isinstance(e.value, CkptfsError) and isinstance(e.value, TypeError)
    msg = str(e.value)
    assert "state['a']" in msg and "registered" in msg and "codecs.register(" in msg, msg
    assert "datetime" in msg and "set" in msg
    run.checkpoint({"a": {"1": "str key"}})  # the fix it names works


def test_a_missing_bucket_is_not_called_an_empty_store(s3_options: dict[str, Any]) -> None:
    """Before: 'no ckptfs store here' for a bucket that does not exist, and init's advice did
    not name --create-bucket."""
    url = f"s3://nobucket-{uuid.uuid4().hex[:8]}/p"
    with pytest.raises(NotAStore) as e:
        ckptfs.open_store(url, **s3_options).repo.config
    assert "does not exist" in str(e.value) and "--create-bucket" in str(e.value), e.value
    ls = cli("ls", url, check=3)
    assert "bucket" in ls.stderr and "does not exist" in ls.stderr, ls.stderr
    assert "no ckptfs store here" not in ls.stderr
    init = cli("init", url, check=3)
    assert f"ckptfs init {url} --create-bucket" in init.stderr, init.stderr
    cli("init", url, "--create-bucket")  # the advice works
    cli("ls", url)
    # an existing bucket without a store is still "no store here"
    empty = f"s3://{url.split('/')[2]}/other"
    assert "no ckptfs store here" in cli("ls", empty, check=3).stderr
