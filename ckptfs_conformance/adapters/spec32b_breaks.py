"""Issue 32, gaps 24-26: one deliberately broken reader per point ckptfs_conformance/
gen_spec32b.py pins (``--break ...`` of ckptfs's adapter); tests/test_spec32b.py checks that
each fails exactly its vectors."""

from __future__ import annotations

from typing import Any

SPEC32B_BREAKS: tuple[str, ...] = ("v2-remembered-places", "typed-paths-as-given",
                                   "typed-offset-unchecked", "typed-set-nan-twice",
                                   "typed-refuse-set-order", "enc-writer-plaintext",
                                   "enc-accept-version-1", "enc-writer-layout-1",
                                   "enc-open-layout-1-only", "enc-whole-no-final",
                                   "enc-range-whole")


def apply(rule: str) -> None:
    """Flip one rule (the full rule name)."""
    from ckptfs.store import containers as sc

    if rule == "v2-remembered-places":  # [spec/v2.md 6, One outcome] any place seen counts
        def anywhere(self: Any, d: Any) -> bool:
            return False
        setattr(sc.ChunkReader, "_owned", anywhere)
    elif rule == "enc-writer-plaintext":  # [encryption.md 2, 3] enc-write ignores the keyring
        from ckptfs_conformance.adapters import enc_ops

        enc_ops.BROKEN.add(rule)
    elif rule == "enc-accept-version-1":  # [encryption.md 3] any config version is read
        import attrs

        from ckptfs.storage import encrypted_open as eo

        checked = eo.encryption_setting

        def any_version(cfg: Any, url: str) -> Any:
            return checked(attrs.evolve(cfg, version=2), url)
        setattr(eo, "encryption_setting", any_version)
    elif rule.startswith(("enc-writer-layout-1", "enc-open-layout-1-only",
                          "enc-whole-no-final", "enc-range-whole")):
        _layouts(rule)
    elif rule.startswith("typed-"):  # [format.md 18.3, gap 25] one built-in decoder changed
        _typed(rule)
    else:
        raise ValueError(rule)


def _typed(rule: str) -> None:
    """Replace the decoder of the built-in types the rule is about (Codecs reads BUILTINS
    when it is made, so every later decode uses the broken one)."""
    import datetime as dt

    from ckptfs.runtime import codecs_builtin as cb

    def paths(name: str, cls: Any) -> Any:
        def dec(p: Any) -> Any:
            return cls(p)  # any spelling, rewritten on the way back
        return dec

    def offset_unchecked(p: Any) -> Any:
        p = dict(p)
        if "zone" in p and p.get("offset") is not None:  # the zone's offset, not the stored one
            import zoneinfo

            wall = dt.datetime.fromisoformat(p["wall"])
            tz = zoneinfo.ZoneInfo(p["zone"])
            off = tz.utcoffset(wall.replace(fold=p.get("fold", 0)))
            p["offset"] = None if off is None else off.days * 86_400 + off.seconds
        return cb.dec_datetime(p)

    def sets(name: str, cls: Any) -> Any:
        strict = dict((n, d) for n, _, _, d, _ in cb.BUILTINS)[name]

        def dec(p: Any) -> Any:
            if rule == "typed-set-nan-twice":
                if type(p) is not list:
                    return strict(p)
                out = cls(p)
                if len(out) != len(p):
                    raise cb._bad(name, "the array holds the same item twice")
                return out
            from ckptfs.errors import CkptfsError
            from ckptfs.format import cbor

            try:  # items decoded already: encoded again to compare their order
                keys = [cbor.encode(x) for x in p] if type(p) is list else []
            except CkptfsError:
                keys = []
            if keys != sorted(keys):
                raise cb._bad(name, "items out of order")
            return strict(p)
        return dec

    out = []
    for name, cls, enc, dec, unordered in cb.BUILTINS:
        if rule == "typed-paths-as-given" and "path" in name:
            dec = paths(name, cls)
        elif rule == "typed-offset-unchecked" and name == "datetime":
            dec = offset_unchecked
        elif rule in ("typed-set-nan-twice", "typed-refuse-set-order") and unordered:
            dec = sets(name, cls)
        out.append((name, cls, enc, dec, unordered))
    setattr(cb, "BUILTINS", tuple(out))


def _layouts(rule: str) -> None:
    """spec/encryption.md 5.1: one rule of the two layouts skipped."""
    from ckptfs.format import crypto, crypto_stream as cs

    if rule == "enc-writer-layout-1":  # [enc.seal.layouts] the writer seals in layout 1
        from ckptfs.storage.encrypted import EncryptedStorage

        def seal1(self: Any, path: str, data: Any) -> bytes:
            scope = self._write_scope(path)
            self._forget(path)
            return crypto.seal(scope.key, store_id=self.store_id, scope_id=scope.id, path=path,
                               plaintext=bytes(data))
        setattr(EncryptedStorage, "seal", seal1)
    elif rule == "enc-open-layout-1-only":  # [enc.seal.layouts] CKE 0x02 is not known
        def layout1(data: Any, *, where: Any = None) -> int:
            crypto.sealed_scope(bytes(data[:cs.HEADER_SIZE]) + bytes(crypto.TAG_SIZE), where=where)
            return 1
        setattr(cs, "layout", layout1)
    elif rule == "enc-whole-no-final":  # [enc.seal.whole-object] the final flag not required
        def open_all(self: Any, data: Any) -> bytes:
            body = memoryview(data)[cs.HEADER_SIZE:]
            n = max(1, -(-len(body) // cs.SEALED_SEGMENT))
            out = []
            for i in range(n):
                piece = body[i * cs.SEALED_SEGMENT:(i + 1) * cs.SEALED_SEGMENT]
                out.append(self._segment(i, piece, short=len(piece) < cs.SEALED_SEGMENT)[0])
            return b"".join(out)
        setattr(cs.Opener, "open_all", open_all)
    else:  # [enc.seal.segments] a range opens the whole object
        from ckptfs_conformance.adapters import enc_ops

        enc_ops.BROKEN.add(rule)
