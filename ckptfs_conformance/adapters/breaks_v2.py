"""Broken readers of spec/v2.md's storage layout, for ``--break v2-RULE``: each flips one reader
rule of version 2 (the section in brackets) so the suite must notice: the head hint trusted,
container and header digests unchecked, the body table taken as it is, stray records' bodies
not read, gc keeping too little, compressed headers inflated without their limits, no item
budget, forwards not followed or followed without end, no loose-object fallback.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ckptfs.errors import CkptfsError
from ckptfs.format import cbor, framing
from ckptfs.format.digest import Digest
from ckptfs.store import repository


def apply(rule: str) -> None:
    """Flip the reader rule ``v2-RULE`` of spec/v2.md (section in brackets) in this process;
    ``rule`` without its ``v2-`` prefix."""
    from ckptfs.format import containers as ct
    from ckptfs.store import containers as sc

    if rule == "trust-head-hint":  # [4] the hint is taken as the head, unchecked
        from ckptfs.store.records import read_hint

        from ckptfs.store.heads import HeadLook
        from ckptfs.store.lifecycle import read_retired

        def head(self: repository.Repository, run_id: str) -> Any:
            hint = read_hint(self.storage, run_id)
            return self.record(run_id, hint.seq) if hint is not None else real_head(self, run_id)

        def head_look(self: repository.Repository, run_id: str) -> Any:
            hint = read_hint(self.storage, run_id)
            if hint is None:
                return real_look(self, run_id)
            return HeadLook(self.record(run_id, hint.seq), read_retired(self.storage, run_id))

        def parse(cls: Any, data: bytes, run: str) -> Any:
            m = cbor.decode(data[:-ct.HINT_CHECK], what="hint", check_canonical=False)
            return cls(run, m["seq"], Digest(m["snapshot"]), m["written"])

        real_head = repository.Repository.head
        real_look = repository.Repository.head_look
        setattr(repository.Repository, "head", head)
        setattr(repository.Repository, "head_look", head_look)
        setattr(ct.HeadHint, "parse", classmethod(lambda cls, data, run: _or_none(
            lambda: parse(cls, data, run))))
    elif rule == "skip-header-digest":  # [3.1 step 2] (digests of containers and hints)
        import types

        import blake3

        class _Equal(bytes):
            def __ne__(self, other: object) -> bool:
                return False

        setattr(ct, "blake3", types.SimpleNamespace(blake3=lambda data=b"": types.SimpleNamespace(
            digest=lambda length=32: _Equal(blake3.blake3(data).digest(length)))))
    elif rule == "lenient-body-table":  # [3.2] offsets and digests not checked
        def bodies(v: Any, body_length: int, what: str) -> Any:
            return tuple(ct.Body(Digest(b[0]), b[1], b[2], b[3]) for b in v)

        setattr(ct, "_bodies", bodies)
    elif rule == "no-stray-bodies":  # [6 step 2] a stray record's bodies are not read
        from ckptfs.format.containers import RecordRef
        from ckptfs.store.lifecycle import read_retired

        fetch = sc.ChunkReader._fetch

        def visible_only(self: Any, locs: Any) -> Any:
            def stray(loc: Any) -> bool:
                c = loc.container
                if not isinstance(c, RecordRef):
                    return False
                r = read_retired(self.storage, c.run)
                return r is not None and not r.visible(c.seq)
            got = fetch(self, [x for x in locs if not stray(x)])
            it = iter(got)
            return [None if stray(x) else next(it) for x in locs]
        sc.ChunkReader._fetch = visible_only  # type: ignore[method-assign]
    elif rule in ("gc-visible-only", "gc-no-forwards"):  # [9.2] what gc keeps unread
        from ckptfs.ops import gc_locators

        if rule == "gc-visible-only":
            setattr(gc_locators, "locator_containers", lambda h: ())
        else:
            setattr(gc_locators, "reached", lambda named, fwd: set(named))
    elif rule == "gc-parse-junk":  # [v2.md 2] every name under moved/ taken for a forward
        from ckptfs.ops import repack

        setattr(repack, "forward_ref", lambda path: path)
    elif rule == "lenient-zheader":  # [3.1 form 0x03] inflated without size and frame rules
        import zstandard

        declared = framing.inflate_declared

        def inflate(body: Any, limit: int, *, what: str, base: Any = None) -> bytes:
            if base is not None:  # a header by reference (3.1.2): not this rule's
                return declared(body, limit, what=what, base=base)
            try:
                return bytes(zstandard.ZstdDecompressor().decompressobj().decompress(bytes(body)))
            except zstandard.ZstdError as e:
                raise CkptfsError(f"{what}: {e}") from e
        setattr(framing, "inflate_declared", inflate)
    elif rule == "no-item-budget":  # [3.1 step 4, format.md 5.3] items built, not counted
        setattr(cbor, "MAX_ITEMS", 1 << 62)
    elif rule == "no-forwards":  # [6 step 3]
        setattr(sc, "forward_path", lambda path: "moved-nowhere/" + path)
    elif rule == "unbounded-forwards":  # [8] chains of any length followed
        setattr(sc, "MAX_HOPS", 1000)
    elif rule == "no-loose-fallback":  # [6 step 4]
        setattr(sc, "chunk_path", lambda d: "no-loose/" + d.hex)
    else:
        raise SystemExit(f"unknown --break rule v2-{rule!r}")


def _or_none(f: Callable[[], Any]) -> Any:
    """``f()``, or None where it raises (a hint that does not parse is no hint)."""
    try:
        return f()
    except Exception:
        return None
