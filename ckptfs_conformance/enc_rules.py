"""The rules an encrypted store a writer made is judged by (op ``enc-write``, capability
``encryption``, spec/encryption.md). Like ``writer-rules/*`` no bytes are compared (nonces and
keys are the writer's own): the runner reads the store back with the reference reader and the
writer's keyring (its rendering, config aside, must be the expected one) and checks the rules
the vector names:

- ``config-encrypted``: version 2, ``encrypted`` required, a well-formed ``encryption`` setting
  (3);
- ``observer-learns-nothing``: no run id, subject, entry name, label, text value or blob of the
  case, and no snapshot id or chunk digest (raw or hex), appears in any path or any byte of the
  store (2);
- ``scope-locators``: every container a record locates into is sealed under the record's own
  scope (4.2);
- ``sealed-layout-2``: every object but the config is sealed in layout 2 (5.1: ``CKE 0x02``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cbor2

from ckptfs.errors import CkptfsError

PASS, FAIL = "Pass", "Fail"


def judge_encrypted(v: dict[str, Any], out: Path) -> tuple[str, str]:
    from ckptfs_conformance.render import render_store, symbolic
    from ckptfs_conformance.runner import compare_json

    store, ring = out / "store", out / "keyring"
    try:
        raw = render_store(str(store), v["expect"]["now"], keyring=str(ring))
    except CkptfsError as e:
        return FAIL, f"the reference reader rejects the written store: {e.category}: {e}"
    got = {k: x for k, x in symbolic(raw).items() if k != "config"}
    status, msg = compare_json(v["expect"]["store"], got)
    if status != "Pass":
        return status, msg
    problems: list[str] = []
    for rule in v["expect"]["enc_rules"]:
        problems += RULES[rule](store, ring, v["files"]["case"]["json"], raw)
    if problems:
        return FAIL, "; ".join(problems[:5]) + (f" (+{len(problems) - 5} more)"
                                                if len(problems) > 5 else "")
    return PASS, ""


def _files(store: Path) -> Iterator[tuple[str, Path]]:
    for f in sorted(store.rglob("*")):
        if f.is_file():
            yield f.relative_to(store).as_posix(), f


def config_encrypted(store: Path, ring: Path, case: Any, raw: Any) -> list[str]:
    cfg = cbor2.loads((store / "ckptfs.cbor").read_bytes())
    out = []
    if cfg.get("version") != 2:
        out.append(f"ckptfs.cbor: version {cfg.get('version')}, not 2")
    if "encrypted" not in cfg.get("required", []):
        out.append("ckptfs.cbor: 'encrypted' is not required")
    enc = cfg.get("settings", {}).get("encryption")
    if not (isinstance(enc, dict) and enc.get("scheme") == "ckptfs-enc-1"
            and isinstance(enc.get("store"), bytes) and len(enc["store"]) == 16
            and isinstance(enc.get("keyring"), bytes) and len(enc["keyring"]) == 16):
        out.append("ckptfs.cbor: no well-formed 'encryption' setting")
    return out


def _secrets(case: Any, raw: Any) -> set[bytes]:
    """What the observer must not learn: the case's names and content, the store's ids."""
    texts: set[str] = set()
    blobs: set[bytes] = set()

    def walk(x: Any) -> None:
        if isinstance(x, str):
            texts.add(x)
        elif isinstance(x, dict):
            for k, y in x.items():
                texts.add(k)
                walk(y)
        elif isinstance(x, list):
            for y in x:
                walk(y)

    for step in case["steps"]:
        for key in ("run", "subject"):
            if key in step:
                texts.add(step[key])
        for name, entry in step.get("state", {}).items():
            texts.add(name)
            if "blob" in entry:
                blobs.add(bytes.fromhex(entry["blob"]))
            if "value" in entry:
                walk(entry["value"])
        walk(step.get("labels", {}))
    found: set[bytes] = {b for b in blobs if len(b) >= 8}
    found |= {t.encode() for t in texts if len(t) >= 6}
    for run in raw.get("runs", {}).values():
        for snap in run["snapshots"]:
            digests = [snap["id"]] + [c[0] for e in snap.get("entries", {}).values()
                                      for c in e.get("chunks", [])]
            for d in digests:
                hexd = d.split(":", 1)[1]
                found |= {hexd.encode(), bytes.fromhex(hexd)}
    return found


def observer_learns_nothing(store: Path, ring: Path, case: Any, raw: Any) -> list[str]:
    secrets = _secrets(case, raw)
    out = []
    for rel, f in _files(store):
        data = f.read_bytes() + b"\x00" + rel.encode()
        for s in sorted(secrets):
            if s in data:
                out.append(f"{rel}: holds {s[:16]!r} of the plaintext (a name, content or id)")
                break
    return out


def scope_locators(store: Path, ring: Path, case: Any, raw: Any) -> list[str]:
    """Every record's locators point into containers of the record's own scope (the scope id
    is bytes 4..20 of every sealed object)."""
    from ckptfs.format import containers as ct
    from ckptfs.runtime.scopes import keyring_storage
    from ckptfs.storage.open import open_storage
    from ckptfs.store.containers import container_path

    st: Any = keyring_storage(open_storage(str(store)), str(ring))
    out = []
    try:
        for rel, f in _files(store):
            plain = st.back(rel)
            if plain is None or not plain.startswith("runs/") or not plain[-20:].isdigit():
                continue
            c = ct.decode(st.read(plain), what=plain)
            if not isinstance(c.header, ct.RecordHeader):
                continue
            mine = f.read_bytes()[4:20]
            for ref in c.header.containers:
                there = store / st.out(container_path(ref))
                if there.is_file() and there.read_bytes()[4:20] != mine:
                    out.append(f"{plain}: locates into {container_path(ref)}, of another scope")
    finally:
        st.close()
    return out


def sealed_layout_2(store: Path, ring: Path, case: Any, raw: Any) -> list[str]:
    from ckptfs.format.crypto_stream import MAGIC2

    return [f"{rel}: not sealed in layout 2 (starts {f.read_bytes()[:4].hex()})"
            for rel, f in _files(store)
            if rel != "ckptfs.cbor" and not rel.startswith("tmp/")
            and f.read_bytes()[:len(MAGIC2)] != MAGIC2]


RULES: dict[str, Callable[[Path, Path, Any, Any], list[str]]] = {
    "config-encrypted": config_encrypted,
    "observer-learns-nothing": observer_learns_nothing,
    "scope-locators": scope_locators,
    "sealed-layout-2": sealed_layout_2,
}
