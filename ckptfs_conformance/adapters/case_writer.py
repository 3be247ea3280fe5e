"""Writer cases carried out by the reference adapter (the ``write CASE STORE`` request, README
"Writer cases"): the case's steps (start, checkpoint, resume, fork, effect, settle) run through
ckptfs's public API at the case's clock, into a format 2 store whose bytes are reproducible.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ckptfs.format.cdc import ChunkerParams
from ckptfs_conformance.render import untagged


class _Crash(BaseException):
    """Raised inside an effect to stop the process between intent and outcome."""


def write_case(case_path: str, store_dir: str, keyring: str | None = None) -> str:
    """Carry out a writer case (README "Writer cases") into an empty directory: a format 2
    store (the only one ckptfs writes) whose config takes no check window from the
    environment and whose packs carry the case's clock as ``created`` (the reference profile's
    bytes are then reproducible)."""
    import os

    window = os.environ.pop("CKPTFS_CHECK_WINDOW_MS", None)
    try:
        return _write_case(case_path, store_dir, keyring)
    finally:
        if window is not None:
            os.environ["CKPTFS_CHECK_WINDOW_MS"] = window


def _write_case(case_path: str, store_dir: str, keyring: str | None = None) -> str:
    """``write_case`` once the environment is set: open the store at the case's clock and
    writer name, run its steps with packs stamped at that clock; ``keyring``: an encrypted
    store with a new keyring in that folder (spec/encryption.md, op ``enc-write``)."""
    import types

    import ckptfs
    from ckptfs.store import containers as store_containers

    case = json.loads(Path(case_path).read_text())
    clock = {"now": 0}
    chunker = ChunkerParams(**{k2: case["chunker"][k1] for k1, k2 in (
        ("min", "min_size"), ("avg", "avg_size"), ("max", "max_size"),
        ("normalization", "normalization"))}) if case.get("chunker") else None
    store = ckptfs.open_store(store_dir, chunker=chunker, clock=lambda: clock["now"],
                              writer=case["writer"], keyring=keyring)
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
    """Carry out the case's steps in order, the clock set to each step's time."""
    from ckptfs.runtime.run import Run

    runs: dict[str, Run] = {}
    for step in case["steps"]:
        clock["now"] = step["time"]
        if step.get("refused"):  # the writer must (true) or may ("may") refuse it: go on
            try:
                _step(store, runs, step)
            except Exception:  # noqa: BLE001 - any refusal; what was committed is judged
                pass
            continue
        _step(store, runs, step)


def _step(store: Any, runs: dict[str, Any], step: dict[str, Any]) -> None:
    """Carry out one step of a case."""
    op = step["op"]
    if op == "start":
        runs[step["run"]] = store.start_run(
            step["run"], schema=(step["schema"]["name"], step["schema"]["version"]),
            **({"subject": step["subject"]} if "subject" in step else {}))
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
    """An ``effect`` step: run the effect with the outcome the case names (a result, an error,
    or a crash between intent and outcome, which leaves the intent in the ledger)."""
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
    """A checkpoint state value from the case: a plain value, a blob or a ref."""
    import ckptfs

    if "value" in v:
        return _as_typed_values(untagged(v["value"]))
    if "blob" in v:
        return ckptfs.Blob(bytes.fromhex(v["blob"]), type=v.get("type", "application/octet-stream"))
    r = v["ref"]
    return ckptfs.Ref(r["uri"], digest=r.get("digest"), size=r.get("size"),
                      expires_at=None if r.get("expires") is None else r["expires"] / 1000)


def _as_typed_values(v: Any) -> Any:
    """A case's typed values (tag 27 in tagged JSON) as ckptfs.TypedValue, the form an
    application hands ckptfs a typed value in: ckptfs lists ``typed-values`` for what its codecs
    turn into tag 27, and takes a ready-made tag as plain data (it then lists nothing; see
    writer_rules_manifest.typed_values_listed)."""
    import cbor2

    from ckptfs.format.typed import TypedValue, is_tagged

    if is_tagged(v):
        return TypedValue(v.value[0], _as_typed_values(v.value[1]))
    if type(v) is list:
        return [_as_typed_values(x) for x in v]
    if type(v) is dict:
        return {k: _as_typed_values(x) for k, x in v.items()}
    assert type(v) is not cbor2.CBORTag
    return v
