"""verify --read-data checks a pack's name (spec/v2.md 3.4: ``packs/<xx>/<hex>``, ``<hex>`` the
BLAKE3-256 of the whole file): a pack copied under another name, or changed where no snapshot
reads, is reported even though every snapshot's chunks read back intact."""

from __future__ import annotations

import os
from pathlib import Path


import ckptfs
from ckptfs.ops.verify import verify
from tests.storeutil import walk



def _store(tmp_path: Path) -> tuple[ckptfs.Store, str]:
    store = ckptfs.open_store(str(tmp_path / "s"))
    store.init({"record_bulk_max": 64 * 1024})
    store.start_run("b").checkpoint({"blob": ckptfs.Blob(os.urandom(300 * 1024))})
    packs = [p for p in walk(store.storage) if p.startswith("packs/")]
    assert packs
    return store, packs[0]


def test_a_pack_under_a_name_that_is_not_its_digest_is_corrupt(tmp_path: Path) -> None:
    store, pack = _store(tmp_path)
    assert verify(store.repo, read_data=True).ok
    other = "ab" + "0" * 62
    store.storage.write(f"packs/ab/{other}", store.storage.read(pack))
    rep = verify(store.repo, read_data=True)
    assert not rep.ok
    [p] = rep.problems
    assert p.category == "corrupt" and other in p.message and "not its name" in p.message
    assert verify(store.repo).ok  # without --read-data nothing is read whole


def test_a_changed_pack_byte_is_reported_by_name_and_by_the_chunk(tmp_path: Path) -> None:
    store, pack = _store(tmp_path)
    data = bytearray(store.storage.read(pack))
    data[-1] ^= 0xFF  # inside the last body
    os.chmod(tmp_path / "s" / pack, 0o644)
    (tmp_path / "s" / pack).write_bytes(bytes(data))
    rep = verify(store.repo, read_data=True)
    assert any("not its name" in p.message for p in rep.problems)
