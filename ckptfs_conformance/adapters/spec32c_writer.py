"""Deliberately broken writers for the writer rules of format.md, ledger.md and migrations.md
(issue 32, ``spec32c``; ckptfs_conformance/writer_rules_manifest.py). Like those of
``spec32_writer`` (which runs them: ``--break writer-v2-...``), each is ckptfs's writer whose
output is then changed the way a writer that breaks the rule would have left it. A changed
manifest changes its snapshot's id, so every manifest is re-encoded in commit order with its
``parent`` and ``resumed_from`` following the new ids (head hints, optional, are dropped).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cbor2

from ckptfs.format import cbor
from ckptfs.format.digest import Digest
from ckptfs.format.typed import FEATURE as TYPED_VALUES


def _records(store: Path) -> list[tuple[int, str, int, Path]]:
    """(created, run, seq, path) of every run record, in commit order."""
    from ckptfs.format import containers as ct

    out = []
    for f in sorted(store.glob("runs/*/*")):
        if f.is_file() and f.name.isdigit() and f.read_bytes()[:1] == ct.MAGIC[:1]:
            h = ct.decode(f.read_bytes(), what=f.name).header
            assert isinstance(h, ct.RecordHeader)
            out.append((h.created, h.run, h.seq, f))
    return sorted(out)


def _hlen(data: bytes) -> int:
    return int.from_bytes(data[9:13], "big")


def rewrite_manifests(store: Path, change: Callable[[str, int, dict[str, Any]], None]) -> None:
    """Edit every carried manifest with ``change(run, seq, manifest)``, in commit order, the
    links between snapshots kept."""
    from ckptfs_conformance.gen_v2_containers import edit

    ids: dict[bytes, bytes] = {}
    shift: dict[tuple[str, int], int] = {}  # a record's body area moved by its new header
    for _, run, seq, f in _records(store):
        def header(h: dict[str, Any], area: bytes, run: str = run, seq: int = seq) -> None:
            m = cbor2.loads(h["manifest"])
            change(run, seq, m)
            for link in ("parent", "resumed_from"):
                if m.get(link) is not None:
                    m[link] = ids.get(bytes(m[link]), bytes(m[link]))
            data = cbor.encode(m)
            ids[bytes(h["snapshot"])] = Digest.of(data).raw
            h["manifest"], h["snapshot"], h["size"] = data, Digest.of(data).raw, len(data)
            loc = h.get("locators") or {}
            cons = loc.get("containers") or []
            for row in loc.get("chunks") or []:
                con = cons[row[1]]
                if isinstance(con, list):  # a record: [run, seq]
                    row[2] += shift.get((con[0], con[1]), 0)
        before = _hlen(f.read_bytes())
        edit(f, header)
        shift[(run, seq)] = _hlen(f.read_bytes()) - before
    for hint in store.glob("runs/*/head"):
        hint.unlink()


def _reserved_name(store: Path) -> None:
    """A writer that keeps notes of its own beside its records (a name no feature defines)."""
    for run in sorted(p for p in (store / "runs").iterdir() if p.is_dir()):
        (run / "notes").write_bytes(b"last commit ok\n")


def _schema_extra_key(store: Path) -> None:
    """A writer that adds its build to the schema map."""
    rewrite_manifests(store, lambda run, seq, m: m["schema"].update(build="2026.12"))


def _migrated_from(store: Path) -> None:
    """A writer that writes migrated_from in every snapshot after its run's first, no step
    having run."""
    def change(run: str, seq: int, m: dict[str, Any]) -> None:
        if m.get("parent") is not None:
            m["migrated_from"] = dict(m["schema"])
    rewrite_manifests(store, change)


def _ledger_rewritten(store: Path) -> None:
    """A writer that re-encodes its ledger at every commit and adds a key to the first record
    (readers ignore it; the earlier snapshots' bytes are no longer a prefix)."""
    def change(run: str, seq: int, m: dict[str, Any]) -> None:
        led = m.get("ledger")
        if not led or "inline" not in led or seq < 3:
            return
        dec, recs = cbor2.CBORDecoder(io.BytesIO(led["inline"])), []
        while dec.fp.tell() < len(led["inline"]):
            recs.append(dec.decode())
        recs[0]["x-rewritten"] = seq
        data = b"".join(cbor.encode(r) for r in recs)
        led.update(inline=data, size=len(data), digest=Digest.of(data).raw)
    rewrite_manifests(store, change)


def _typed_unlisted(store: Path) -> None:
    """A writer that writes typed values without listing typed-values."""
    def change(run: str, seq: int, m: dict[str, Any]) -> None:
        if TYPED_VALUES in (m.get("required") or ()):
            m["required"] = [r for r in m["required"] if r != TYPED_VALUES]
            if not m["required"]:
                del m["required"]
    rewrite_manifests(store, change)


def _expiry_in_extension_key(store: Path) -> None:
    """A writer that keeps a snapshot's expiry in an extension key of its own (which its own
    reader honours, and every other reader ignores)."""
    def change(run: str, seq: int, m: dict[str, Any]) -> None:
        if m.get("expires") is not None:
            m["x-expires"], m["expires"] = m["expires"], None
    rewrite_manifests(store, change)


def _own_config(store: Path) -> None:
    """A writer that writes its own config (the default chunker) over the one it found."""
    cfg = cbor2.loads((store / "ckptfs.cbor").read_bytes())
    cfg["chunker"].update(min=16384, avg=65536, max=262144)
    (store / "ckptfs.cbor").write_bytes(cbor.encode(cfg))


def _container_in_v1(store: Path) -> None:
    """A writer that writes a pack into a version 1 store."""
    from ckptfs_conformance.gen_v2_containers import join

    cfg = cbor2.loads((store / "ckptfs.cbor").read_bytes())
    if cfg.get("version") == 1:
        data = join({"kind": "pack", "created": 0, "bodies": [], "body_length": 0}, b"")
        d = Digest.of(data).hex
        (store / "packs" / d[:2]).mkdir(parents=True, exist_ok=True)
        (store / "packs" / d[:2] / d).write_bytes(data)


BREAKS: dict[str, Callable[[Path], None]] = {
    "writer-v2-own-config": _own_config, "writer-v2-container-in-v1": _container_in_v1,
    "writer-v2-reserved-name": _reserved_name, "writer-v2-schema-extra-key": _schema_extra_key,
    "writer-v2-migrated-from": _migrated_from, "writer-v2-ledger-rewritten": _ledger_rewritten,
    "writer-v2-typed-unlisted": _typed_unlisted,
    "writer-v2-expiry-in-extension-key": _expiry_in_extension_key,
}
