"""Issue 32: one deliberately broken reader per rule of spec/v2.md that ckptfs_conformance/
gen_spec32.py pins (``--break v2-...`` of ckptfs's adapter). Each skips one check, or reads a
point the spec used to leave open the other way; tests/test_conformance.py checks that each
fails exactly its vectors among the version 2 ones."""

from __future__ import annotations

from typing import Any

from ckptfs.errors import CorruptSnapshot, FormatError, UnsupportedFeature
from ckptfs.format.digest import Digest

SPEC32_BREAKS: tuple[str, ...] = tuple("v2-" + r for r in (
    "lenient-form", "any-kind", "lenient-body-ranges", "lenient-locators",
    "allow-prefix-twice", "lenient-nonce", "skip-manifest-path", "verify-by-prefix",
    "forward-good-rows", "check-pack-header", "zheader-needs-feature", "refuse-bad-window",
    "refuse-v2-features-in-v1", "check-table-size", "serve-stray-by-id",
    "prefix-counts-strays", "scan-skips-damage", "no-v1-record-limit")) + (
        "hash-missing-unsupported",)


def apply(rule: str) -> None:
    """Flip one rule (``rule`` without its ``v2-`` prefix)."""
    from ckptfs.format import containers as ct
    from ckptfs.store import containers as sc
    from ckptfs.store import ids, repository

    if rule == "lenient-form":  # [3.1 step 1] any form byte but 0x03 is taken for 0x02
        setattr(ct, "FORMS", frozenset(range(256)))
    elif rule == "any-kind":  # [3.1 step 4] a header of another kind is read as a record
        decode = ct.decode

        def any_kind(data: Any, *, what: str, whole: bool = True, **kw: Any) -> Any:
            try:
                return decode(data, what=what, whole=whole, **kw)
            except FormatError as e:
                if "unknown container kind" not in str(e):
                    raise
            from ckptfs.format import cbor, framing

            end = ct.header_length(data, what=what)
            header = bytes(data[ct.PREFIX_LEN:end - 32])
            if data[len(ct.MAGIC)] == ct.CONTAINER_COMPRESSED:
                header = framing.inflate_declared(memoryview(header), ct.MAX_HEADER_SIZE,
                                                  what=what)
            m = cbor.decode(header, what=what)
            return ct.Container(getattr(ct, "_record")(m, what), end)
        setattr(ct, "decode", any_kind)
    elif rule == "lenient-body-ranges":  # [3.2] stored and size ranges not checked
        setattr(ct, "_bodies", _bodies_any_range)
    elif rule in ("lenient-locators", "allow-prefix-twice"):  # [3.5] row rules not checked
        setattr(ct, "_locators", _locators(rule == "lenient-locators"))
    elif rule == "lenient-nonce":  # [3.3] a nonce of any shape, or none
        record = getattr(ct, "_record")

        def any_nonce(m: dict[str, Any], what: str) -> Any:
            n = m.get("nonce")
            if type(n) is not bytes or len(n) != 16:
                m = {**m, "nonce": bytes(16)}
            return record(m, what)
        setattr(ct, "_record", any_nonce)
    elif rule == "skip-manifest-path":  # [3.3, format.md 8.1] carried manifest's run/seq
        from ckptfs.format.models import Manifest
        from ckptfs.store.snapshot import Snapshot

        recorded = repository.Repository._recorded

        def unchecked(self: Any, rec: Any) -> Any:
            if rec.manifest is not None:
                return Snapshot(rec.snapshot, Manifest.from_bytes(
                    rec.manifest, what=f"snapshot {rec.snapshot}"))
            return recorded(self, rec)
        setattr(repository.Repository, "_recorded", unchecked)
    elif rule == "verify-by-prefix":  # [3.5, 6] bytes at a located place are taken unverified
        from ckptfs.errors import CorruptObject
        from ckptfs.format import framing

        def trusted(stored: Any, ref: Any, *, where: str) -> Any:
            if not stored:
                return None
            try:
                return framing.unframe(stored, ref.size, what=where)
            except CorruptObject:
                return None
        setattr(sc, "unframe_body", trusted)
    elif rule == "forward-good-rows":  # [8] the good rows of a damaged forward are used
        setattr(ct.Forward, "from_bytes", classmethod(_good_rows))
    elif rule == "check-pack-header":  # [3.4] a reader that decodes every pack it reads
        fetch = sc.ChunkReader._fetch

        def checked(self: Any, locs: Any) -> Any:
            for c in {loc.container for loc in locs if isinstance(loc.container, ct.PackRef)}:
                try:
                    data = self.storage.read(sc.container_path(c))
                except FileNotFoundError:
                    continue
                try:
                    ct.decode(data, what=str(c))
                except FormatError as e:
                    raise CorruptSnapshot(str(e)) from e
            return fetch(self, locs)
        setattr(sc.ChunkReader, "_fetch", checked)
    elif rule == "zheader-needs-feature":  # [2, 3.1] form 0x03 read only where listed
        configured = repository.Repository._configured
        decode = ct.decode
        listed = {"yes": True}

        def note(self: Any, cfg: Any) -> None:
            listed["yes"] = "compressed-headers" in cfg.required
            configured(self, cfg)

        def strict(data: Any, *, what: str, whole: bool = True, **kw: Any) -> Any:
            if len(data) > 8 and data[8] == ct.CONTAINER_COMPRESSED and not listed["yes"]:
                raise FormatError(f"{what}: form 0x03 in a store without compressed-headers")
            return decode(data, what=what, whole=whole, **kw)
        setattr(repository.Repository, "_configured", note)
        setattr(ct, "decode", strict)
    elif rule == "refuse-bad-window":  # [2] a reader that refuses a bad check window
        configured = repository.Repository._configured

        def refuse(self: Any, cfg: Any) -> None:
            configured(self, cfg)
            if self._window_error is not None:
                raise self._window_error
        setattr(repository.Repository, "_configured", refuse)
    elif rule == "refuse-v2-features-in-v1":  # [2] a v1 config with v2 features refused
        from ckptfs.format.models import StoreConfig

        parse = StoreConfig.from_bytes.__func__  # type: ignore[attr-defined]

        def refused(cls: Any, data: bytes, *, what: str = "store config") -> Any:
            cfg = parse(cls, data, what=what)
            if cfg.version == 1 and {"compressed-headers", "complete-locators"} & set(
                    cfg.required):
                raise UnsupportedFeature(f"{what}: version 2 features in a version 1 store")
            return cfg
        setattr(StoreConfig, "from_bytes", classmethod(refused))
    elif rule == "check-table-size":  # [3.2] the table's size compared with the reference's
        decode, unframe = ct.decode, sc.unframe_body
        sizes: dict[bytes, int] = {}

        def remember(data: Any, *, what: str, whole: bool = True, **kw: Any) -> Any:
            c = decode(data, what=what, whole=whole, **kw)
            sizes.update({b.digest.raw: b.size for b in c.header.bodies})
            return c

        def compared(stored: Any, ref: Any, *, where: str) -> Any:
            if sizes.get(ref.digest.raw, ref.size) != ref.size:
                return None
            return unframe(stored, ref, where=where)
        setattr(ct, "decode", remember)
        setattr(sc, "unframe_body", compared)
    elif rule == "serve-stray-by-id":  # [7] a stray found by id is served
        snapshot = repository.Repository.snapshot
        retained = repository.Repository._check_retained
        inside = {"n": 0}

        def by_id(self: Any, d: Any, **kw: Any) -> Any:
            inside["n"] += 1
            try:
                return snapshot(self, d, **kw)
            finally:
                inside["n"] -= 1

        def check(self: Any, run_id: str, seq: int) -> None:
            if not inside["n"]:
                retained(self, run_id, seq)
        setattr(repository.Repository, "snapshot", by_id)
        setattr(repository.Repository, "_check_retained", check)
    elif rule == "prefix-counts-strays":  # [7] strays count towards a prefix's matches
        def every(repo: Any, prefix: str) -> Any:
            scan = ids.Scan()
            out = sorted({got for _, _, got, _ in ids.record_ids(repo, scan)
                          if got.hex.startswith(prefix)})
            scan.fail_closed(prefix)
            return out
        setattr(repository, "ids_with_prefix", every)
    elif rule == "no-v1-record-limit":  # [10] a v1 record in a v2 store read at any size
        from ckptfs.format import models

        setattr(models, "MAX_RECORD_SIZE", 1 << 30)
    elif rule == "scan-skips-damage":  # [7] an undecodable record is skipped, not corrupt
        setattr(ids.Scan, "fail_closed", lambda self, what: None)
    else:
        raise SystemExit(f"unknown --break rule v2-{rule!r}")


def apply_other(rule: str) -> None:
    """The issue-32 rules outside spec/v2.md."""
    if rule == "hash-missing-unsupported":  # [format.md 2] any hash but blake3 unsupported
        from ckptfs.format.models import StoreConfig

        parse = StoreConfig.from_bytes.__func__  # type: ignore[attr-defined]

        def config(cls: Any, data: bytes, *, what: str = "store config") -> Any:
            from ckptfs.format import cbor

            m = cbor.decode(data, what=what)
            if isinstance(m, dict) and type(m.get("hash")) is not str \
                    and m.get("format") == "ckptfs" and m.get("version") in (1, 2):
                raise UnsupportedFeature(f"{what}: hash {m.get('hash')!r} is not supported")
            return parse(cls, data, what=what)
        setattr(StoreConfig, "from_bytes", classmethod(config))


def _locators(lenient_rows: bool) -> Any:
    """ct._locators without the row rules (``lenient_rows``: rows out of range are dropped
    unread) or without the one-row-per-prefix rule (the first row of a prefix is kept)."""
    from ckptfs.format import containers as ct

    def parse(v: Any, what: str) -> Any:
        containers = tuple(ct.container_ref(c, f"{what} locator container {i}")
                           for i, c in enumerate(v["containers"]))
        out = []
        prefixes: set[bytes] = set()
        for i, x in enumerate(v["chunks"]):
            if not (isinstance(x, list) and len(x) == 4 and type(x[0]) is bytes
                    and len(x[0]) == ct.LOCATOR_PREFIX and all(type(n) is int for n in x[1:])):
                raise FormatError(f"{what} locator {i}: must be [prefix, container, start, stored]")
            bad = not 0 <= x[1] < len(containers) or x[2] < 0 \
                or not 2 <= x[3] <= ct.MAX_STORED_SIZE
            if bad and lenient_rows:
                continue
            if bad:
                raise FormatError(f"{what} locator {i}: out of bounds")
            if x[0] in prefixes:
                if lenient_rows:
                    raise FormatError(f"{what} locator {i}: a second row with one prefix")
                continue
            prefixes.add(x[0])
            out.append(ct.Locator(x[0], x[1], x[2], x[3]))
        return containers, tuple(out)
    return parse


def _bodies_any_range(v: Any, body_length: int, what: str) -> Any:
    """ct._bodies without the stored and size ranges."""
    from ckptfs.format import containers as ct

    out, end, seen = [], 0, set()
    for b in v:
        _, off, stored, size = b
        if off != end or b[0] in seen:
            raise FormatError(f"{what}: offsets or a digest twice")
        seen.add(b[0])
        out.append(ct.Body(Digest(b[0]), off, stored, size))
        end = off + stored
    if end != body_length:
        raise FormatError(f"{what}: body_length")
    return tuple(out)


def _good_rows(cls: Any, data: bytes, *, what: str) -> Any:
    """A forward's well-formed rows, its malformed ones skipped."""
    from ckptfs.format import cbor
    from ckptfs.format import containers as ct

    m = cbor.decode(data, what=what)
    out = {}
    for r in m.get("bodies", []) if isinstance(m, dict) else []:
        if (isinstance(r, list) and len(r) == 4 and type(r[0]) is bytes
                and len(r[0]) == 32 and type(r[2]) is int and type(r[3]) is int):
            try:
                out[Digest(r[0])] = ct.Location(ct.container_ref(r[1], what), r[2], r[3])
            except FormatError:
                continue
    return cls(out)
