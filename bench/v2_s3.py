"""Issues 14 and 15 on an object store: v1 vs v2 on one moto S3 server (loopback, s3fs).

``python -m bench.v2_s3 [--rounds 3] [--quick] [--snaps 10 1000 10000]`` writes
``bench/results/v2_s3.md``. Requests are counted per S3 operation with a botocore
``before-send`` hook on the s3fs client ckptfs uses (bench.w3.RequestCounter). Each case runs
for ``CKPTFS_FORMAT_VERSION`` 1 and 2 in the same run; medians over rounds.

Cases: W1 on S3 (requests and ms per step); resume of a run with 10 / 1,000 / 10,000 snapshots
(built locally with a tiny state, uploaded as files with concurrent PUTs, then one commit on
S3 so that the run has the head hint an S3 writer leaves; the resume is a fresh store
object's ``resume``); W3 (a 1 MB Blob, 16 chunks) commit vs one plain 1 MB
PUT; a 100 MiB blob's PUT count; ``forget`` of 500 snapshots and ``gc`` after it; copy of a
~100 MB local store to S3 vs concurrent plain PUTs of the same bytes in 16 MiB objects; W3
through a loopback proxy (tests/faultproxy.py, the proxy of the S3 fault tests) adding 20 ms to every request.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import tempfile
import time
import uuid
from typing import Any

from bench import common
from bench.data import message
from bench.w3 import BUCKET, MotoServer, RequestCounter

MB = 1_000_000
MiB = 1 << 20
FORMAT_ENV = "CKPTFS_FORMAT_VERSION"


class Env:
    def __init__(self, opts: dict[str, Any]) -> None:
        import fsspec

        self.opts = opts
        self.fs = fsspec.filesystem("s3", **opts)
        self.counter = RequestCounter(self.fs)
        #: the moto server's pid, for its CPU time (the copy case reports it)
        self.server_pid: int | None = None

    def cpu(self) -> tuple[float, float]:
        """(this process's CPU s, the moto server's CPU s, 0 when unknown) so far."""
        srv = 0.0
        if self.server_pid is not None:
            try:
                with open(f"/proc/{self.server_pid}/stat") as f:
                    x = f.read().rsplit(")", 1)[1].split()
                srv = (int(x[11]) + int(x[12])) / os.sysconf("SC_CLK_TCK")
            except OSError:
                pass
        return time.process_time(), srv

    def url(self, bucket: str = BUCKET) -> str:
        return f"s3://{bucket}/{uuid.uuid4().hex[:12]}"

    def own_bucket(self, name: str) -> str:
        """A store URL in a bucket of its own (made here). moto filters every listing over
        all the keys of the bucket in Python, so a case that times a listing must not share
        its bucket with the other cases' keys; a real S3 LIST with a prefix does not scan."""
        self.fs.mkdir(name)
        return self.url(name)

    def store(self, url: str, fmt: str) -> Any:
        import ckptfs

        os.environ[FORMAT_ENV] = fmt
        return ckptfs.open_store(url, **self.opts)


def tot(c: collections.Counter[str]) -> int:
    return sum(c.values())


def ops(c: collections.Counter[str], per: float = 1) -> str:
    return ", ".join(f"{k} {v / per:.2g}" for k, v in sorted(c.items()))


def w1_s3(env: Env, fmt: str, steps: int) -> dict[str, Any]:
    st = env.store(env.url(), fmt)
    run = st.start_run("w1", schema=("chat", 1))
    run.checkpoint({"messages": []})
    env.counter.take()
    msgs: list[dict[str, Any]] = []
    lat = []
    for i in range(steps):
        msgs.append(message(i))
        t0 = time.perf_counter()
        run.checkpoint({"messages": msgs})
        lat.append((time.perf_counter() - t0) * 1000)
    c = env.counter.take()
    return {"ms": common.mean(lat), "reqs": tot(c) / steps, "ops": ops(c, steps)}


def build_local(path: str, fmt: str, n: int) -> None:
    import ckptfs

    os.environ[FORMAT_ENV] = fmt
    st = ckptfs.open_store(path)
    run = st.start_run("long", schema=("tiny", 1))
    for i in range(n):
        run.checkpoint({"i": i})
    st.close()


def upload(env: Env, local: str, url: str) -> None:
    files = {}
    for d, _, names in os.walk(local):
        for nm in names:
            p = os.path.join(d, nm)
            rel = os.path.relpath(p, local)
            with open(p, "rb") as f:
                files[url[len("s3://"):] + "/" + rel] = f.read()
    env.fs.pipe(files)


def resume(env: Env, fmt: str, n: int, work: str, rounds: int) -> dict[str, Any]:
    local = os.path.join(work, f"long-v{fmt}-{n}")
    build_local(local, fmt, n)
    url = env.own_bucket(f"resume-v{fmt}-{n}-{uuid.uuid4().hex[:6]}")
    upload(env, local, url)
    shutil.rmtree(local, ignore_errors=True)
    # local stores write no head hint (listing a folder is cheap); one commit on S3 writes it,
    # as a run that lives on the bucket has (a writer hints on its first commit in a process)
    st0 = env.store(url, fmt)
    st0.resume("long").checkpoint({"i": n})
    st0.close()
    n += 1
    lat, reqs = [], []
    c = collections.Counter[str]()
    for _ in range(rounds):
        import fsspec

        fsspec.filesystem("s3", **env.opts).invalidate_cache()
        env.counter.take()
        t0 = time.perf_counter()
        st = env.store(url, fmt)
        run = st.resume("long")
        lat.append((time.perf_counter() - t0) * 1000)
        assert run.seq == n, (run.seq, n)
        c = env.counter.take()
        reqs.append(tot(c))
    # the peer, same bucket, same moment: one bare ListObjectsV2 of the run's folder from the
    # key of its last record (moto filters every listing over all the keys of the bucket)
    bucket, key = url[len("s3://"):].split("/", 1)
    bare = []
    for _ in range(max(3, rounds)):
        t0 = time.perf_counter()
        bare_list(env, bucket, f"{key}/runs/long/", f"{key}/runs/long/{n - 1:020d}")
        bare.append((time.perf_counter() - t0) * 1000)
    env.counter.take()
    return {"ms": common.median(lat), "reqs": common.median(reqs), "ops": ops(c),
            "lists": c["ListObjectsV2"], "list_ms": common.median(bare)}


def bare_list(env: Env, bucket: str, prefix: str, after: str) -> None:
    """One ListObjectsV2 (prefix, StartAfter) through s3fs's own client, as ckptfs sends it."""
    from fsspec.asyn import sync

    sync(env.fs.loop, env.fs.s3.list_objects_v2, Bucket=bucket, Prefix=prefix, StartAfter=after)


def w3(env: Env, fmt: str, reps: int) -> dict[str, Any]:
    import ckptfs

    st = env.store(env.url(), fmt)
    run = st.start_run("w3", schema=("bulk", 1))
    run.checkpoint({"data": ckptfs.Blob(os.urandom(MB))})
    env.counter.take()
    lat = []
    for _ in range(reps):
        b = ckptfs.Blob(os.urandom(MB))
        t0 = time.perf_counter()
        run.checkpoint({"data": b})
        lat.append((time.perf_counter() - t0) * 1000)
    c = env.counter.take()
    return {"ms": common.median(lat), "reqs": tot(c) / reps, "ops": ops(c, reps)}


def plain_put(env: Env, reps: int) -> dict[str, Any]:
    lat = []
    env.counter.take()
    for i in range(reps):
        data = os.urandom(MB)
        t0 = time.perf_counter()
        env.fs.pipe_file(f"{BUCKET}/plain/{uuid.uuid4().hex}", data)
        lat.append((time.perf_counter() - t0) * 1000)
    c = env.counter.take()
    return {"ms": common.median(lat), "reqs": tot(c) / reps, "ops": ops(c, reps)}


def big_blob(env: Env, fmt: str, mib: int) -> dict[str, Any]:
    import ckptfs

    st = env.store(env.url(), fmt)
    run = st.start_run("blob", schema=("bulk", 1))
    run.checkpoint({"x": 0})
    data = os.urandom(mib * MiB)
    env.counter.take()
    t0 = time.perf_counter()
    run.checkpoint({"data": ckptfs.Blob(data)})
    s = time.perf_counter() - t0
    c = env.counter.take()
    puts = sum(v for k, v in c.items() if k in ("PutObject", "UploadPart",
                                                  "CreateMultipartUpload",
                                                  "CompleteMultipartUpload"))
    return {"s": s, "puts": puts, "reqs": tot(c), "ops": ops(c)}


def forget_gc(env: Env, fmt: str, n: int) -> dict[str, Any]:
    from ckptfs.ops.gc import gc
    from ckptfs.ops.retention import Policy, forget

    # a bucket of its own, for each layout: moto's listings scan every key of the bucket, and
    # the other cases' keys would be paid for by whichever layout lists more (v2 gc lists)
    st = env.store(env.own_bucket(f"forget-v{fmt}-{uuid.uuid4().hex[:6]}"), fmt)
    run = st.start_run("f", schema=("chat", 1))
    for i in range(n + 1):
        run.checkpoint({"m": message(i), "i": i})
    env.counter.take()
    t0 = time.perf_counter()
    forget(st.repo, Policy(keep_last=1))
    tf = time.perf_counter() - t0
    cf = env.counter.take()
    t0 = time.perf_counter()
    gc(st.repo, grace_ms=0)
    tg = time.perf_counter() - t0
    cg = env.counter.take()

    def dels(c: collections.Counter[str]) -> int:
        return sum(v for k, v in c.items() if k.startswith("Delete"))
    return {"forget_s": tf, "forget_reqs": tot(cf), "forget_dels": dels(cf), "forget_ops": ops(cf),
            "gc_s": tg, "gc_reqs": tot(cg), "gc_dels": dels(cg), "gc_ops": ops(cg)}


def copy_case(env: Env, fmt: str, mb: int, work: str) -> dict[str, Any]:
    import ckptfs
    from ckptfs.ops.copy import copy_runs

    os.environ[FORMAT_ENV] = fmt
    src_path = os.path.join(work, f"copy-src-v{fmt}")
    src = ckptfs.open_store(src_path)
    for r in range(4):
        run = src.start_run(f"c{r}", schema=("bulk", 1))
        for _ in range(max(1, mb // 8)):
            run.checkpoint({"data": ckptfs.Blob(os.urandom(2 * MB))})
    stored = common.tree_size(src_path)[0]
    dst = env.store(env.url(), fmt)
    plain = plain_copy(env, stored / MB, 16 * MiB) if fmt == "2" else None  # same moment
    env.counter.take()
    c0 = env.cpu()
    t0 = time.perf_counter()
    copy_runs(src.repo, dst.repo)
    took = time.perf_counter() - t0
    c1 = env.cpu()
    c = env.counter.take()
    src.close()
    shutil.rmtree(src_path, ignore_errors=True)
    return {"mb": stored / MB, "s": took, "mbps": stored / MB / took, "reqs": tot(c),
            "ops": ops(c), "cpu": c1[0] - c0[0], "srv": c1[1] - c0[1], "plain": plain}


def plain_copy(env: Env, mb: float, obj: int) -> dict[str, float]:
    """Concurrent plain PUTs (one s3fs ``pipe``) of ``mb`` MB in ``obj``-byte objects: MB/s,
    this process's and the moto server's CPU seconds."""
    total = int(mb * MB)
    files = {f"{BUCKET}/plaincopy/{uuid.uuid4().hex}/{i}": os.urandom(min(obj, total - i * obj))
             for i in range((total + obj - 1) // obj)}
    c0 = env.cpu()
    t0 = time.perf_counter()
    env.fs.pipe(files)
    s = time.perf_counter() - t0
    c1 = env.cpu()
    env.counter.take()
    return {"mbps": total / MB / s, "cpu": c1[0] - c0[0], "srv": c1[1] - c0[1]}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--w1-steps", type=int, default=100)
    ap.add_argument("--snaps", type=int, nargs="+", default=[10, 1000, 10000])
    ap.add_argument("--v1-snaps-max", type=int, default=1000,
                    help="resume: skip v1 runs longer than this (the peer; building is slow)")
    ap.add_argument("--blob-mib", type=int, default=100)
    ap.add_argument("--forget", type=int, default=500)
    ap.add_argument("--copy-mb", type=int, default=100)
    ap.add_argument("--proxy-ms", type=float, default=20.0)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", nargs="*", default=None, help="case names to run")
    ap.add_argument("--tag", default="", help="results file suffix (bench/results/v2_s3-TAG.md)")
    a = ap.parse_args(argv)
    if a.quick:
        a.rounds, a.w1_steps, a.snaps, a.blob_mib, a.forget, a.copy_mb = 1, 20, [10, 100], 20, 50, 16
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    work = tempfile.mkdtemp(prefix="v2s3-", dir="/tmp")
    load0 = os.getloadavg()
    server = MotoServer()
    res: dict[str, Any] = collections.defaultdict(list)
    want = (lambda c: a.only is None or c in a.only)
    try:
        opts = {"endpoint_url": server.url, "key": "testing", "secret": "testing"}
        import fsspec

        fsspec.filesystem("s3", **opts).mkdir(BUCKET)
        env = Env(opts)
        env.server_pid = server.proc.pid
        for rnd in range(a.rounds):
            order = ["1", "2"] if rnd % 2 == 0 else ["2", "1"]
            if want("w3"):
                res["put"].append(plain_put(env, 10))
            for fmt in order:
                if want("w1"):
                    res[f"w1-v{fmt}"].append(w1_s3(env, fmt, a.w1_steps))
                if want("w3"):
                    res[f"w3-v{fmt}"].append(w3(env, fmt, 10))
                print(f"round {rnd} v{fmt} w1/w3 done", flush=True)
        for fmt in ("1", "2"):
            if want("resume"):
                for n in a.snaps:
                    if fmt == "1" and n > a.v1_snaps_max:
                        continue  # a v1 store of 10,000 snapshots takes minutes to build
                    res[f"resume-v{fmt}-{n}"].append(resume(env, fmt, n, work, a.rounds))
                    print(f"resume v{fmt} {n}: {res[f'resume-v{fmt}-{n}'][-1]}", flush=True)
            if want("blob"):
                res[f"blob-v{fmt}"].append(big_blob(env, fmt, a.blob_mib))
            if want("forget"):
                res[f"forget-v{fmt}"].append(forget_gc(env, fmt, a.forget))
                print(f"forget v{fmt}: {res[f'forget-v{fmt}'][-1]}", flush=True)
            if want("copy"):
                res[f"copy-v{fmt}"].append(copy_case(env, fmt, a.copy_mb, work))
                print(f"copy v{fmt}: {res[f'copy-v{fmt}'][-1]}", flush=True)
        if want("copy"):  # plain PUTs right before each v2 copy (copy_case), and after all
            mb = res["copy-v2"][-1]["mb"]
            res["plaincopy"] = [r["plain"] for r in res["copy-v2"]] + [
                plain_copy(env, mb, 16 * MiB) for _ in range(a.rounds)]
        if want("proxy"):
            from tests.faultproxy import FaultProxy, Rule

            with FaultProxy(server.url, [Rule(action="delay", delay=a.proxy_ms / 1000)]) as px:
                penv = Env({**opts, "endpoint_url": px.url})
                res["proxy-put"].append(plain_put(penv, 5))
                for fmt in ("1", "2"):
                    res[f"proxy-w3-v{fmt}"].append(w3(penv, fmt, 5))
                    res[f"proxy-w1-v{fmt}"].append(w1_s3(penv, fmt, 10))
    finally:
        server.stop()
        os.environ.pop(FORMAT_ENV, None)
        shutil.rmtree(work, ignore_errors=True)
    load1 = os.getloadavg()
    md = report(a, res, load0, load1)
    path = common.write_result("v2_s3" + ("-quick" if a.quick else "")
                               + (f"-{a.tag}" if a.tag else ""), md)
    print(md)
    print("wrote", path)


def m(rs: list[dict[str, Any]], k: str) -> float:
    return common.median([r[k] for r in rs])


def report(a: argparse.Namespace, res: dict[str, Any], load0: tuple[float, ...],
           load1: tuple[float, ...]) -> str:
    f = common.fmt
    L = ["# Issues 14/15 on S3 (moto on loopback, s3fs): v1 vs v2, same run", "",
         common.machine_md({"rounds": str(a.rounds),
                            "load average (1/5/15) at start": " / ".join(f"{x:.2f}" for x in load0),
                            "load average at end": " / ".join(f"{x:.2f}" for x in load1)}), ""]
    tg: list[list[str]] = []
    if "w1-v1" in res:
        rows = [[f"v{v}", f(m(res[f"w1-v{v}"], "ms")), f(m(res[f"w1-v{v}"], "reqs"), 2),
                 res[f"w1-v{v}"][-1]["ops"]] for v in ("1", "2")]
        L += [f"## W1 on S3 ({a.w1_steps} steps, one message appended per step)", "",
              common.table(["layout", "mean ms/step", "requests/step", "by operation"], rows)]
        for v in ("1", "2"):
            r = m(res[f"w1-v{v}"], "reqs")
            tg.append([f"14: v{v} W1 step on S3 <= 1.5 requests", f(r, 2), common.verdict(r, 1.5)])
    if any(k.startswith("resume-") for k in res):
        rows = []
        for v in ("1", "2"):
            sizes = [n for n in a.snaps if f"resume-v{v}-{n}" in res]
            ms = [m(res[f"resume-v{v}-{n}"], "ms") for n in sizes]
            for n, x in zip(sizes, ms):
                r = res[f"resume-v{v}-{n}"][-1]
                lst = m(res[f"resume-v{v}-{n}"], "list_ms")
                rows.append([f"v{v}", f"{n:,}", f(x), f(r["reqs"], 0), r["ops"], f(lst),
                             f(x - r["lists"] * lst)])
            if not ms:
                continue
            spread = max(ms) / min(ms)
            tg.append([f"14: v{v} resume at {'/'.join(map(str, sizes))} snapshots within 1.5x",
                       f"{f(spread)}x", common.verdict(spread, 1.5)])
        L += ["## Resume of a run (fresh store object, `store.resume`)", "",
              "Each run in a bucket of its own. `bare LIST ms`: one ListObjectsV2 of the run's "
              "folder in the same bucket at the same moment (moto filters every listing over "
              "all the keys of the bucket in Python; a real S3 LIST with a prefix does not). "
              "`ms less listings`: the resume's time less its LISTs at that price.", "",
              common.table(["layout", "snapshots", "ms (median)", "requests", "by operation",
                            "bare LIST ms", "ms less listings"], rows)]
    if "put" in res:
        put = m(res["put"], "ms")
        rows = [["one plain 1 MB PUT", f(put), "1.00", f(m(res["put"], "reqs"), 1),
                 res["put"][-1]["ops"]]]
        for v in ("1", "2"):
            x = m(res[f"w3-v{v}"], "ms")
            rq = m(res[f"w3-v{v}"], "reqs")
            rows.append([f"v{v} commit of a 1 MB Blob (16 chunks)", f(x), f(x / put),
                         f(rq, 1), res[f"w3-v{v}"][-1]["ops"]])
            tg.append([f"15: v{v} W3 commit <= 3 requests", f(rq, 1), common.verdict(rq, 3)])
            tg.append([f"15: v{v} W3 commit <= 2x one 1 MB PUT", f"{f(x / put)}x",
                       common.verdict(x / put, 2)])
        L += ["## W3: 1 MB state commit vs one plain PUT", "",
              common.table(["case", "median ms", "x PUT", "requests", "by operation"], rows)]
    if "blob-v1" in res:
        rows = []
        for v in ("1", "2"):
            r = res[f"blob-v{v}"][-1]
            rows.append([f"v{v}", f(r["s"]), str(r["puts"]), str(r["reqs"]), r["ops"]])
            tg.append([f"15: v{v} {a.blob_mib} MiB blob in <= 10 PUTs", str(r["puts"]),
                       common.verdict(r["puts"], 10)])
        L += [f"## A {a.blob_mib} MiB blob", "",
              common.table(["layout", "commit s", "PUTs", "requests", "by operation"], rows)]
    if "forget-v1" in res:
        rows = []
        r1, r2 = res["forget-v1"][-1], res["forget-v2"][-1]
        for v, r in (("1", r1), ("2", r2)):
            rows.append([f"v{v} forget", f(r["forget_s"]), str(r["forget_dels"]),
                         str(r["forget_reqs"]), r["forget_ops"]])
            rows.append([f"v{v} gc (grace 0)", f(r["gc_s"]), str(r["gc_dels"]),
                         str(r["gc_reqs"]), r["gc_ops"]])
        d2 = r2["forget_dels"] + r2["gc_dels"]
        tg.append([f"15: v2 forget {a.forget} + gc: delete requests <= 20", str(d2),
                   common.verdict(d2, 20)])
        for k in ("forget_s", "gc_s"):
            q = r2[k] / r1[k]
            tg.append([f"15: v2 {k[:-2]} time <= 0.1x v1's (same run)", f"{f(q)}x",
                       common.verdict(q, 0.1)])
        L += [f"## forget of {a.forget} snapshots (keep_last=1), then gc", "",
              common.table(["case", "s", "delete requests", "requests", "by operation"], rows)]
    if "copy-v1" in res:
        pcs = res["plaincopy"]
        pc = common.median([p["mbps"] for p in pcs])
        p0 = pcs[0]
        rows = [[f"plain concurrent PUTs, 16 MiB objects", f"{res['copy-v2'][-1]['mb']:.0f}", "-",
                 f(pc), "1.00", f(p0["cpu"]), f(p0["srv"]), "-"]]
        for v in ("1", "2"):
            r = res[f"copy-v{v}"][-1]
            rows.append([f"v{v} `copy_runs` local -> S3", f"{r['mb']:.0f}", f(r["s"]),
                         f(r["mbps"]), f(r["mbps"] / pc), f(r["cpu"]), f(r["srv"]),
                         f"{r['reqs']} ({r['ops']})"])
        r2 = res["copy-v2"][-1]
        q = r2["mbps"] / pc
        q_now = r2["mbps"] / r2["plain"]["mbps"]  # against the PUTs just before it
        tg.append(["15: v2 copy local -> S3 >= 0.8x plain concurrent PUTs",
                   f"{f(q)}x (just before it: {f(q_now)}x)",
                   common.verdict(q, 0.8, at_most=False)])
        L += ["## copy local -> S3", "",
              "Client CPU: this process (copy: reading, verifying, packing; both: botocore "
              "signing and checksums). Moto CPU: the server process, which parses every "
              "request in Python on the same cores.", "",
              common.table(["case", "MB", "s", "MB/s", "x plain", "client CPU s", "moto CPU s",
                            "requests"], rows)]
    if "proxy-put" in res:
        put = m(res["proxy-put"], "ms")
        rows = [["one plain 1 MB PUT", f(put), "1.00", f(m(res["proxy-put"], "reqs"), 1)]]
        for v in ("1", "2"):
            x = m(res[f"proxy-w3-v{v}"], "ms")
            rows.append([f"v{v} W3 commit (1 MB, 16 chunks)", f(x), f(x / put),
                         f(m(res[f"proxy-w3-v{v}"], "reqs"), 1)])
            y = m(res[f"proxy-w1-v{v}"], "ms")
            rows.append([f"v{v} W1 step", f(y), f(y / put), f(m(res[f"proxy-w1-v{v}"], "reqs"), 1)])
        L += [f"## Through a loopback proxy adding {a.proxy_ms:g} ms to every request", "",
              common.table(["case", "median ms", "x PUT", "requests"], rows)]
    L += ["## Targets", "", common.table(["target", "measured", "verdict"], tg)]
    return "\n".join(L) + "\n"


if __name__ == "__main__":
    main()
