"""Packs of an encrypted store take their bodies in random order (issue 33 item 2, restic
0.18; spec/encryption.md 5.3): the order of bodies in a pack does not follow the order the
manifest names them, for values, streamed blobs, copies and gc's repacks alike."""

from __future__ import annotations

import io
import os
from pathlib import Path

import ckptfs
from ckptfs.format import containers as ct
from ckptfs.format.cdc import ChunkerParams
from ckptfs.store.repository import Snapshot

SMALL = ChunkerParams(min_size=4096, avg_size=16384, max_size=65536)


def pack_orders(store: ckptfs.Store) -> list[list[bytes]]:
    """The digests of each pack's bodies, in their order in the pack (plaintext view)."""
    st = store.storage
    out = []
    for path in sorted(st.scan("packs")):
        c = ct.decode(st.read(path), what=path)
        out.append([b.digest.raw for b in c.header.bodies])
    return out


def named_order(snap: Snapshot, entry: str) -> list[bytes]:
    return [c.digest.raw for c in snap.manifest.entries[entry].chunks]  # type: ignore[union-attr]


def in_manifest_order(orders: list[list[bytes]], named: list[bytes]) -> list[bool]:
    """For each pack holding bodies of ``named``: whether they are in ``named``'s order."""
    pos = {d: i for i, d in enumerate(named)}
    out = []
    for order in orders:
        idx = [pos[d] for d in order if d in pos]
        if len(idx) >= 8:
            out.append(idx == sorted(idx))
    return out


def test_pack_bodies_are_in_random_order(tmp_path: Path) -> None:
    data = os.urandom(10 << 20)  # over record_bulk_max: into packs
    blob = os.urandom(6 << 20)
    enc = ckptfs.open_store(str(tmp_path / "enc"), keyring=str(tmp_path / "ring"),
                            chunker=SMALL)
    plain = ckptfs.open_store(str(tmp_path / "plain"), chunker=SMALL)
    for st in (enc, plain):
        run = st.start_run("r")
        run.checkpoint({"v": data, "b": ckptfs.Blob(io.BytesIO(blob))})
    for st, want in ((plain, True), (enc, False)):
        snap = st.head("r")
        orders = pack_orders(st)
        for entry in ("v", "b"):
            judged = in_manifest_order(orders, named_order(snap, entry))
            assert judged, entry  # packs with many bodies of the entry exist
            # plaintext: the manifest's order (the control); encrypted: never all in order
            # (16+ bodies per pack: the odds that a random order is sorted are < 1e-13)
            assert all(judged) if want else not any(judged), (entry, judged)
    got = ckptfs.open_store(str(tmp_path / "enc"), keyring=str(tmp_path / "ring")).read("r")
    assert got["v"] == data and got["b"].read() == blob
    # a copy and gc's repack shuffle too
    from ckptfs.ops.copy import copy_runs

    dst = ckptfs.open_store(str(tmp_path / "dst"), keyring=str(tmp_path / "ring2"))
    copy_runs(plain.repo, dst.repo)
    judged = in_manifest_order(pack_orders(dst), named_order(dst.head("r"), "v"))
    assert judged and not any(judged)
    assert dst.read("r")["b"].read() == blob


def test_gc_repacks_in_random_order(tmp_path: Path) -> None:
    import subprocess
    import sys

    url, ring = str(tmp_path / "enc"), str(tmp_path / "ring")
    st = ckptfs.open_store(url, keyring=ring, chunker=SMALL)
    # one pack (under pack_target), three quarters dead after the forget: gc repacks it
    keep, drop = os.urandom(3 << 20), os.urandom(9 << 20)
    run = st.start_run("r")
    run.checkpoint({"v": keep, "w": drop})
    run.checkpoint({"v": keep})
    before = set(st.storage.scan("packs"))

    def cli(*a: str) -> str:
        p = subprocess.run([sys.executable, "-m", "ckptfs", *a, "--keyring", ring],
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
        return p.stdout

    cli("forget", url, "--run", "r", "--keep-last", "1")
    cli("gc", url, "--grace", "0s")
    fresh = ckptfs.open_store(url, keyring=ring)
    assert fresh.read("r")["v"] == keep
    new = [p for p in fresh.storage.scan("packs") if p not in before]
    assert new, "gc wrote no new pack"
    named = named_order(fresh.head("r"), "v")
    judged = in_manifest_order([[b.digest.raw for b in ct.decode(fresh.storage.read(p),
                                                                  what=p).header.bodies]
                                for p in new], named)
    assert judged and not any(judged)
