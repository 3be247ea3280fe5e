"""Validate a store's config, manifests and run records against the CDDL with pycddl."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from ckptfs.format import framing

CDDL = Path(__file__).resolve().parent / "vectors" / "ckptfs.cddl"
ROOTS = ("store-config", "manifest", "run-record")


@cache
def schema(root: str) -> Any:
    """The pycddl schema with ``root`` as its first rule (pycddl validates the first rule)."""
    try:
        import pycddl
    except ImportError:
        raise RuntimeError("checking written stores needs pycddl: pip install 'ckptfs[conformance]'") from None
    return pycddl.Schema(f"conformance-root = {root}\n{CDDL.read_text()}")


def check(root: str, data: bytes) -> str | None:
    """None if ``data`` (one CBOR item) matches rule ``root``, else why not."""
    try:
        schema(root).validate_cbor(data)
    except Exception as e:  # pycddl.ValidationError is a plain Exception
        return str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
    return None


def store_files(store: Path) -> list[tuple[str, str, bytes]]:
    """(root rule, relative path, CBOR bytes) of every config, manifest and record in a store."""
    out = []
    for f in sorted(store.rglob("*")):
        rel = f.relative_to(store).as_posix()
        if not f.is_file():
            continue
        data = f.read_bytes()
        if rel == "ckptfs.cbor":
            out.append(("store-config", rel, data))
        elif rel.startswith("snapshots/"):
            size = len(data) - 1 if data[:1] == b"\x00" else None
            if size is None:
                import zstandard

                size = zstandard.frame_content_size(data[1:])
            out.append(("manifest", rel, framing.unframe(data, size, what=rel)))
        elif rel.startswith("runs/") and rel.count("/") == 2 and len(rel.split("/")[2]) == 20:
            out.append(("run-record", rel, data))
    return out


def validate_store(store: Path, skip: frozenset[str] = frozenset()) -> list[str]:
    """Problems ("path: why") of every structure in ``store`` not listed in ``skip``."""
    problems = []
    for root, rel, data in store_files(store):
        if rel in skip:
            continue
        why = check(root, data)
        if why is not None:
            problems.append(f"{rel} ({root}): {why}")
    return problems
