"""W4, many runs: runs that share a 200 KB system prompt and tool schemas, plus small unique data.

Also in an encrypted store, each run in its own key scope with the prompt and tool schemas
marked ``shared=`` (issue 33, spec/encryption.md 4.4): its size against the plaintext store's.

ckptfs stores equal chunks once across runs; the store's size is compared with the sum of the
runs' states and with one run's state plus the runs' unique data. SqliteSaver (one checkpoint
per run, same states) is measured beside it for scale.
"""

from __future__ import annotations

import os
import random
import time
from typing import Any

import cbor2

from bench import common
from bench.data import message, sentence_text

PROMPT_BYTES = 200_000


def shared_parts() -> dict[str, Any]:
    """The system prompt and tool schemas every run carries (identical across runs)."""
    rng = random.Random(42)
    tools = [{"name": f"tool_{k}", "description": sentence_text(rng, 300),
              "parameters": {"type": "object", "required": ["query"],
                             "properties": {f"p{j}": {"type": rng.choice(["string", "integer"]),
                                                      "description": sentence_text(rng, 80)}
                                            for j in range(5)}}}
             for k in range(24)]
    return {"system": sentence_text(rng, PROMPT_BYTES), "tools": tools}


def unique_parts(i: int) -> dict[str, Any]:
    """A run's own data: its task, a few messages and a small plan."""
    rng = random.Random(10_000 + i)
    return {"task": sentence_text(rng, 300), "messages": [message(k, seed=i + 1) for k in range(3)],
            "plan": {"step": rng.randint(0, 9), "todo": [sentence_text(rng, 60) for _ in range(3)]}}


def run(workdir: str, *, quick: bool) -> str:
    import ckptfs

    n_runs = 200 if quick else 1000
    shared = shared_parts()
    shared_size = len(cbor2.dumps(shared))
    store_path = os.path.join(workdir, "store")
    store = ckptfs.open_store(store_path)
    sum_states = unique_total = 0
    lat = []
    for i in range(n_runs):
        uniq = unique_parts(i)
        state = {**shared, **uniq}
        sum_states += len(cbor2.dumps(state))
        unique_total += len(cbor2.dumps(uniq))
        t0 = time.perf_counter()
        store.start_run(f"run-{i:05d}", schema=("agent", 1)).checkpoint(state)
        lat.append(time.perf_counter() - t0)
    store.close()
    size, du_kib, files = common.tree_size(store_path)
    one_state = shared_size + unique_total / n_runs
    # SqliteSaver with the same states, one checkpoint per run (thread)
    sq = sqlite_size(workdir, n_runs, shared)
    f = common.fmt
    bound = one_state + unique_total
    rows = [
        ["runs", str(n_runs)],
        ["shared part (system prompt + tool schemas), CBOR", f"{f(shared_size / 1e3)} KB"],
        ["sum of the runs' states (CBOR)", f"{f(sum_states / 1e6)} MB"],
        ["one run's state + all runs' unique data", f"{f(bound / 1e6, 3)} MB"],
        ["ckptfs store, sum of file sizes", f"{f(size / 1e6, 3)} MB ({files} files)"],
        ["ckptfs store, `du`", f"{f(du_kib * 1024 / 1e6, 3)} MB"],
        ["ckptfs store / sum of states", f"{f(size / sum_states, 4)}x"],
        ["ckptfs commit latency per run (mean / p99)",
         f"{f(common.mean(lat) * 1000)} / {f(common.pct(lat, 99) * 1000)} ms"],
        ["SqliteSaver, same states (one checkpoint per thread)", f"{f(sq / 1e6, 3)} MB"],
        ["ckptfs / SqliteSaver", f"{f(size / sq, 4)}x" if sq else "n/a"],
    ]
    ratio = size / bound
    tgt = [["store <= 1.2x (one run's state + the runs' unique data)",
            f"{f(ratio, 3)}x (sum of files); du: {f(du_kib * 1024 / bound, 3)}x",
            common.verdict(ratio, 1.2)]]
    enc = encrypted(workdir, n_runs, shared)
    enc_ratio = enc["size"] / size
    rows += [
        ["encrypted store, shared=('system', 'tools'), each run in its own key scope",
         f"{f(enc['size'] / 1e6, 3)} MB ({enc['files']} files)"],
        ["encrypted (shared) / plaintext store size", f"{f(enc_ratio, 3)}x"],
        ["encrypted commit latency per run (mean / p99)",
         f"{f(common.mean(enc['lat']) * 1000)} / {f(common.pct(enc['lat'], 99) * 1000)} ms "
         f"({f(common.mean(enc['lat']) / common.mean(lat), 2)}x plaintext's mean)"],
        [f"encrypted without shared=, first {enc['apart_runs']} runs: bytes per run",
         f"{f(enc['apart_size'] / enc['apart_runs'] / 1e3)} KB (plaintext: "
         f"{f(size / n_runs / 1e3)} KB per run)"],
    ]
    tgt.append(["encrypted store with the prompt marked shared <= 1.2x the plaintext store "
                "(issue 33)", f"{f(enc_ratio, 3)}x", common.verdict(enc_ratio, 1.2)])
    md = ("# W4: many runs sharing a system prompt and tool schemas\n\n"
          + common.machine_md({"mode": "quick" if quick else "full"})
          + "\nEach run checkpoints once: the shared 200 KB system prompt and 24 tool schemas, "
            "plus its own task, 3 messages and a plan (~3.8 KB). Sizes are of CBOR encodings "
            "(before ckptfs's zstd).\n\n"
          + common.table(["quantity", "value"], rows)
          + "\n## Targets (issue 9)\n\n" + common.table(["target", "measured", "verdict"], tgt))
    common.write_result("w4" + ("-quick" if quick else ""), md)
    return md


def encrypted(workdir: str, n_runs: int, shared: dict[str, Any]) -> dict[str, Any]:
    """The same runs in an encrypted store (spec/encryption.md 4.4): each run in a key scope
    of its own, the prompt and tool schemas marked ``shared=``; and, for scale, the first
    runs again without ``shared=`` (each run then stores its own sealed copy)."""
    import ckptfs

    out: dict[str, Any] = {"lat": []}
    store = ckptfs.open_store(os.path.join(workdir, "enc"),
                              keyring=os.path.join(workdir, "enc-keyring"))
    for i in range(n_runs):
        state = {**shared, **unique_parts(i)}
        t0 = time.perf_counter()
        store.start_run(f"run-{i:05d}", schema=("agent", 1)).checkpoint(
            state, shared=tuple(shared))
        out["lat"].append(time.perf_counter() - t0)
    store.close()
    out["size"], _, out["files"] = common.tree_size(os.path.join(workdir, "enc"))
    apart = ckptfs.open_store(os.path.join(workdir, "enc-apart"),
                              keyring=os.path.join(workdir, "enc-apart-keyring"))
    out["apart_runs"] = min(n_runs, 50)
    for i in range(out["apart_runs"]):
        apart.start_run(f"run-{i:05d}", schema=("agent", 1)).checkpoint(
            {**shared, **unique_parts(i)})
    apart.close()
    out["apart_size"] = common.tree_size(os.path.join(workdir, "enc-apart"))[0]
    return out


def sqlite_size(workdir: str, n_runs: int, shared: dict[str, Any]) -> int:
    """Size of a SqliteSaver db holding one checkpoint per run with the same states."""
    try:
        from langgraph.checkpoint.base import empty_checkpoint
        from langgraph.checkpoint.sqlite import SqliteSaver
    except ImportError:
        return 0
    import sqlite3

    path = os.path.join(workdir, "sqlite")
    os.makedirs(path)
    conn = sqlite3.connect(os.path.join(path, "c.sqlite"), check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    for i in range(n_runs):
        c = empty_checkpoint()
        c["channel_values"] = {**shared, **unique_parts(i)}
        c["channel_versions"] = {k: 1 for k in c["channel_values"]}
        saver.put({"configurable": {"thread_id": f"run-{i}", "checkpoint_ns": ""}}, c,
                  {"source": "input", "step": 0, "parents": {}}, c["channel_versions"])
    conn.close()
    return common.tree_size(path)[0]
