"""A corpus of hostile stores, made from one real valid store (issue 13, "Hostile stores").

``build_base`` writes a store with several runs (chunked values, a streamed blob, an effect
ledger with a large result, a fork), lifecycle markers (a retired marker, expiry overrides, a
snapshot tombstone) and an expired maintenance lease. Each hostile store is a copy of it with
ONE thing replaced: an object by a FIFO, a symbolic link (to a copy inside the store, or to a
copy outside it), a hard link to a file outside the store, a folder, a sparse 6 GiB file or an
empty file; a folder by a file or by a link to a copy outside; a manifest whose value repeats
one 16 MiB chunk up to 6 GiB; or a decoded-item bomb (issue 30): a few KiB of zstd that
inflate, within every size limit, to tens of millions of CBOR items in a key readers ignore
(of a visible record's header, of a manifest, of an orphan pack), a forward of 8 million empty
arrays, 60 million nested arrays or a map of 8 million entries. The "outside" folder of each case is a decoy: the test checks that
no reader touched it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator

import attrs
import blake3

import ckptfs
from ckptfs.format import cbor, framing
from ckptfs.format.cbor_parts import array_head, map_bytes
from ckptfs.format import containers as ct
from ckptfs.format.digest import Digest
from ckptfs.format.lifecycle import Lease
from ckptfs.format.models import Manifest, RunRecord
from ckptfs.format.names import chunk_path, pack_path, record_path, snapshot_path

HUGE = 6 << 30  # a sparse file of 6 GiB: read whole, it exhausts any sane memory cap
BIG_CHUNK = 16 << 20  # the largest chunk the format allows
MSGS = [{"role": "user", "content": f"message {i} " * 40} for i in range(60)]
#: what the writer entry point checkpoints into run r1: its chunk is the "future chunk"
FUTURE = {"future": [f"future item {i} " * 20 for i in range(30)]}


def build_base(root: str) -> dict[str, str]:
    """Write the valid store at ``root``; return facts the entry points need (ids, names)."""
    from ckptfs.ops.erase import erase
    from ckptfs.ops.expire import set_expiry
    from ckptfs.ops.retention import forget_snapshots
    from ckptfs.store.repository import now_ms

    store = ckptfs.open_store(root)
    v2 = True  # ckptfs writes format v2 only
    if v2:  # small bulk thresholds: the store also holds packs (and, after gc, a forward)
        store.init(settings={"record_bulk_max": 4096, "pack_target": 65536})
    r1 = store.start_run("r1", schema=("agent", 1))
    r1.checkpoint({"messages": MSGS[:20], "plan": {"step": 0}})
    r1.checkpoint({"messages": MSGS[:40], "plan": {"step": 1},
                   "file": ckptfs.Blob(bytes(range(256)) * 1200)})
    r1.effect("lookup", lambda: {"rows": [f"row {i} " * 20 for i in range(200)]}, key="k1")
    head = r1.checkpoint({"messages": MSGS, "plan": {"step": 2}})
    store.fork("r1@2", "r2").checkpoint({"messages": MSGS[:5], "note": "forked"})
    r3 = store.start_run("r3")
    for i in range(4):
        r3.checkpoint({"i": i, "text": "x" * 3000})
    forget_snapshots(store.repo, {"r3": [1]})
    if v2:  # collect r3@1 at once: its live bodies move to a pack, a forward says where
        from ckptfs.format.containers import HeadHint
        from ckptfs.format.names import head_hint_path
        from ckptfs.ops.gc import gc

        gc(store.repo, grace_ms=0, now=now_ms() + 3_600_000)
        store.repo.storage.hint(head_hint_path("r1"),
                                HeadHint("r1", head.seq, head.digest, head.created).to_bytes())
    set_expiry(store.repo, "r3", 2**62)
    set_expiry(store.repo, "r3@3", 2**62)
    erase(store.repo, "r3", seq=2, reason="hostile corpus: a per-snapshot tombstone")
    # an expired lease, as a killed maintenance run leaves it (blocks nobody)
    lease_dir = os.path.join(root, "leases", "maintenance")
    os.makedirs(lease_dir, exist_ok=True)
    with open(os.path.join(lease_dir, "00000000000000000009"), "wb") as f:
        f.write(Lease("gone:1:1", 1, 2).to_bytes())
    store.close()
    if v2:
        kinds = {k for p in _files(root) for k in ("packs", "moved") if p.startswith(k + "/")}
        assert kinds == {"packs", "moved"}, kinds
        future = [record_path("r1", head.seq + 1)]  # the record the writer entry point makes
    return {"head_id": str(head.id), "future_chunks": ",".join(future)}


def _files(root: str) -> Iterator[str]:
    for d, _, names in os.walk(root):
        for n in names:
            yield os.path.relpath(os.path.join(d, n), root)


def objects(root: str, facts: dict[str, str]) -> dict[str, list[str]]:
    """The store's objects by kind (paths relative to ``root``)."""
    kinds: dict[str, list[str]] = {}
    for p in sorted(_files(root)):
        parts = p.split("/")
        if p == "ckptfs.cbor":
            kind = "config"
        elif parts[0] in ("chunks", "snapshots", "packs", "moved"):
            kind = {"chunks": "chunk", "snapshots": "manifest", "packs": "pack",
                    "moved": "forward"}[parts[0]]
        elif parts[0] == "runs" and parts[-1] == "head":
            kind = "head-hint"
        elif parts[0] == "runs" and "retired" in parts:
            kind = "retired"
        elif parts[0] == "runs" and parts[-1].startswith("expiry"):
            kind = "expiry"
        elif parts[0] == "runs":
            kind = "record"
        elif parts[0] == "tombstones":
            kind = "tombstone"
        elif parts[0] == "leases":
            kind = "lease"
        else:
            continue
        kinds.setdefault(kind, []).append(p)
    future = facts["future_chunks"].split(",")
    kinds["future-record" if future[0].startswith("runs/") else "future-chunk"] = future
    return kinds


FOLDERS = ["runs", "runs/r1", "runs/r3/retired", "chunks", "snapshots", "tmp", "leases",
           "leases/maintenance", "tombstones"]
#: format v2 stores have no chunks/ or snapshots/ folders but packs/ and moved/
FOLDERS_V2 = ["runs", "runs/r1", "runs/r3/retired", "packs", "moved", "tmp", "leases",
              "leases/maintenance", "tombstones"]


# -- mutations of one object ------------------------------------------------------------------
def _move_out(store: str, rel: str, outside: str) -> str:
    """Move the object ``rel`` to the decoy folder (or create an outside file); its new path."""
    dst = os.path.join(outside, rel.replace("/", "_"))
    src = os.path.join(store, rel)
    if os.path.lexists(src):
        shutil.move(src, dst)
    else:  # a future chunk: the outside file holds anything
        with open(dst, "wb") as f:
            f.write(b"\x00outside data the store must not touch\n")
    return dst


def fifo(store: str, rel: str, outside: str) -> None:
    _remove(store, rel)
    os.mkfifo(os.path.join(store, rel))


def symlink_inside(store: str, rel: str, outside: str) -> None:
    p = os.path.join(store, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    if os.path.lexists(p):
        os.rename(p, p + ".orig")
        os.symlink(os.path.basename(rel) + ".orig", p)
    else:
        os.symlink("../../ckptfs.cbor", p)


def symlink_outside(store: str, rel: str, outside: str) -> None:
    os.makedirs(os.path.dirname(os.path.join(store, rel)), exist_ok=True)
    os.symlink(_move_out(store, rel, outside), os.path.join(store, rel))


def hardlink_outside(store: str, rel: str, outside: str) -> None:
    os.makedirs(os.path.dirname(os.path.join(store, rel)), exist_ok=True)
    os.link(_move_out(store, rel, outside), os.path.join(store, rel))


def folder(store: str, rel: str, outside: str) -> None:
    _remove(store, rel)
    os.mkdir(os.path.join(store, rel))


def sparse(store: str, rel: str, outside: str) -> None:
    p = os.path.join(store, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    keep = b""
    if os.path.exists(p):
        with open(p, "rb") as f:
            keep = f.read()
        os.unlink(p)
    with open(p, "wb") as f:
        f.write(keep)  # the real bytes first (a framed object still parses its header)
        f.truncate(HUGE)


def empty(store: str, rel: str, outside: str) -> None:
    _remove(store, rel)
    open(os.path.join(store, rel), "wb").close()


def _remove(store: str, rel: str) -> None:
    p = os.path.join(store, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    if os.path.isdir(p) and not os.path.islink(p):
        shutil.rmtree(p)
    elif os.path.lexists(p):
        os.unlink(p)


OBJECT_MUTATIONS: dict[str, Callable[[str, str, str], None]] = {
    "fifo": fifo, "symlink-in": symlink_inside, "symlink-out": symlink_outside,
    "hardlink-out": hardlink_outside, "dir": folder, "sparse-6GiB": sparse, "empty": empty,
}


# -- mutations of one folder ------------------------------------------------------------------
def folder_to_file(store: str, rel: str, outside: str) -> None:
    _remove(store, rel)
    with open(os.path.join(store, rel), "wb") as f:
        f.write(b"not a folder\n")


def folder_to_link(store: str, rel: str, outside: str) -> None:
    p = os.path.join(store, rel)
    dst = os.path.join(outside, rel.replace("/", "_"))
    if os.path.isdir(p):
        shutil.move(p, dst)
    else:
        os.makedirs(dst)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    os.symlink(dst, p)


FOLDER_MUTATIONS: dict[str, Callable[[str, str, str], None]] = {
    "file": folder_to_file, "symlink-out": folder_to_link,
}


# -- semantic: a value whose chunk list repeats one 16 MiB chunk up to 6 GiB ---------------------
def repeated_chunk(store: str, what: str, outside: str) -> None:
    """Rewrite r1's head so that entry ``what`` (``messages`` or the ledger) lists one 16 MiB
    chunk of zeros (stored as a few hundred zstd bytes) 384 times: 6 GiB when assembled."""
    zeros = bytes(BIG_CHUNK)
    d = Digest.of(zeros)
    cpath = os.path.join(store, chunk_path(d))
    os.makedirs(os.path.dirname(cpath), exist_ok=True)
    with open(cpath, "wb") as f:
        f.write(framing.frame(zeros))
    del zeros
    n = HUGE // BIG_CHUNK
    st = ckptfs.open_store(store)
    head = st.head("r1")
    rpath = os.path.join(store, record_path("r1", head.seq))
    m = head.manifest
    raw = cbor.decode(m.to_bytes(), what="manifest")
    chunks = [[d.raw, BIG_CHUNK]] * n
    if what == "ledger":
        raw["ledger"].pop("inline", None)
        raw["ledger"]["chunks"] = chunks
        raw["ledger"]["size"] = n * BIG_CHUNK
    else:
        e = raw["entries"]["messages"]
        e.pop("inline", None)
        e["chunks"] = chunks
        e["size"] = n * BIG_CHUNK
    data = cbor.encode(raw)
    Manifest.from_bytes(data, what="hostile manifest")  # still well-formed
    md = Digest.of(data)
    with open(rpath, "rb") as f:
        old = f.read()
    if ct.is_container(old):  # v2: the record carries the manifest; its bodies stay as they are
        c = ct.decode(old, what="record")
        assert isinstance(c.header, ct.RecordHeader)
        header = attrs.evolve(c.header, manifest=data, snapshot=md)
        new_bytes, _ = ct.encode_record(header, old[c.body_start:])  # the zeros: a loose chunk
        os.unlink(rpath)
        with open(rpath, "wb") as f:
            f.write(new_bytes)
        st.close()
        return
    v1_manifest(store, rpath, old, data)
    st.close()


def v1_manifest(store: str, rpath: str, old: bytes, data: bytes) -> None:
    """In a version 1 store: write the manifest ``data`` (framed) and make the record at
    ``rpath`` (bytes ``old``) name it."""
    md = Digest.of(data)
    mpath = os.path.join(store, snapshot_path(md))
    os.makedirs(os.path.dirname(mpath), exist_ok=True)
    with open(mpath, "wb") as f:
        f.write(framing.frame(data))
    rec = RunRecord.from_bytes(old, what="record")
    _rewrite(rpath, attrs.evolve(rec, snapshot=md, size=len(data)).to_bytes())


# -- semantic: decoded-item bombs (issue 30, defect 5) ---------------------------------------------
#: the bomb of the issue: 60,000,000 empty CBOR arrays, 60 MB inflated (under the 80 MiB header
#: limit), about 2 KiB as zstd; cbor2 built 60 million lists (98 s and 4.3 GB for one read)
BOMB_ITEMS = 60_000_000


def empty_arrays(n: int) -> bytes:
    """The canonical CBOR of an array of ``n`` empty arrays, built as bytes (not as lists)."""
    return array_head(n) + b"\x80" * n


def container_bytes(header: bytes, area: bytes, *, form: int = ct.CONTAINER_COMPRESSED) -> bytes:
    """A container around already-encoded ``header`` bytes (form 0x03: as one zstd frame),
    without the writer's checks (a conforming writer refuses to write these)."""
    stored = framing.deflate(header) if form == ct.CONTAINER_COMPRESSED else header
    return b"".join([ct.MAGIC, bytes([form]), len(stored).to_bytes(4, "big"), stored,
                     blake3.blake3(stored).digest(), area])


def _with_bomb(m: dict[str, object], bomb: bytes) -> bytes:
    """The canonical map ``m`` with one more key, ``x-ignored`` (a key readers ignore), whose
    value is the already-encoded ``bomb``."""
    parts = {k: cbor.encode(v) for k, v in m.items()}
    parts["x-ignored"] = bomb
    return map_bytes(parts)


def _rewrite(path: str, data: bytes) -> None:
    os.unlink(path)
    with open(path, "wb") as f:
        f.write(data)


def bomb_record(store: str, outside: str) -> None:
    """r1's head record (a visible record) with the bomb in a header key readers ignore, its
    header stored as zstd (form 0x03): a 2 KiB file."""
    _bomb_in_record(store, empty_arrays(BOMB_ITEMS))


def bomb_manifest(store: str, outside: str) -> None:
    """r1's head snapshot with the bomb in a manifest key readers ignore: in a version 2 store
    the manifest's bytes inside the record's (zstd) header, in a version 1 store the manifest
    object (framed with zstd) and the record naming it."""
    st = ckptfs.open_store(store)
    head = st.head("r1")
    st.close()
    data = _with_bomb(cbor.decode(head.manifest.to_bytes(), what="manifest"),
                      empty_arrays(BOMB_ITEMS))
    md = Digest.of(data)
    rpath = os.path.join(store, record_path("r1", head.seq))
    with open(rpath, "rb") as f:
        old = f.read()
    if ct.is_container(old):
        c = ct.decode(old, what="record")
        m = {**c.header.to_cbor(), "manifest": data, "snapshot": md.raw, "size": len(data)}
        _rewrite(rpath, container_bytes(cbor.encode(m), old[c.body_start:]))
        return
    v1_manifest(store, rpath, old, data)


def bomb_pack(store: str, outside: str) -> None:
    """An orphan pack (no record names it; named by the digest of its bytes, as packs are)
    whose zstd header holds the bomb in a key readers ignore, beside one valid body."""
    body = framing.frame(b"orphan pack body")
    d = Digest.of(b"orphan pack body")
    header = _with_bomb({"kind": "pack", "created": 1, "writer": "hostile",
                         "bodies": [[d.raw, 0, len(body), 16]], "body_length": len(body)},
                        empty_arrays(BOMB_ITEMS))
    data = container_bytes(header, body)
    p = os.path.join(store, pack_path(Digest.of(data)))
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "wb") as f:
        f.write(data)


def bomb_forward(store: str, outside: str) -> None:
    """Every forward of the store replaced by one of 8 MiB (the largest a reader accepts):
    ``{bodies: [[], [], ...]}``, 8 million empty arrays."""
    head = cbor.encode({"bodies": []})[:-1]  # the map head and key, before the array
    n = ct.MAX_FORWARD_SIZE - len(head) - 5
    for rel in [p for p in _files(store) if p.startswith("moved/")]:
        _rewrite(os.path.join(store, rel), head + empty_arrays(n))


def bomb_deep(store: str, outside: str) -> None:
    """r1's head record with 60 million nested arrays in an ignored header key."""
    _bomb_in_record(store, b"\x81" * BOMB_ITEMS + b"\x80")


def bomb_map(store: str, outside: str) -> None:
    """r1's head record with a map of 8 million entries (distinct keys) in an ignored key."""
    _bomb_in_record(store, big_map(8_000_000))


def big_map(n: int) -> bytes:
    """A map of ``n`` (at most 64^4) entries ``"<4 characters>": []``, every key distinct:
    built column by column (C-speed slicing), not entry by entry."""
    chars = bytes(range(0x30, 0x70))  # 64 ASCII characters
    out = bytearray(6 * n)
    out[0::6] = b"\x64" * n
    out[5::6] = b"\x80" * n
    for col, rep in zip((1, 2, 3, 4), (1 << 18, 1 << 12, 1 << 6, 1)):
        seq = b"".join(bytes([c]) * rep for c in chars)
        out[col::6] = (seq * (n // len(seq) + 1))[:n]
    return b"\xba" + n.to_bytes(4, "big") + bytes(out)


def _bomb_in_record(store: str, bomb: bytes) -> None:
    st = ckptfs.open_store(store)
    head = st.head("r1")
    st.close()
    rpath = os.path.join(store, record_path("r1", head.seq))
    with open(rpath, "rb") as f:
        old = f.read()
    c = ct.decode(old, what="record")
    _rewrite(rpath, container_bytes(_with_bomb(c.header.to_cbor(), bomb), old[c.body_start:]))


#: the bombs of each store layout (a version 1 store has no containers: its manifests are the
#: zstd-framed objects a bomb fits in)
BOMBS_V2: dict[str, Callable[[str, str], None]] = {
    "item-bomb-record": bomb_record, "item-bomb-manifest": bomb_manifest,
    "item-bomb-pack": bomb_pack, "item-bomb-forward": bomb_forward,
    "item-bomb-deep": bomb_deep, "item-bomb-map": bomb_map}
BOMBS_V1: dict[str, Callable[[str, str], None]] = {"item-bomb-manifest": bomb_manifest}

SEMANTIC = {"repeat-chunk-value": lambda s, o: repeated_chunk(s, "messages", o),
            "repeat-chunk-ledger": lambda s, o: repeated_chunk(s, "ledger", o),
            **BOMBS_V2}


@attrs.frozen
class Case:
    """One hostile store: ``target`` (an object or folder path) replaced by ``mutation``."""

    kind: str
    target: str
    mutation: str

    @property
    def name(self) -> str:
        return f"{self.kind}:{self.target}:{self.mutation}"


def cases(root: str, facts: dict[str, str], *, full: bool) -> list[Case]:
    """Every hostile case; without ``full``, one object of each kind (the first)."""
    out: list[Case] = []
    for kind, paths in objects(root, facts).items():
        for p in (paths if full else paths[:1]):
            for mut in OBJECT_MUTATIONS:
                out.append(Case(kind, p, mut))
    for f in (FOLDERS_V2 if os.path.isdir(os.path.join(root, "packs")) else FOLDERS):
        for mut in FOLDER_MUTATIONS:
            out.append(Case("folder", f, mut))
    v2 = os.path.isdir(os.path.join(root, "packs"))
    for name in SEMANTIC:
        if name.startswith("item-bomb") and name not in (BOMBS_V2 if v2 else BOMBS_V1):
            continue
        out.append(Case("semantic", "runs/r1", name))
    return out


def make(base: str, case: Case, store: str, outside: str) -> None:
    """Copy ``base`` to ``store`` and apply ``case``; ``outside`` is the decoy folder."""
    shutil.copytree(base, store, symlinks=True)
    os.makedirs(os.path.join(store, "tmp"), exist_ok=True)
    os.makedirs(outside, exist_ok=True)
    with open(os.path.join(outside, "decoy.txt"), "w") as f:
        f.write("a file outside the store\n")
    if case.kind == "semantic":
        SEMANTIC[case.mutation](store, outside)
    elif case.kind == "folder":
        FOLDER_MUTATIONS[case.mutation](store, case.target, outside)
    else:
        OBJECT_MUTATIONS[case.mutation](store, case.target, outside)


def snapshot_tree(root: str) -> dict[str, tuple[int, int, bytes]]:
    """Path -> (size, mtime ns, bytes) of every file below ``root`` (the decoy, before/after)."""
    out: dict[str, tuple[int, int, bytes]] = {}
    for d, dirs, names in os.walk(root):
        for n in names + dirs:
            p = os.path.join(d, n)
            st = os.lstat(p)
            data = b""
            if os.path.isfile(p) and not os.path.islink(p) and st.st_size < (1 << 20):
                with open(p, "rb") as f:
                    data = f.read()
            out[os.path.relpath(p, root)] = (st.st_size, st.st_mtime_ns, data)
    return out
