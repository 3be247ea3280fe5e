"""The local commit floor of issue 14 next to candidate v2 commit shapes and v1's commit.

``python -m bench.v2_floor [--steps N] [--rounds R] [--no-strace]``: one run, one machine, same
disk, interleaved rounds; writes ``bench/results/v2_floor.md``. CPU-light on purpose (a few
hundred small files per case and round).

Cases (each commits ``steps`` times into a fresh directory):

* ``floor``: the issue's floor: one 4 KiB file written, fsynced, linked create-only (``link(2)``)
  into a folder, the folder fsynced. 2 fsyncs. The temp file is unnamed (``O_TMPFILE``, linked
  with ``linkat``), as ckptfs's local backend writes; ``floor-named`` is the same with a named
  temp file that is unlinked after the link (its create and unlink are extra directory changes
  the journal must carry). Ratios divide by ``floor``.
* ``v2-record``: the proposed common v2 commit (spec/proposals/format-v2.md section 3): one
  create-only record file ``runs/R/<seq:20>`` of realistic W1 size (header with the manifest
  delta, the snapshot id computed over cached canonical manifest bytes, a chunk table and the
  appended ~1 KB message as one framed body), then its folder fsynced. 2 fsyncs.
* ``v2-record+hint``: the same plus the local head hint ``runs/R/head`` replaced by rename
  without fsync (a hint may be stale or lost; readers check it forward). 2 fsyncs.
* ``v2-record+hint-pwrite``: the same, but the hint is a fixed 64-byte slot overwritten in place
  with ``pwrite`` (no rename: on ext4 a rename over an existing file starts write-out of the new
  file's data, ``auto_da_alloc``, which the next fsync then waits for). 2 fsyncs.
* ``v2-record+pack``: bulk content in a separate pack written before the record: fsync(pack
  temp) and fsync(record temp) in parallel, link the pack, fsync ``packs/<xx>/``, link the
  record, fsync the run folder. 4 fsyncs, 3 serial waits. (What a commit would cost if bulk
  content did not go into the record.)
* ``v1-api``: ckptfs v1 through its API, ``run.checkpoint({"messages": msgs})`` appending one
  W1 message per step (the state grows from 0 to ``steps`` messages).

fsyncs are counted by wrapping ``os.fsync`` (every case issues them from Python) and, unless
``--no-strace``, confirmed by re-running each case in a fresh process under ``strace -f -c``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import blake3
import cbor2

from bench import common
from bench.data import message

@functools.lru_cache(maxsize=2)
def _messages(n: int) -> tuple[dict[str, Any], ...]:
    """The first ``n`` W1 messages, generated once per process (about 1.4 ms each)."""
    return tuple(message(i) for i in range(n))


CASES = ("floor", "floor-named", "v2-record", "v2-record+hint", "v2-record+hint-pwrite", "v2-record+pack",
         "v1-api")
_POOL = ThreadPoolExecutor(max_workers=2)


def _fsync_dir(d: str) -> None:
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_PROC_FD = -1


def _stage(tmpdir: str, data: bytes, *, named: bool = False) -> tuple[str, int]:
    """A temp file holding ``data`` (not yet fsynced): unnamed (``O_TMPFILE``, as ckptfs's local
    backend writes) unless ``named`` or unavailable; a linkable path and the open descriptor."""
    fd = -1
    tmp = ""
    if not named and hasattr(os, "O_TMPFILE"):
        try:
            fd = os.open(tmpdir, os.O_TMPFILE | os.O_WRONLY, 0o644)
            tmp = f"/proc/self/fd/{fd}"
        except OSError:
            fd = -1
    if fd < 0:
        tmp = os.path.join(tmpdir, secrets.token_hex(8))
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    return tmp, fd


def _link(tmp: str, fd: int, final: str) -> None:
    """Create-only: link(2)/linkat(2) fails with EEXIST when ``final`` exists."""
    global _PROC_FD
    try:
        if tmp.startswith("/proc/self/fd/"):
            if _PROC_FD < 0:
                _PROC_FD = os.open("/proc/self/fd", os.O_RDONLY | os.O_DIRECTORY)
            os.link(tmp.rsplit("/", 1)[1], final, src_dir_fd=_PROC_FD, follow_symlinks=True)
        else:
            os.link(tmp, final)
    finally:
        os.close(fd)
        if not tmp.startswith("/proc/"):
            os.unlink(tmp)


class Floor:
    """One 4 KiB file, fsynced, linked create-only into a folder, folder fsynced."""

    def __init__(self, root: str, *, named: bool = False) -> None:
        self.tmp = os.path.join(root, "tmp")
        self.dir = os.path.join(root, "objects")
        os.makedirs(self.tmp)
        os.makedirs(self.dir)
        self.data = os.urandom(4096)
        self.named = named

    def step(self, i: int, msg: dict[str, Any]) -> None:
        tmp, fd = _stage(self.tmp, self.data, named=self.named)
        os.fsync(fd)
        _link(tmp, fd, os.path.join(self.dir, f"{i:020d}"))
        _fsync_dir(self.dir)


class RecordWriter:
    """A plausible v2 W1 record: what the proposal's common commit writes, built with the CPU
    work it implies (canonical CBOR of the new message, BLAKE3 of the body and of the manifest
    bytes assembled from cached parts)."""

    def __init__(self) -> None:
        self.nonce_run = secrets.token_bytes(8)
        self.sealed: list[bytes] = []      # encoded chunk refs of the unchanged prefix (cached)
        self.prev_id = b"\0" * 32
        self.base = (1, b"\0" * 32)
        self.prefix = cbor2.dumps({"format": 2, "run": "bench", "writer": "bench"}, canonical=True)

    def record(self, i: int, msg: dict[str, Any],
               pack_ref: tuple[bytes, int] | None = None) -> bytes:
        body_raw = cbor2.dumps(msg, canonical=True)
        body = b"\x00" + body_raw                      # codec byte + raw payload (v1 framing)
        d = blake3.blake3(body_raw).digest()
        ref = cbor2.dumps([d, len(body_raw)], canonical=True)
        self.sealed.append(ref)
        tail = self.sealed[-30:]                       # size-tiered compaction keeps <= 30 open
        # manifest bytes from cached parts: one join and one hash, no re-encoding of the state
        # (a stand-in: one ref per message, so the join grows like a real chunk list would)
        manifest = (self.prefix + cbor2.dumps(len(self.sealed), canonical=True)
                    + b"".join(self.sealed))
        snap = blake3.blake3(manifest).digest()
        header = {
            "format": 2, "run": "bench", "seq": i + 1, "snapshot": snap, "size": len(manifest),
            "created": int(time.time() * 1000), "nonce": self.nonce_run + i.to_bytes(8, "big"),
            "base": [self.base[0], self.base[1]],
            "head": {"boundary": "step", "parent": self.prev_id, "attempt": 1, "labels": {},
                     "expires": None},
            "entries": {"messages": {"keep": max(0, len(self.sealed) - len(tail)),
                                     "tail": [cbor2.loads(r) for r in tail],
                                     "size": 990 * (i + 1), "digest": d}},
            "bodies": [[d, 0, len(body), len(body_raw)]],
        }
        if pack_ref is not None:
            header["locators"] = [[pack_ref[0], pack_ref[1], 0, 16385]]
        h = cbor2.dumps(header, canonical=True)
        self.prev_id = snap
        return b"CKPTREC2" + len(h).to_bytes(4, "big") + h + body


class V2Record:
    def __init__(self, root: str, *, hint: str = "", pack: bool = False) -> None:
        self.root = root
        self.tmp = os.path.join(root, "tmp")
        self.run = os.path.join(root, "runs", "bench")
        os.makedirs(self.tmp)
        os.makedirs(self.run)
        self.hint = hint
        self.pack = pack
        self.rec = RecordWriter()
        if pack:
            self.packs = os.path.join(root, "packs")
            os.makedirs(self.packs)
            self.pack_body = os.urandom(16384)         # one merged 16 KiB chunk per commit

    def step(self, i: int, msg: dict[str, Any]) -> None:
        if not self.pack:
            data = self.rec.record(i, msg)
            tmp, fd = _stage(self.tmp, data)
            os.fsync(fd)
            _link(tmp, fd, os.path.join(self.run, f"{i + 1:020d}"))
            _fsync_dir(self.run)
        else:
            pack_data = b"CKPTPAK2" + b"\x00" + self.pack_body + i.to_bytes(8, "big")
            pid = blake3.blake3(pack_data).digest()[:16]
            data = self.rec.record(i, msg, (pid, 12))
            ptmp, pfd = _stage(self.tmp, pack_data)
            rtmp, rfd = _stage(self.tmp, data)
            list(_POOL.map(os.fsync, [pfd, rfd]))      # one round: both files durable
            pdir = os.path.join(self.packs, pid.hex()[:2])
            os.makedirs(pdir, exist_ok=True)
            _link(ptmp, pfd, os.path.join(pdir, pid.hex()))
            _fsync_dir(pdir)                           # pack name durable before the record
            _link(rtmp, rfd, os.path.join(self.run, f"{i + 1:020d}"))
            _fsync_dir(self.run)
        hint = cbor2.dumps({"run": "bench", "seq": i + 1}, canonical=True)
        if self.hint == "rename":
            h = os.path.join(self.run, ".head.tmp")
            with open(h, "wb") as f:
                f.write(hint)
            os.replace(h, os.path.join(self.run, "head"))  # no fsync: a hint may be lost
        elif self.hint == "pwrite":
            # overwrite a fixed-size slot in place (no rename, no truncate, no fsync): a torn
            # or lost hint is possible and harmless (it carries its own check; readers verify)
            if not hasattr(self, "_hint_fd"):
                self._hint_fd = os.open(os.path.join(self.run, "head"),
                                        os.O_WRONLY | os.O_CREAT, 0o644)
            slot = hint + blake3.blake3(hint).digest()[:8]
            os.pwrite(self._hint_fd, slot.ljust(64, b"\0"), 0)


class V1Api:
    """ckptfs v1 through its public API, W1: one message appended per checkpoint."""

    def __init__(self, root: str) -> None:
        import ckptfs

        self.store = ckptfs.open_store(root)
        self.run = self.store.start_run("bench", schema=("chat", 1))
        self.msgs: list[dict[str, Any]] = []

    def step(self, i: int, msg: dict[str, Any]) -> None:
        self.msgs.append(msg)
        self.run.checkpoint({"messages": self.msgs})


def make(case: str, root: str) -> Any:
    makers: dict[str, Callable[[], Any]] = {
            "floor": lambda: Floor(root),
            "floor-named": lambda: Floor(root, named=True),
            "v2-record": lambda: V2Record(root),
            "v2-record+hint": lambda: V2Record(root, hint="rename"),
            "v2-record+hint-pwrite": lambda: V2Record(root, hint="pwrite"),
            "v2-record+pack": lambda: V2Record(root, pack=True),
            "v1-api": lambda: V1Api(root)}
    return makers[case]()


def run_case(case: str, steps: int, root: str) -> dict[str, Any]:
    """Commit ``steps`` times; per-step wall and CPU ms, Python-level fsyncs, tree size."""
    msgs = _messages(steps)  # generated outside the timed steps
    obj = make(case, root)
    counter = common.FsyncCounter().install()
    lat: list[float] = []
    cpu: list[float] = []
    try:
        for i in range(steps):
            t0, c0 = time.perf_counter(), time.process_time()
            obj.step(i, msgs[i])
            lat.append((time.perf_counter() - t0) * 1000)
            cpu.append((time.process_time() - c0) * 1000)
    finally:
        counter.uninstall()
    if case == "v1-api":
        obj.store.close()
    total, du_kib, files = common.tree_size(root)
    return {"lat": lat, "cpu": cpu, "fsyncs": counter.count / steps, "bytes": total,
            "du_kib": du_kib, "files": files}


def append_cpu(n_msgs: int, refs: int, repeats: int = 5) -> dict[str, float]:
    """CPU of one append step at ``n_msgs`` messages (issue 14: 0.56 s at 200,000), v1 vs v2.

    v1: what ``EntryWriter._value`` does to learn what changed: ``cbor2.dumps`` of the whole
    list (its fast, non-canonical pass) and a prefix comparison with the previous encoding.
    v2 (proposal section 3.3): canonical encoding of the one new item, its BLAKE3, an
    incremental BLAKE3 of the entry content (hasher copy), and the manifest bytes assembled
    from ``refs`` cached chunk-reference encodings plus one BLAKE3 over them (the snapshot id).
    Medians of ``repeats``, in ms."""
    msgs = list(_messages(n_msgs))
    prev = cbor2.dumps(msgs[:-1])
    v1 = []
    for _ in range(repeats):
        t0 = time.process_time()
        b = cbor2.dumps(msgs)
        b[1:].startswith(prev[1:])
        v1.append((time.process_time() - t0) * 1000)
    cached = [cbor2.dumps([os.urandom(32), 65536], canonical=True) for _ in range(refs)]
    head = cbor2.dumps({"format": 1, "run": "bench", "writer": "bench"}, canonical=True)
    content_state = blake3.blake3(os.urandom(1 << 20))
    v2 = []
    for _ in range(repeats):
        t0 = time.process_time()
        item = cbor2.dumps(msgs[-1], canonical=True)
        d = blake3.blake3(item).digest()
        h = content_state.copy()
        h.update(item)
        h.digest()
        tail = cbor2.dumps([d, len(item)], canonical=True)
        manifest = head + cbor2.dumps(refs + 1, canonical=True)[:9] + b"".join(cached) + tail
        blake3.blake3(manifest).digest()
        v2.append((time.process_time() - t0) * 1000)
    return {"n_msgs": n_msgs, "refs": refs, "manifest_kib": len(manifest) / 1024,
            "v1_ms": common.median(v1), "v2_ms": common.median(v2)}


def strace_fsyncs(case: str, steps: int, workdir: str) -> float | None:
    """fsync-family calls per step for ``case`` in a fresh process under ``strace -f -c``."""
    if not common.have_strace():
        return None
    out = os.path.join(workdir, f"strace-{case}.txt")
    root = os.path.join(workdir, f"strace-{case}")
    cmd = ["strace", "-f", "-c", "-e", "trace=fsync,fdatasync,sync_file_range,syncfs", "-o", out,
           sys.executable, "-m", "bench.v2_floor", "--worker", case, "--steps", str(steps),
           "--root", root]
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    subprocess.run(cmd, check=True, cwd=here, capture_output=True,
                   env={**os.environ, "PYTHONPATH": here})
    total = 0
    with open(out) as f:
        for line in f:
            parts = line.split()
            if parts and parts[-1] in ("fsync", "fdatasync", "sync_file_range", "syncfs"):
                total += int(parts[3])
    return total / steps


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-strace", action="store_true")
    ap.add_argument("--cpu-messages", type=int, default=20000,
                    help="state size for the append-CPU comparison (0: skip)")
    ap.add_argument("--worker", choices=CASES)
    ap.add_argument("--root")
    ap.add_argument("--out", default=os.path.join(common.RESULTS, "v2_floor.md"))
    a = ap.parse_args(argv)
    if a.worker:  # one case in this process (under strace)
        r = run_case(a.worker, a.steps, a.root)
        print(json.dumps({"fsyncs": r["fsyncs"]}))
        return
    workdir = tempfile.mkdtemp(prefix="ckptfs-v2floor-", dir=os.environ.get("BENCH_DIR"))
    load0 = os.getloadavg()[0]
    per: dict[str, list[dict[str, Any]]] = {c: [] for c in CASES}
    try:
        for rnd in range(a.rounds):
            order = CASES if rnd % 2 == 0 else tuple(reversed(CASES))  # interleave
            for c in order:
                per[c].append(run_case(c, a.steps, os.path.join(workdir, f"{c}-{rnd}")))
        straced = {c: (None if a.no_strace else strace_fsyncs(c, min(100, a.steps), workdir))
                   for c in CASES}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    cpu = []
    if a.cpu_messages:
        # refs: a 200,000-message state of ~1 KB messages in 64 KiB chunks is ~3,100 refs
        cpu = [append_cpu(a.cpu_messages, max(1, a.cpu_messages * 1000 // 65536)),
               append_cpu(a.cpu_messages, 3100)]
    load1 = os.getloadavg()[0]
    md = report(per, straced, a.steps, a.rounds, load0, load1, cpu)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        f.write(md)
    print(md)


def _summary(rs: list[dict[str, Any]], key: Callable[[dict[str, Any]], list[float]]
             ) -> tuple[float, float, float]:
    """(median over rounds of the round mean, median of round medians, worst round p99)."""
    return (common.median([common.mean(key(r)) for r in rs]),
            common.median([common.median(key(r)) for r in rs]),
            max(common.pct(key(r), 99) for r in rs))


def report(per: dict[str, list[dict[str, Any]]], straced: dict[str, float | None], steps: int,
           rounds: int, load0: float, load1: float, append: list[dict[str, float]]) -> str:
    f = common.fmt
    floor_mean = _summary(per["floor"], lambda r: r["lat"])[0]
    rows = []
    for c in CASES:
        rs = per[c]
        m, p50, p99 = _summary(rs, lambda r: r["lat"])
        cpu = _summary(rs, lambda r: r["cpu"])[0]
        last = rs[-1]
        st = straced.get(c)
        rows.append([c, f(m), f(p50), f(p99), f(cpu), f(m / floor_mean), f(rs[0]["fsyncs"], 1),
                     "-" if st is None else f(st, 1), str(last["files"]),
                     f(last["bytes"] / steps / 1024, 2), f(last["du_kib"] / steps, 2)])
    # v1 growth: mean of the last third of steps / mean of the first third (same run)
    v1 = per["v1-api"]
    third = steps // 3
    growth = common.median([common.mean(r["lat"][-third:]) / common.mean(r["lat"][:third])
                            for r in v1])
    head = ["case", "mean ms", "median ms", "p99 ms (worst round)", "cpu ms", "mean / floor",
            "fsync/commit (py)", "fsync/commit (strace)", "files", "KiB/commit", "du KiB/commit"]
    lines = ["# v2 commit floor: the issue-14 floor next to candidate v2 commit shapes and v1",
             "", common.machine_md({"steps per case and round": str(steps),
                                    "rounds (interleaved, order reversed every other round)":
                                        str(rounds),
                                    "load average (1 min) at start / end":
                                        f"{load0:.2f} / {load1:.2f}"}),
             "Produced by `python -m bench.v2_floor` (see its docstring for the exact shapes). "
             "Times are per commit; 'mean / floor' divides by the floor's mean in the same run.",
             "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    lines += ["", f"v1-api mean step over the last third / first third of its {steps} steps "
              f"(the W1 state grows from 0 to {steps} messages): {f(growth)}.", ""]
    if append:
        lines += ["## Append CPU: one message appended to a large state (no I/O)", "",
                  "| messages in state | chunk refs in manifest | manifest KiB | v1 change "
                  "detection ms | v2 O(change) step ms |", "|---|---|---|---|---|"]
        lines += [f"| {c['n_msgs']:,} | {c['refs']:,} | {f(c['manifest_kib'])} | "
                  f"{f(c['v1_ms'])} | {f(c['v2_ms'], 3)} |" for c in append]
        lines += ["", "v1 = `cbor2.dumps` of the whole list plus the prefix comparison "
                  "(what `EntryWriter._value` does to see the change; linear in the state: scale "
                  "by 200,000 / (messages in state) for the issue's case). v2 = encode + hash the new item, incremental "
                  "content hash, manifest assembled from cached chunk-ref encodings and hashed "
                  "(proposal 3.3). The second row uses the reference count of a 200,000-message "
                  "state's manifest. Medians of 5, process CPU time.", ""]
    lines += ["Notes:",
              "- `v2-record*` and `v2-record+pack` are shapes, not an implementation: the bytes "
              "are a plausible v2 record (header CBOR + one framed body; size in the KiB/commit "
              "column), and "
              "the CPU they spend is the proposal's per-step work (encode the new message, two "
              "BLAKE3 hashes, one join of cached manifest parts). They bound what a v2 local "
              "commit can cost on this disk; v1-api is the real library.",
              "- The machine is shared (2 cores, several agents); fsync latency swings with "
              "the other agents' disk traffic. Compare same-run ratios and medians, and the "
              "fsync counts (which do not depend on load).",
              "- fsync (strace) re-runs each case for min(100, steps) steps in a fresh process "
              "(`strace -f -c`, fsync + fdatasync + sync_file_range + syncfs)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
