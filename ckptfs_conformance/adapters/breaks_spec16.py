"""Broken readers for the rules issue 16 pinned (``--break RULE`` with a rule of
``SPEC16_BREAKS``; the vectors are ckptfs_conformance/gen_spec16.py's): each skips one check, or
applies the other reading of a point the spec used to leave open (record sizes and paths, chunk
digests, chunker and label rules, zstd frames, canonical content, NaN payloads, sequence names,
digest text, ledger fields and maps, tombstones, record times, schema keys, the order of checks,
empty folders, the request a fold shows).
"""

from __future__ import annotations

from typing import Any

from ckptfs.errors import CkptfsError
from ckptfs.format import cbor, framing, models
from ckptfs.format.cdc import ChunkerParams
from ckptfs.format.digest import Digest
from ckptfs.store import heads, repository
from ckptfs_conformance import render

#: issue 16: one per rule it settled (skip the check, or read the point the other way)
SPEC16_BREAKS = ("by-id-skip-record-size", "skip-record-path", "skip-chunk-digest",
                 "skip-chunker-order", "skip-label-rules", "allow-after-zstd-frame",
                 "check-content-canonical", "keep-nan-payload", "seq-names-unbounded",
                 "digest-text-corrupt", "lenient-ledger-fields", "open-ledger-maps",
                 "tombstone-hides-run", "check-record-created", "strict-schema-keys",
                 "chunker-before-required", "expiry-before-required", "folder-is-missing",
                 "empty-folder-is-run",
                 "request-of-last-record")


def apply(rule: str) -> None:
    """Break the issue-16 rule ``rule`` (one of ``SPEC16_BREAKS``) in this process."""
    import struct

    from ckptfs.errors import CorruptSnapshot, FormatError, MissingObject, UnsupportedFeature
    from ckptfs.format import ledger
    from ckptfs.format.lifecycle import FENCE_ALL, Retired
    from ckptfs.format.models import RunRecord, StoreConfig
    from ckptfs.store import entries, entry_reads, lifecycle, objects

    if rule == "by-id-skip-record-size":
        setattr(repository.Repository, "check_record_size", lambda self, d, rec: None)
    elif rule == "skip-record-path":
        setattr(repository, "check_record_path", lambda rec, run_id, seq, what: None)
    elif rule == "skip-chunk-digest":  # the whole-content digest is still checked
        def check_chunk(ref: Any, stored: bytes | None, *, where: str) -> bytes:
            if stored is None:
                raise MissingObject(f"{where}: chunk missing")
            return framing.unframe(stored, ref.size, what=where)
        for module in (objects, entries):
            if hasattr(module, "check_chunk"):
                setattr(module, "check_chunk", check_chunk)
    elif rule == "skip-chunker-order":  # each size in its range, but not min <= avg <= max
        def post_init(self: ChunkerParams) -> None:
            if self.algorithm != "fastcdc-2020":
                raise UnsupportedFeature(f"unknown chunker algorithm {self.algorithm!r}")
            if not (64 <= self.min_size <= 1 << 20 and 256 <= self.avg_size <= 1 << 22
                    and 1024 <= self.max_size <= 1 << 24 and self.normalization in range(4)):
                raise FormatError("chunker sizes out of range")
        setattr(ChunkerParams, "__attrs_post_init__", post_init)
    elif rule == "skip-label-rules":
        setattr(models, "_labels", lambda v, what: dict(v or {}))
    elif rule == "allow-after-zstd-frame":
        setattr(framing, "_frame_length", lambda body, what: len(body))
    elif rule == "check-content-canonical":
        strict = cbor.decode

        def canonical(data: Any, *, what: str, allow_bignum: bool = False,
                         check_canonical: bool = True, max_items: int | None = None) -> Any:
            return strict(data, what=what, allow_bignum=allow_bignum, check_canonical=True,
                          max_items=max_items)
        cbor.decode = canonical
    elif rule == "keep-nan-payload":
        def raw_tagged(v: Any) -> Any:
            if isinstance(v, float):
                return {"$float": struct.pack(">d", v).hex()}
            if isinstance(v, list):
                return [raw_tagged(x) for x in v]
            if isinstance(v, dict):
                return {("$" + k if k.startswith("$") else k): raw_tagged(x)
                        for k, x in v.items()}
            return orig_tagged(v)
        orig_tagged = render.tagged
        setattr(render, "tagged", raw_tagged)
    elif rule == "seq-names-unbounded":
        from ckptfs.format import names

        def unbounded(name: str) -> int | None:
            return int(name) if len(name) == 20 and name.isascii() and name.isdigit() else None
        for module in (names, repository, lifecycle, heads):
            if hasattr(module, "parse_seq_name"):
                setattr(module, "parse_seq_name", unbounded)
    elif rule == "digest-text-corrupt":
        orig_parse = Digest.parse.__func__  # type: ignore[attr-defined]

        def parse(cls: type[Digest], text: str) -> Digest:
            try:
                return orig_parse(cls, text)  # type: ignore[no-any-return]
            except CkptfsError as e:
                raise FormatError(str(e)) from e
        setattr(Digest, "parse", classmethod(parse))
    elif rule == "lenient-ledger-fields":
        setattr(ledger, "check_record_fields", lambda m, kind, status, what: None)
    elif rule == "open-ledger-maps":  # unknown keys in ledger-ref and error ignored
        ref_from = ledger.LedgerRef.from_cbor.__func__  # type: ignore[attr-defined]
        rec_from = ledger.Record.from_cbor.__func__  # type: ignore[attr-defined]
        known = {"count", "size", "digest", "chunks", "inline"}

        def ref_cbor(cls: Any, m: Any, *, what: str = "manifest ledger") -> Any:
            return ref_from(cls, {k: v for k, v in m.items() if k in known}
                            if isinstance(m, dict) else m, what=what)

        def rec_cbor(cls: Any, m: Any, *, what: str = "ledger record") -> Any:
            if isinstance(m, dict) and isinstance(m.get("error"), dict):
                m = dict(m, error={k: v for k, v in m["error"].items()
                                   if k in ("type", "message")})
            return rec_from(cls, m, what=what)
        setattr(ledger.LedgerRef, "from_cbor", classmethod(ref_cbor))
        setattr(ledger.Record, "from_cbor", classmethod(rec_cbor))
        ledger_read = entry_reads.read_ledger

        def read_ledger(objs: Any, field: Any, *, where: str) -> Any:
            if isinstance(field, dict):
                field = {k: v for k, v in field.items() if k in known}
            return ledger_read(objs, field, where=where)
        for module in (entry_reads, render):
            setattr(module, "read_ledger", read_ledger)
    elif rule == "tombstone-hides-run":  # a run tombstone hides every record (a fence)
        read_retired = getattr(repository, "read_retired")

        def retired(storage: Any, run_id: str) -> Any:
            marker = read_retired(storage, run_id)
            if marker is None and lifecycle.read_tombstone(storage, run_id) is not None:
                return Retired(run=run_id, through=FENCE_ALL, kept=(), created=0)
            return marker
        setattr(repository, "read_retired", retired)
        setattr(heads, "read_retired", retired)
    elif rule == "check-record-created":
        recorded = repository.Repository._recorded

        def checked(self: Any, rec: RunRecord) -> Any:
            snap = recorded(self, rec)
            if snap.manifest.created != rec.created:
                raise CorruptSnapshot("record created is not the manifest's")
            return snap
        setattr(repository.Repository, "_recorded", checked)
    elif rule == "strict-schema-keys":
        man_from = models.Manifest.from_cbor.__func__  # type: ignore[attr-defined]

        def manifest(cls: Any, m: Any, *, what: str = "manifest") -> Any:
            if isinstance(m, dict) and isinstance(m.get("schema"), dict) \
                    and set(m["schema"]) != {"name", "version"}:
                raise FormatError(f"{what}: schema has exactly name and version")
            return man_from(cls, m, what=what)
        setattr(models.Manifest, "from_cbor", classmethod(manifest))
    elif rule == "chunker-before-required":  # validity of the chunker checked first
        cfg_from = StoreConfig.from_bytes.__func__  # type: ignore[attr-defined]

        def config(cls: Any, data: bytes, *, what: str = "store config") -> Any:
            import cbor2

            try:
                m = cbor2.loads(data)
            except Exception:
                m = None
            if isinstance(m, dict) and isinstance(m.get("chunker"), dict):
                c = m["chunker"]
                if all(type(c.get(k)) is int for k in ("min", "avg", "max")) \
                        and not c["min"] <= c["avg"] <= c["max"]:
                    raise FormatError(f"{what}: chunker min <= avg <= max")
            return cfg_from(cls, data, what=what)
        setattr(StoreConfig, "from_bytes", classmethod(config))
    elif rule == "expiry-before-required":  # an expired snapshot is not looked into further
        check = models.check_features

        def features(required: Any, what: str) -> tuple[str, ...]:
            return () if EXPIRED.get("now") else check(required, what)
        setattr(models, "check_features", features)
        man_from2 = models.Manifest.from_cbor.__func__  # type: ignore[attr-defined]

        def manifest2(cls: Any, m: Any, *, what: str = "manifest") -> Any:
            now = EXPIRED.get("clock", 0)
            EXPIRED["now"] = isinstance(m, dict) and isinstance(m.get("expires"), int) \
                and m["expires"] <= now
            try:
                return man_from2(cls, m, what=what)
            finally:
                EXPIRED["now"] = False
        setattr(models.Manifest, "from_cbor", classmethod(manifest2))
    elif rule == "request-of-last-record":  # the fold shows the last record's request
        import attrs

        fold = ledger.fold

        def last_request(effect: Any, r: Any, *, what: str = "ledger") -> Any:
            out = fold(effect, r, what=what)
            return attrs.evolve(out, request=r.request) if r.request is not None else out
        setattr(ledger, "fold", last_request)
    elif rule == "empty-folder-is-run":  # every folder listed, empty or not
        import os

        from ckptfs.storage import local

        def children_all(self: Any, prefix: str) -> list[tuple[str, bool]]:
            d = self._abs(prefix) if prefix else self.root
            return ([(n, os.path.isdir(os.path.join(d, n))) for n in os.listdir(d)]
                    if os.path.isdir(d) else [])
        setattr(local.LocalStorage, "_children", children_all)
    elif rule == "folder-is-missing":  # a folder where a file belongs read as absent
        from ckptfs.errors import StorageError
        from ckptfs.storage import local

        read = local.LocalStorage.read

        def lenient_read(self: Any, path: str, *a: Any, **kw: Any) -> Any:
            try:
                return read(self, path, *a, **kw)
            except StorageError as e:
                if "folder" in str(e):
                    raise FileNotFoundError(path) from e
                raise
        setattr(local.LocalStorage, "read", lenient_read)


#: the reading time (set by the adapter's ``read`` request), for ``expiry-before-required``
EXPIRED: dict[str, Any] = {}
