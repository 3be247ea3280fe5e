"""The conformance adapter for ckptfs itself: the protocol of conformance/README.md over argv
and stdout, or many requests at once with ``batch`` (one JSON request per stdin line).

``--break RULE`` makes a deliberately broken reader (the suite must catch it):
``accept-non-canonical``, ``skip-digests``, ``ignore-required``, ``ignore-retired`` (serve
records in retired ranges), ``ignore-tombstones`` (as if nothing had been erased),
``ignore-expiry-overrides`` (only the manifest's ``expires`` counts), ``ignore-lease-deadline``
(an effect intent's lease never runs: every intent is in doubt at once, as in v1).
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
from ckptfs.store import repository
from conformance import render
from conformance.render import canonical_json, render_ref, render_store, tagged, untagged

BREAKS = ("accept-non-canonical", "skip-digests", "ignore-required", "ignore-retired",
          "ignore-tombstones", "ignore-expiry-overrides", "ignore-lease-deadline",
          *("v2-" + r for r in ("trust-head-hint", "skip-header-digest", "lenient-body-table",
                                "no-forwards", "unbounded-forwards", "no-loose-fallback")))


def apply_break(rule: str) -> None:
    """Flip one rule of the reader, for testing that the suite notices."""
    if rule == "accept-non-canonical":
        strict = cbor.decode

        def lenient(data: Any, *, what: str, allow_bignum: bool = False,
                    check_canonical: bool = True) -> Any:
            return strict(data, what=what, allow_bignum=allow_bignum, check_canonical=False)

        cbor.decode = lenient
    elif rule == "skip-digests":
        Digest.__ne__ = lambda self, other: False  # type: ignore[method-assign]
    elif rule == "ignore-required":
        models.check_features = lambda required, what: tuple(required or ())
    elif rule == "ignore-retired":  # every record counts: strays are served
        setattr(repository, "read_retired", lambda storage, run_id: None)
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
    else:
        raise SystemExit(f"unknown --break rule {rule!r}; known: {', '.join(BREAKS)}")


def _break_v2(rule: str) -> None:
    """Flip one reader rule of spec/v2.md (section in brackets)."""
    from ckptfs.format import containers as ct
    from ckptfs.store import containers as sc

    if rule == "trust-head-hint":  # [4] the hint is taken as the head, unchecked
        from ckptfs.store.records import read_hint

        def head(self: repository.Repository, run_id: str) -> Any:
            hint = read_hint(self.storage, run_id)
            return self.record(run_id, hint.seq) if hint is not None else real_head(self, run_id)

        def parse(cls: Any, data: bytes, run: str) -> Any:
            m = cbor.decode(data[:-ct.HINT_CHECK], what="hint", check_canonical=False)
            return cls(run, m["seq"], Digest(m["snapshot"]), m["written"])

        real_head = repository.Repository.head
        setattr(repository.Repository, "head", head)
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


class _Crash(BaseException):
    """Raised inside an effect to stop the process between intent and outcome."""


def write_case(case_path: str, store_dir: str) -> str:
    """Carry out a writer case (README "Writer cases") into an empty directory: a format 1
    store, whatever the default layout of new stores (the writer vectors are format 1)."""
    import os

    before = os.environ.get("CKPTFS_FORMAT_VERSION")
    os.environ["CKPTFS_FORMAT_VERSION"] = "1"
    try:
        return _write_case(case_path, store_dir)
    finally:
        if before is None:
            del os.environ["CKPTFS_FORMAT_VERSION"]
        else:
            os.environ["CKPTFS_FORMAT_VERSION"] = before


def _write_case(case_path: str, store_dir: str) -> str:
    import ckptfs
    from ckptfs.runtime.run import Run

    case = json.loads(Path(case_path).read_text())
    clock = {"now": 0}
    chunker = ChunkerParams(**{k2: case["chunker"][k1] for k1, k2 in (
        ("min", "min_size"), ("avg", "avg_size"), ("max", "max_size"),
        ("normalization", "normalization"))}) if case.get("chunker") else None
    store = ckptfs.open_store(store_dir, chunker=chunker, clock=lambda: clock["now"],
                              writer=case["writer"])
    from conformance.gen_commit import reproducible_nonces

    store.repo.nonce = reproducible_nonces()  # the reference profile: reproducible bytes
    if "owner" in case:  # the owner its effect intents name (spec/ledger.md "Leases")
        from ckptfs.runtime.effects import set_process_owner

        set_process_owner(case["owner"])
    if "settings" in case:  # created at the first step's time with these settings
        clock["now"] = case["steps"][0]["time"]
        store.init(settings=untagged(case["settings"]))
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
    store.close()
    return "ok"


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
    "cbor-decode": lambda f: canonical_json(tagged(cbor.decode(_read(f), what="input"))),
    "value-decode": lambda f: canonical_json(tagged(cbor.decode(
        _read(f), what="value", allow_bignum=True, check_canonical=False))),
    "cbor-encode": lambda f: cbor.encode(untagged(json.loads(_read(f)))).hex(),
    "typed-roundtrip": lambda f: _typed_roundtrip(_read(f), "error"),
    "typed-roundtrip-raw": lambda f: _typed_roundtrip(_read(f), "raw"),
    "unframe": lambda f, size: framing.unframe(_read(f), int(size), what="object").hex(),
    "cut": lambda mn, avg, mx, nc, f: json.dumps(cut_lengths(_read(f), ChunkerParams(
        min_size=int(mn), avg_size=int(avg), max_size=int(mx), normalization=int(nc)))),
    "read": lambda store, now: canonical_json(render_store(store, int(now))),
    "snapshot": lambda store, now, ref: canonical_json(render_ref(store, ref, int(now))),
    "write": write_case,
    "lease": lambda f, now: _lease(_read(f), int(now)),
}


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
