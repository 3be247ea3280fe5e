"""A v2 run record may carry up to record_bulk_max (8 MiB) of new chunk bodies (spec/v2.md
section 2), so it is often larger than v1's 64 KiB record limit: readers must still read its
header and its bodies by range, on local disk and on the S3 API."""

from __future__ import annotations

import os
from typing import Any


import ckptfs

from tests.conftest import new_s3_url



def _roundtrip(url: str, **opts: Any) -> None:
    # ~200 KB of chat messages: new chunk bodies that go into the record (blobs go to packs)
    data = [{"id": i, "text": os.urandom(700).hex()} for i in range(200)]
    store = ckptfs.open_store(url, **opts)
    run = store.start_run("big", schema=("bulk", 1))
    run.checkpoint({"messages": data, "n": 1})
    store.close()
    fresh = ckptfs.open_store(url, **opts)
    state = fresh.read("big")
    assert state["n"] == 1
    assert state["messages"] == data
    fresh.close()


def test_record_over_64k_reads_back_local(tmp_path: Any) -> None:
    url = str(tmp_path / "s")
    _roundtrip(url)
    recs = [os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(os.path.join(url, "runs"))
            for f in fs if f.isdigit()]
    assert max(recs) > 64 * 1024  # the case under test: a record past v1's limit


def test_record_over_64k_reads_back_s3(s3_options: dict[str, Any]) -> None:
    _roundtrip(new_s3_url(), **s3_options)


def _blob_roundtrip(url: str, **opts: Any) -> None:
    data = os.urandom(20 * 1024 * 1024)  # over pack_target: a pack of 16 MiB of bodies + header
    store = ckptfs.open_store(url, **opts)
    run = store.start_run("blob", schema=("bulk", 1))
    run.checkpoint({"data": ckptfs.Blob(data)})
    store.close()
    fresh = ckptfs.open_store(url, **opts)
    assert fresh.read("blob")["data"].read() == data
    fresh.close()


def test_a_pack_past_16_mib_is_readable_local(tmp_path: Any) -> None:
    """A pack holds up to pack_target (16 MiB) of bodies plus its header, so it can exceed
    16 MiB (a 128 MiB W2 blob wrote a 16,785,369-byte pack); readers must not refuse it as an
    oversized control object."""
    from ckptfs.storage.local import LocalStorage

    storage = LocalStorage(str(tmp_path / "s"))
    path = "packs/ab/" + "ab" * 32
    storage.write(path, bytes(16 * 1024 * 1024 + 8192))
    assert storage.read_range(path, 16 * 1024 * 1024, 16 * 1024 * 1024 + 10) == bytes(10)
    assert len(storage.read(path)) == 16 * 1024 * 1024 + 8192


def test_full_pack_reads_back_s3(s3_options: dict[str, Any]) -> None:
    _blob_roundtrip(new_s3_url(), **s3_options)
