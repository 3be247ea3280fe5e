"""The conformance adapter for ckptfs itself: the protocol of ckptfs_conformance/README.md over argv
and stdout, or many requests at once with ``batch`` (one JSON request per stdin line).

``--break RULE`` makes a deliberately broken reader (the suite must catch it):
``accept-non-canonical``, ``skip-digests``, ``ignore-required``, ``ignore-retired`` (serve
records in retired ranges), ``ignore-tombstones`` (as if nothing had been erased),
``ignore-expiry-overrides`` (only the manifest's ``expires`` counts), ``ignore-lease-deadline``
(an effect intent's lease never runs: every intent is in doubt at once, as in v1).

Issue 16 added one rule per check it pinned (``SPEC16_BREAKS``, ckptfs_conformance/gen_spec16.py):
each skips that check, or applies the other reading of a point the spec used to leave open.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from ckptfs.errors import CkptfsError
from ckptfs.format import cbor, framing, models
from ckptfs.format.cdc import ChunkerParams, cut_lengths
from ckptfs.format.digest import Digest
from ckptfs.format.lifecycle import Lease
from ckptfs.runtime.codecs import Codecs
from ckptfs.store import heads, repository
from ckptfs_conformance import render
from ckptfs_conformance.render import canonical_json, render_ref, render_store, tagged, untagged

BREAKS: tuple[str, ...] = (
    "accept-non-canonical", "skip-digests", "ignore-required", "ignore-retired",
    "ignore-tombstones", "ignore-expiry-overrides", "ignore-lease-deadline",
    *("v2-" + r for r in ("trust-head-hint", "skip-header-digest", "lenient-body-table",
                          "no-forwards", "unbounded-forwards", "no-loose-fallback",
                          "no-stray-bodies", "gc-visible-only", "gc-no-forwards",
                          "gc-parse-junk",
                          "lenient-zheader", "no-item-budget")))
#: issue 16: one per rule it settled (skip the check, or read the point the other way)
SPEC16_BREAKS = ("by-id-skip-record-size", "skip-record-path", "skip-chunk-digest",
                 "skip-chunker-order", "skip-label-rules", "allow-after-zstd-frame",
                 "check-content-canonical", "keep-nan-payload", "seq-names-unbounded",
                 "digest-text-corrupt", "lenient-ledger-fields", "open-ledger-maps",
                 "tombstone-hides-run", "check-record-created", "strict-schema-keys",
                 "chunker-before-required", "expiry-before-required", "folder-is-missing",
                 "empty-folder-is-run",
                 "request-of-last-record")
BREAKS += SPEC16_BREAKS


def apply_break(rule: str) -> None:
    """Flip one rule of the reader, for testing that the suite notices."""
    if rule == "accept-non-canonical":
        strict = cbor.decode

        def lenient(data: Any, *, what: str, allow_bignum: bool = False,
                       check_canonical: bool = True, max_items: int | None = None) -> Any:
            return strict(data, what=what, allow_bignum=allow_bignum, check_canonical=False,
                          max_items=max_items)

        cbor.decode = lenient
    elif rule == "skip-digests":
        Digest.__ne__ = lambda self, other: False  # type: ignore[method-assign]
    elif rule == "ignore-required":
        models.check_features = lambda required, what: tuple(required or ())
    elif rule == "ignore-retired":  # every record counts: strays are served
        for module in (repository, heads):  # heads: the head search (s3req14 moved it there)
            setattr(module, "read_retired", lambda storage, run_id: None)
    elif rule == "ignore-tombstones":  # nothing was ever erased
        for module in (repository, render):
            setattr(module, "read_tombstone", lambda storage, run_id, seq=None: None)
    elif rule == "ignore-expiry-overrides":  # only the manifest's expires counts
        setattr(render, "effective_expiry", lambda storage, run_id, seq, expires: expires)
    elif rule == "ignore-lease-deadline":  # spec/ledger.md "Leases" not applied
        from ckptfs.format.ledger import Effect

        setattr(Effect, "running", lambda self, now: False)
    elif rule.startswith("v2-"):
        _break_v2(rule[3:])
    elif rule in SPEC16_BREAKS:
        _break_spec16(rule)
    else:
        raise SystemExit(f"unknown --break rule {rule!r}; known: {', '.join(BREAKS)}")


def _break_v2(rule: str) -> None:
    """Flip one reader rule of spec/v2.md (section in brackets)."""
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

        def inflate(body: Any, limit: int, *, what: str) -> bytes:
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
    try:
        return f()
    except Exception:
        return None
def _break_spec16(rule: str) -> None:
    """The issue-16 rules (see SPEC16_BREAKS)."""
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
        globals()["tagged"] = raw_tagged
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
            return () if _EXPIRED.get("now") else check(required, what)
        setattr(models, "check_features", features)
        man_from2 = models.Manifest.from_cbor.__func__  # type: ignore[attr-defined]

        def manifest2(cls: Any, m: Any, *, what: str = "manifest") -> Any:
            now = _EXPIRED.get("clock", 0)
            _EXPIRED["now"] = isinstance(m, dict) and isinstance(m.get("expires"), int) \
                and m["expires"] <= now
            try:
                return man_from2(cls, m, what=what)
            finally:
                _EXPIRED["now"] = False
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


#: the reading time, for ``expiry-before-required``
_EXPIRED: dict[str, Any] = {}


class _Crash(BaseException):
    """Raised inside an effect to stop the process between intent and outcome."""


def write_case(case_path: str, store_dir: str) -> str:
    """Carry out a writer case (README "Writer cases") into an empty directory: a format 2
    store (the only one ckptfs writes) whose config takes no check window from the
    environment and whose packs carry the case's clock as ``created`` (the reference profile's
    bytes are then reproducible)."""
    import os

    window = os.environ.pop("CKPTFS_CHECK_WINDOW_MS", None)
    try:
        return _write_case(case_path, store_dir)
    finally:
        if window is not None:
            os.environ["CKPTFS_CHECK_WINDOW_MS"] = window


def _write_case(case_path: str, store_dir: str) -> str:
    import types

    import ckptfs
    from ckptfs.store import containers as store_containers

    case = json.loads(Path(case_path).read_text())
    clock = {"now": 0}
    chunker = ChunkerParams(**{k2: case["chunker"][k1] for k1, k2 in (
        ("min", "min_size"), ("avg", "avg_size"), ("max", "max_size"),
        ("normalization", "normalization"))}) if case.get("chunker") else None
    store = ckptfs.open_store(store_dir, chunker=chunker, clock=lambda: clock["now"],
                              writer=case["writer"])
    from ckptfs_conformance.gen_commit import reproducible_nonces

    store.repo.nonce = reproducible_nonces()  # the reference profile: reproducible bytes
    if "owner" in case:  # the owner its effect intents name (spec/ledger.md "Leases")
        from ckptfs.runtime.effects import set_process_owner

        set_process_owner(case["owner"])
    if "settings" in case:  # created at the first step's time with these settings
        clock["now"] = case["steps"][0]["time"]
        store.init(settings=untagged(case["settings"]))
    real = getattr(store_containers, "time")
    setattr(store_containers, "time", types.SimpleNamespace(time=lambda: clock["now"] / 1000))
    try:
        _steps(store, case, clock)
    finally:
        setattr(store_containers, "time", real)
    store.close()
    return "ok"


def _steps(store: Any, case: dict[str, Any], clock: dict[str, int]) -> None:
    from ckptfs.runtime.run import Run

    runs: dict[str, Run] = {}
    for step in case["steps"]:
        clock["now"] = step["time"]
        op = step["op"]
        if op == "start":
            runs[step["run"]] = store.start_run(
                step["run"], schema=(step["schema"]["name"], step["schema"]["version"]))
        elif op == "checkpoint":
            run = runs[step["run"]]
            state = {k: _state_value(v) for k, v in step["state"].items()}
            run.checkpoint(state, step.get("boundary", "step"), labels=step.get("labels"),
                           expires_at=None if step.get("expires") is None
                           else step["expires"] / 1000,
                           entry_labels=step.get("entry_labels"))
        elif op == "resume":
            runs[step["run"]] = store.resume(step["run"])
        elif op == "fork":
            runs[step["run"]] = store.fork(step["from"], step["run"])
        elif op == "effect":
            _effect(runs[step["run"]], step)
        elif op == "settle":
            out = step["outcome"]
            if "result" in out:
                runs[step["run"]].settle_effect(step["key"], result=untagged(out["result"]))
            else:
                runs[step["run"]].settle_effect(step["key"], failed=out["error"]["message"])
        else:
            raise ValueError(f"unknown writer step {op!r}")


def _effect(run: Any, step: dict[str, Any]) -> None:
    out = step["outcome"]

    def fn(*args: Any, **kwargs: Any) -> Any:
        if "crash" in out:
            raise _Crash()
        if "error" in out:
            raise RuntimeError(out["error"]["message"])
        return untagged(out["result"])

    try:
        lease: dict[str, Any] = {"timeout": step["timeout"] / 1000} if "timeout" in step else {}
        if step.get("reconcile") == "not-done":
            from ckptfs.runtime.effects import NOT_DONE

            lease["reconcile"] = lambda eff: NOT_DONE
        run.effect(step["name"], fn, *untagged(step.get("args", [])), key=step["key"],
                   **lease, **untagged(step.get("kwargs", {})))
    except (_Crash, RuntimeError):
        pass


def _state_value(v: dict[str, Any]) -> Any:
    import ckptfs

    if "value" in v:
        return untagged(v["value"])
    if "blob" in v:
        return ckptfs.Blob(bytes.fromhex(v["blob"]), type=v.get("type", "application/octet-stream"))
    r = v["ref"]
    return ckptfs.Ref(r["uri"], digest=r.get("digest"), size=r.get("size"),
                      expires_at=None if r.get("expires") is None else r["expires"] / 1000)


def _read(path: str) -> bytes:
    return Path(path).read_bytes()


def _lease(data: bytes, now: int) -> str:
    """``blocks`` or ``free``: does this lease object exclude other maintenance at ``now``
    (retention.md 6; an unparseable lease blocks nobody)."""
    try:
        lease = Lease.from_bytes(data, what="lease")
    except CkptfsError:
        return "free"
    return "blocks" if lease.blocks(now) else "free"


def _typed_roundtrip(data: bytes, unknown: Literal["error", "raw"]) -> str:
    """Value content decoded into Python types with the built-in codecs (format.md 18.3) and
    encoded again, as hex; ``unknown`` as ckptfs.Codecs takes it."""
    codecs = Codecs(unknown=unknown)
    value = codecs.decode(cbor.decode(data, what="value", allow_bignum=True,
                                      check_canonical=False), what="value")
    return cbor.encode(codecs.encode(value)).hex()


OPS: dict[str, Callable[..., str]] = {
    "digest": lambda f: Digest.of(_read(f)).text,
    "parse-digest": lambda text: Digest.parse(text).text,
    "cbor-decode": lambda f: canonical_json(render.tagged(cbor.decode(_read(f), what="input"))),
    "value-decode": lambda f: canonical_json(render.tagged(cbor.decode(
        _read(f), what="value", allow_bignum=True, check_canonical=False))),
    "cbor-encode": lambda f: cbor.encode(untagged(json.loads(_read(f)))).hex(),
    "typed-roundtrip": lambda f: _typed_roundtrip(_read(f), "error"),
    "typed-roundtrip-raw": lambda f: _typed_roundtrip(_read(f), "raw"),
    "unframe": lambda f, size: framing.unframe(_read(f), int(size), what="object").hex(),
    "cut": lambda mn, avg, mx, nc, f: json.dumps(cut_lengths(_read(f), ChunkerParams(
        min_size=int(mn), avg_size=int(avg), max_size=int(mx), normalization=int(nc)))),
    "read": lambda store, now: (_EXPIRED.update(clock=int(now)),
                                canonical_json(render_store(store, int(now))))[1],
    "snapshot": lambda store, now, ref: canonical_json(render_ref(store, ref, int(now))),
    "write": write_case,
    "lease": lambda f, now: _lease(_read(f), int(now)),
    "gc-named": lambda store: _gc_named(store),
}


def _gc_named(store: str) -> str:
    """``gc-named STORE``: the stray records and packs gc must read and judge (spec/v2.md
    9.2, complete locators), as a JSON array of paths."""
    from ckptfs.ops.gc_locators import named_containers

    import ckptfs

    return json.dumps(named_containers(ckptfs.open_store(store).repo))


def handle(argv: list[str]) -> str:
    """One request: the stdout text of the protocol (a result or ``error: <category>``)."""
    op, *args = argv
    try:
        return OPS[op](*args)
    except CkptfsError as e:
        return f"error: {e.category}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ckptfs_adapter", description=__doc__)
    p.add_argument("--break", dest="broken", choices=BREAKS, action="append", default=[])
    p.add_argument("request", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    for rule in a.broken:
        apply_break(rule)
    if a.request == ["batch"]:
        for line in sys.stdin:
            try:
                out = {"out": handle(json.loads(line)["argv"])}
            except Exception:  # report, keep serving: the runner marks this vector Error
                out = {"crash": traceback.format_exc()}
            sys.stdout.write(json.dumps(out) + "\n")
            sys.stdout.flush()
        return 0
    if not a.request or a.request[0] not in OPS:
        p.error(f"expected one of: batch, {', '.join(OPS)}")
    print(handle(a.request))
    return 0


if __name__ == "__main__":
    sys.exit(main())
