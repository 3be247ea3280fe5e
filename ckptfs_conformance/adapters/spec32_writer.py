"""``write-v2 CASE STORE`` (issue 32): carry out a writer case into a version 2 store, for the
``writer-rules/*`` vectors; and the deliberately broken version 2 writers (``--break
writer-v2-...``) that each break one rule of spec/v2.md 5.2.1, for tests/test_conformance.py.

A broken writer is ckptfs's writer whose output is then changed the way a writer that breaks
the rule would have left it (what the suite judges is the output store, so that is the same).
"""

from __future__ import annotations

from pathlib import Path

import cbor2

from ckptfs.format import cbor
from ckptfs.format import containers as ct
from ckptfs.format.digest import Digest

SPEC32_WRITER_BREAKS: tuple[str, ...] = tuple("writer-v2-" + r for r in (
    "extra-object", "drop-packs", "hole", "zheader-without-feature", "no-complete-locators",
    "reuse-nonce", "hint-ahead"))
BROKEN: set[str] = set()


def write_v2(case_path: str, store_dir: str) -> str:
    """Carry out the case with ckptfs's writer into a version 2 store, then break it as told."""
    from ckptfs_conformance.adapters import ckptfs_adapter

    out = ckptfs_adapter.write_case(case_path, store_dir)  # a version 2 store (the only kind)
    store = Path(store_dir)
    for rule in sorted(BROKEN):
        _BREAK[rule](store)
    return out


def _records(store: Path) -> list[Path]:
    return sorted(f for f in store.glob("runs/*/*") if f.is_file() and f.name.isdigit()
                  and f.read_bytes()[:1] == ct.MAGIC[:1])  # not a version 1 record


def _rewrite(f: Path, change: object) -> None:
    """Rewrite record ``f`` with its header changed by ``change(header map)`` (digest and form
    kept as a writer would have written them)."""
    from ckptfs_conformance.gen_v2_containers import edit

    edit(f, lambda h, area: change(h))  # type: ignore[operator]


def _extra_object(store: Path) -> None:
    """A writer that also writes each manifest as a version 1 object (two objects a commit)."""
    for f in _records(store):
        m = ct.decode(f.read_bytes(), what=f.name).header
        assert isinstance(m, ct.RecordHeader)
        d = Digest.of(m.manifest)
        obj = store / "snapshots" / d.hex[:2] / d.hex
        obj.parent.mkdir(parents=True, exist_ok=True)
        obj.write_bytes(b"\x00" + m.manifest)


def _drop_packs(store: Path) -> None:
    """A writer whose record landed before its packs were durable (they never arrived)."""
    for f in sorted(store.glob("packs/*/*")):
        f.unlink()


def _hole(store: Path) -> None:
    """A writer that leaves chunks its parent record holds unlocated (rows into records)."""
    def change(h: dict[str, object]) -> None:
        loc = h["locators"]
        assert isinstance(loc, dict)
        cons = loc["containers"]
        loc["chunks"] = [x for x in loc["chunks"] if isinstance(cons[x[1]], bytes)]
    for f in _records(store):
        _rewrite(f, change)


def _config(store: Path, drop: str) -> None:
    cfg = cbor2.loads((store / "ckptfs.cbor").read_bytes())
    cfg["required"] = [r for r in cfg["required"] if r != drop]
    (store / "ckptfs.cbor").write_bytes(cbor.encode(cfg))


def _reuse_nonce(store: Path) -> None:
    """A writer that draws its nonce once per process, not per record."""
    records = _records(store)
    if not records:
        return
    first = ct.decode(records[0].read_bytes(), what="record").header
    assert isinstance(first, ct.RecordHeader)
    for f in records[1:]:
        _rewrite(f, lambda h: h.update(nonce=first.nonce))


def _hint_ahead(store: Path) -> None:
    """A writer that writes the hint before its commit, naming the seq it is about to take."""
    for run in sorted(p for p in (store / "runs").iterdir() if p.is_dir()):
        seqs = [int(f.name) for f in run.iterdir() if f.is_file() and f.name.isdigit()]
        if seqs:
            hint = ct.HeadHint(run.name, max(seqs) + 1, Digest.of(b"next"), 0)
            (run / "head").write_bytes(hint.to_bytes())


_BREAK = {
    "writer-v2-extra-object": _extra_object, "writer-v2-drop-packs": _drop_packs,
    "writer-v2-hole": _hole,
    "writer-v2-zheader-without-feature": lambda s: _config(s, "compressed-headers"),
    "writer-v2-no-complete-locators": lambda s: _config(s, "complete-locators"),
    "writer-v2-reuse-nonce": _reuse_nonce, "writer-v2-hint-ahead": _hint_ahead,
}


# spec32c: broken writers for the rules of format.md, ledger.md and migrations.md
from ckptfs_conformance.adapters.spec32c_writer import BREAKS as _SPEC32C  # noqa: E402

SPEC32_WRITER_BREAKS += tuple(_SPEC32C)
_BREAK.update(_SPEC32C)
