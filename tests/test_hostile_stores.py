"""The hostile-store corpus (issue 13): someone hands you a store; every reader entry point must
fail cleanly.

Each hostile store is a copy of one real valid store with one object or folder replaced (see
tests/hostile_corpus.py). A child process (tests/hostile_child.py) runs every public entry point
against a batch of stores, each call with a timeout (no hang), under an RLIMIT_AS memory cap (no
unbounded memory) and with an audit hook that records every file accessed outside the store;
the decoy folder outside each store is compared byte for byte (and by mtime) before and after.
Every failure must be a ckptfs.errors exception (CLI: a documented exit code, no traceback).

The default run takes one object of each kind, every CLI command but the heavy ones in process
on every store, and every CLI command in its own process on a sample of stores; set
CKPTFS_HOSTILE_FULL=1 for every object of the store, every CLI command in process on every
store, and in its own process on one store of each (kind, mutation).
``python -m tests.test_hostile_stores [--full]`` prints the figures for RELIABILITY.md.

The store is format v2 (run records that carry manifests and bodies, packs, a forward, a head
hint, the next record's path): ckptfs writes no other layout. Hostile version 1 stores are
the conformance suite's frozen store-invalid vectors.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import pytest

from tests import hostile_corpus as hc


FULL = os.environ.get("CKPTFS_HOSTILE_FULL") == "1"
MEM_CAP = 3 << 30  # RLIMIT_AS of each child: a 6 GiB read or assembly cannot fit
CALL_TIMEOUT = 20.0  # seconds per API call; valid calls take well under a second
CLI_TIMEOUT = 60.0
STORES_PER_CHILD = 12
#: the stores the CLI is also run on in the default suite (all of them with FULL)
CLI_SAMPLE = {("config", "fifo"), ("manifest", "sparse-6GiB"), ("folder", "file")}
#: the CLI commands run in process on every store in the default suite (all with FULL): those
#: whose work the API entry points do not already repeat (copy, export, check, du do)
CLI_IN_PROCESS = ["ls", "log", "show", "cat", "effects", "verify"]
PARALLEL = 2  # children at a time


def _cli_for(case: hc.Case, full: bool, seen: set[tuple[str, str]]) -> bool:
    """Whether the CLI also runs in its own processes on this store: on the first store of
    each sampled (kind, mutation); with FULL, on the first store of every pair."""
    key = (case.kind, case.mutation)
    if (full or key in CLI_SAMPLE) and key not in seen:
        seen.add(key)
        return True
    return False


def run_corpus(tmp: str, *, full: bool, timeout: float = CALL_TIMEOUT,
               with_control: bool = True, only: Callable[[hc.Case], bool] | None = None,
               cli: bool | None = None) -> tuple[list[dict[str, Any]], list[hc.Case]]:
    """Build the corpus under ``tmp`` and run it;
    one result row per call. ``only``: the cases to run (all by default); ``cli``: run the
    CLI in its own processes on every store (True), on none (False), or on the sample."""
    base = os.path.join(tmp, "base")
    facts = hc.build_base(base)
    cases = [c for c in hc.cases(base, facts, full=full) if only is None or only(c)]
    if with_control:
        cases.insert(0, hc.Case("control", "-", "none"))
    jobs: list[dict[str, Any]] = []
    decoys: dict[str, tuple[str, dict[str, Any]]] = {}
    seen: set[tuple[str, str]] = set()
    for i, case in enumerate(cases):
        store = os.path.join(tmp, f"s{i}", "store")
        outside = os.path.join(tmp, f"s{i}", "outside")
        scratch = os.path.join(tmp, f"s{i}", "scratch")
        os.makedirs(scratch)
        if case.kind == "control":
            import shutil

            shutil.copytree(base, store, symlinks=True)
            os.makedirs(outside)
        else:
            hc.make(base, case, store, outside)
        decoys[case.name] = (outside, hc.snapshot_tree(outside))
        jobs.append({"case": case.name, "store": store, "scratch": scratch,
                     "cli": (_cli_for(case, full, seen) or case.kind == "control")
                     if cli is None else cli})
    from tests.hostile_child import CLI_COMMANDS

    in_process = [n for n, _ in CLI_COMMANDS] if full else CLI_IN_PROCESS

    def child(k: int) -> list[dict[str, Any]]:
        """Run the batch of stores ``k``; a child that reports nothing for longer than a call
        may take (a call blocked where the timer cannot interrupt it, in a worker thread) is
        killed, that call is recorded as a hang, and a new child goes on after it."""
        batch = [dict(j) for j in jobs[k:k + STORES_PER_CHILD]]
        order = _call_names(in_process)
        got: list[dict[str, Any]] = []
        for attempt in range(len(batch) * len(order) + 1):
            spec = os.path.join(tmp, f"spec-{k}-{attempt}.json")
            out = os.path.join(tmp, f"out-{k}-{attempt}.jsonl")
            with open(spec, "w") as f:
                json.dump({"mem": MEM_CAP, "timeout": timeout, "cli_timeout": CLI_TIMEOUT,
                           "facts": facts, "stores": batch, "cli_in_process": in_process}, f)
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
            proc = subprocess.Popen([sys.executable, "-m", "tests.hostile_child", spec, out],
                                    env=env, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
            blocked = _watch(proc, out, timeout + 30, CLI_TIMEOUT + 30)
            new = _read_rows(out)
            got += new
            if not blocked:
                break
            done = {(r["case"], _call_name(r)) for r in got}
            for job in batch:  # the first call not reported is the one that blocked
                names = [n for n in order if n.startswith("cli-process ") <= job["cli"]]
                left = [n for n in names if (job["case"], n) not in done]
                if left:
                    kind, _, name = left[0].partition(" ") if left[0].startswith("cli") else ("api", "", left[0])
                    got.append({"case": job["case"], kind: name, "outcome": "hang",
                                "outside": []})
                    done.add((job["case"], left[0]))
                    break
            batch = [dict(j, skip=[n for c, n in done if c == j["case"]]) for j in batch
                     if any((j["case"], n) not in done for n in order
                            if n.startswith("cli-process ") <= j["cli"])]
            if not batch:
                break
        return got

    from concurrent.futures import ThreadPoolExecutor

    rows: list[dict[str, Any]] = []
    with ThreadPoolExecutor(PARALLEL) as pool:
        for got in pool.map(child, range(0, len(jobs), STORES_PER_CHILD)):
            rows += got
    for name, (outside, before) in decoys.items():
        after = hc.snapshot_tree(outside)
        if after != before:
            changed = sorted(set(before) ^ set(after)
                             | {p for p in before if p in after and before[p] != after[p]})
            rows.append({"case": name, "api": "(decoy)", "outcome": "ok",
                         "outside": [f"write (decoy changed) {p}" for p in changed]})
    return rows, cases


def _call_names(in_process: list[str]) -> list[str]:
    """Every call a child makes on one store, in its order, as ``_call_name`` names them."""
    from tests.hostile_child import CLI_COMMANDS, entry_points

    api = list(entry_points("x", "x", {"head_id": ""}))
    return (api + [f"cli {n}" for n, _ in CLI_COMMANDS if n in in_process]
            + [f"cli-process {n}" for n, _ in CLI_COMMANDS])


def _call_name(row: dict[str, Any]) -> str:
    for k in ("cli", "cli-process"):
        if k in row:
            return f"{k} {row[k]}"
    return str(row["api"])


def _read_rows(path: str) -> list[dict[str, Any]]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.endswith("\n")]


def _watch(proc: subprocess.Popen[bytes], out: str, api_wait: float, cli_wait: float) -> bool:
    """Wait for ``proc``; kill it (by its pid, it is our child) and return True when its output
    file stops growing for longer than a call may take."""
    import time

    size, since = -1, time.monotonic()
    while proc.poll() is None:
        time.sleep(0.2)
        now_size = os.path.getsize(out) if os.path.exists(out) else 0
        if now_size != size:
            size, since = now_size, time.monotonic()
        elif time.monotonic() - since > max(api_wait, cli_wait):
            proc.kill()
            proc.wait()
            return True
    return False


def bad(row: dict[str, Any]) -> bool:
    o = row["outcome"]
    return (not (o in ("ok", "problems") or o.startswith("error:"))) or bool(row["outside"])


def summarize(rows: list[dict[str, Any]], cases: list[hc.Case]) -> dict[str, int]:
    calls = [r for r in rows if r.get("api") not in ("(decoy)",)]
    c = collections.Counter()
    for r in calls:
        o = r["outcome"]
        c["calls"] += 1
        c["api calls" if "api" in r else "cli calls (in process)" if "cli" in r
          else "cli calls (own process)"] += 1
        if o.startswith("escape"):
            c["escapes"] += 1
        elif o in ("hang", "oom", "crash"):
            c[{"hang": "hangs", "oom": "out of memory", "crash": "child crashes"}[o]] += 1
    for r in rows:
        for h in r["outside"]:
            c["outside writes" if h.startswith("write") else "outside reads"] += 1
    c["stores"] = len(cases)
    c["entry points"] = len({r.get("api") or "cli " + (r.get("cli") or r["cli-process"])
                             for r in calls if r.get("api") != "(child)"})
    return dict(c)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory
           ) -> tuple[list[dict[str, Any]], list[hc.Case]]:
    """The corpus (a format v2 store, the only layout ckptfs writes)."""
    return run_corpus(str(tmp_path_factory.mktemp("hostile-v2")), full=FULL)


@pytest.mark.timeout(1800)
def test_valid_store_passes_every_entry_point(corpus: Any) -> None:
    """The control: the unmodified store passes every API and CLI entry point."""
    rows, _ = corpus
    ctrl = [r for r in rows if r["case"].startswith("control")]
    wrong = [r for r in ctrl if r["outcome"] != "ok" or r["outside"]]
    assert ctrl and not wrong, wrong


@pytest.mark.timeout(1800)
def test_hostile_stores_fail_cleanly(corpus: Any) -> None:
    rows, cases = corpus
    failures = [r for r in rows if bad(r)]
    summary = summarize(rows, cases)
    assert summary["stores"] >= 80 and summary["entry points"] >= 30, summary
    assert not failures, (summary, failures[:40])


#: the entry points of issue 30 (defect 5): read, resume, log, listing, verify (and with
#: --read-data), export, copy, gc, erase, forget, head, snapshots and a checkpoint
BOMB_ENTRY_POINTS = {"read-head", "resume", "log", "ls", "verify", "verify-read-data", "export",
                     "copy-out", "gc", "erase", "forget", "snapshots", "head", "checkpoint"}


@pytest.mark.timeout(1800)
def test_item_bombs_fail_cleanly_at_every_entry_point(corpus: Any) -> None:
    """The decoded-item bombs (issue 30, defect 5: hostile_corpus.BOMBS_V2 / BOMBS_V1) at
    every entry point: a clean answer within the call timeout and the memory cap (before the
    fix: hangs and MemoryError at read, log, ls, verify, export, copy, gc and erase); where the
    bomb is in the head snapshot (its record's header or its manifest), reading, resuming and
    the head are ``corrupt`` (a reader never falls back to an older record)."""
    rows, cases = corpus
    bombs = {c.name: c.mutation for c in cases if c.mutation.startswith("item-bomb")}
    v2 = any(m == "item-bomb-record" for m in bombs.values())
    assert set(bombs.values()) == set(hc.BOMBS_V2 if v2 else hc.BOMBS_V1)
    got = [r for r in rows if r["case"] in bombs]
    assert BOMB_ENTRY_POINTS <= {r.get("api") for r in got}
    assert not [r for r in got if bad(r)], [r for r in got if bad(r)]
    head = {"item-bomb-record", "item-bomb-manifest", "item-bomb-deep", "item-bomb-map"}
    for r in got:
        if bombs[r["case"]] in head and r.get("api") in ("read-head", "resume", "head"):
            assert r["outcome"] == "error:corrupt", r


def main() -> None:
    full = "--full" in sys.argv
    global CLI_TIMEOUT
    timeout = 5.0 if "--quick-timeout" in sys.argv else CALL_TIMEOUT
    if "--quick-timeout" in sys.argv:
        CLI_TIMEOUT = 20.0
    with tempfile.TemporaryDirectory() as tmp:
        rows, cases = run_corpus(tmp, full=full, timeout=timeout)
    print(json.dumps(summarize(rows, cases), indent=2, sort_keys=True))
    by = collections.Counter()
    for r in rows:
        if bad(r):
            kind, _, mut = r["case"].partition(":")[0], None, r["case"].rsplit(":", 1)[1]
            o = r["outcome"].split(":")[0] if not r["outside"] else "outside"
            by[(kind, mut, o)] += 1
    for k, v in sorted(by.items()):
        print(*k, v)
    with open(os.environ.get("HOSTILE_ROWS", "/dev/null"), "w") as f:
        for r in rows:
            if bad(r):
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
