"""The conformance runner: drive an implementation through its adapter over every vector.

Results per vector: Pass, Fail (the implementation disagrees with the vector), Skip (it does
not claim a capability the vector needs) and Error (the harness or adapter broke: a crash, a
timeout, output that is not the protocol's). See ckptfs_conformance/README.md.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import queue
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs

VECTORS = Path(__file__).resolve().parent / "vectors"
CAPABILITIES = ("digest", "cbor", "cbor-encode", "framing", "chunker", "reader", "ledger",
                "lifecycle", "v2", "writer", "writer-exact", "typed-values", "gc", "writer-v2",
                "maintenance", "encryption", "delta-headers")
PASS, FAIL, SKIP, ERROR = "Pass", "Fail", "Skip", "Error"


@attrs.frozen
class Result:
    """The outcome of one vector."""

    id: str
    status: str
    message: str = ""
    seconds: float = 0.0


def load_vectors(root: Path = VECTORS, only: str | None = None) -> list[dict[str, Any]]:
    """Every vector under ``root``, sorted by id; ``only`` is a comma-separated list of globs
    over ids (a pattern without wildcards matches as a substring)."""
    pats = [p.strip() for p in (only or "").split(",") if p.strip()]
    out = []
    for f in sorted(root.glob("*/*.json")):
        v = json.loads(f.read_text())
        v["_dir"] = str(f.parent)
        if pats and not any(fnmatch.fnmatch(v["id"], p) or p in v["id"] for p in pats):
            continue
        out.append(v)
    return out


class AdapterBroke(Exception):
    """The adapter crashed, timed out or broke the protocol: the vector's result is Error."""


class Driver:
    """Runs requests through ``COMMAND OP ARGS...`` or one long-lived ``COMMAND batch``."""

    def __init__(self, command: str, *, batch: bool, timeout: float) -> None:
        self.command = shlex.split(command)
        self.batch = batch
        self.timeout = timeout
        self.proc: subprocess.Popen[str] | None = None
        self.lines: queue.Queue[str | None] = queue.Queue()

    def request(self, argv: list[str]) -> str:
        return self._batch(argv) if self.batch else self._single(argv)

    def _single(self, argv: list[str]) -> str:
        try:
            p = subprocess.run(self.command + argv, capture_output=True, text=True,
                               timeout=self.timeout)
        except subprocess.TimeoutExpired:
            raise AdapterBroke(f"timed out after {self.timeout:.0f} s") from None
        except OSError as e:
            raise AdapterBroke(f"cannot start the adapter: {e}") from None
        if p.returncode not in (0, 1):
            raise AdapterBroke(f"adapter exited {p.returncode}: {p.stderr.strip()[-2000:]}")
        return p.stdout.rstrip("\n")

    def _start(self) -> subprocess.Popen[str]:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen(self.command + ["batch"], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, text=True, bufsize=1)
            self.lines = queue.Queue()
            out = self.proc.stdout
            assert out is not None

            def pump(q: queue.Queue[str | None] = self.lines) -> None:
                for line in out:
                    q.put(line)
                q.put(None)

            threading.Thread(target=pump, daemon=True).start()
        return self.proc

    def _batch(self, argv: list[str]) -> str:
        proc = self._start()
        assert proc.stdin is not None
        try:
            proc.stdin.write(json.dumps({"argv": argv}) + "\n")
            proc.stdin.flush()
            line = self.lines.get(timeout=self.timeout)
        except queue.Empty:
            self.close()
            raise AdapterBroke(f"batch adapter timed out after {self.timeout:.0f} s") from None
        except OSError as e:
            self.close()
            raise AdapterBroke(f"batch adapter is gone: {e}") from None
        if line is None:
            self.close()
            raise AdapterBroke("batch adapter exited")
        try:
            reply = json.loads(line)
        except ValueError:
            raise AdapterBroke(f"batch reply is not JSON: {line[:200]!r}") from None
        if "out" not in reply:
            raise AdapterBroke(f"adapter crashed: {str(reply.get('crash', reply))[-2000:]}")
        return str(reply["out"])

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.stdin:
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.proc = None


def materialize(src: dict[str, Any]) -> bytes:
    if "json" in src:
        return json.dumps(src["json"]).encode()
    from ckptfs_conformance.generate import materialize as m

    return m(src)


def make_folders(store: Path, folders: list[str]) -> None:
    """The vector's empty folders (``folders``: store paths), which git cannot keep."""
    for rel in folders:
        parts = Path(rel).parts
        if not parts or Path(rel).is_absolute() or ".." in parts:
            raise ValueError(f"vector folder {rel!r} is not a path inside the store")
        (store / rel).mkdir(parents=True, exist_ok=True)


def run_vector(v: dict[str, Any], driver: Driver, claims: set[str]) -> Result:
    missing = [c for c in v["requires"] if c not in claims]
    if missing:
        return Result(v["id"], SKIP, f"needs capability {', '.join(missing)}")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ckptfs-conformance-") as tmp:
        work = Path(tmp)
        argv = []
        for a in v["argv"]:
            if a.startswith("{file:"):
                name = a[6:-1]
                path = work / name
                path.write_bytes(materialize(v["files"][name]))
                a = str(path)
            elif a == "{store}":
                shutil.copytree(Path(v["_dir"]) / v["store"], work / "store")
                make_folders(work / "store", v.get("folders", []))
                a = str(work / "store")
            elif a == "{out}":
                if "seed" in v:  # a writer case that continues a store (README "Writer cases")
                    shutil.copytree(Path(v["_dir"]) / v["seed"], work / "out")
                else:
                    (work / "out").mkdir()
                a = str(work / "out")
            argv.append(a)
        try:
            out = driver.request(argv)
            status, msg = judge(v, out, work)
        except AdapterBroke as e:
            status, msg = ERROR, str(e)
    return Result(v["id"], status, msg, time.monotonic() - started)


def judge(v: dict[str, Any], out: str, work: Path) -> tuple[str, str]:
    """Pass or Fail with a reason; AdapterBroke for output the protocol does not allow."""
    expect = v["expect"]
    got_error = out[len("error: "):].strip() if out.startswith("error: ") else None
    if "error" in expect:
        if got_error == expect["error"]:
            return PASS, ""
        if got_error is not None:
            return FAIL, f"expected error {expect['error']}, got error {got_error}"
        return FAIL, f"expected error {expect['error']}, but the input was accepted: {out[:300]}"
    if got_error is not None:
        return FAIL, f"expected success, got error {got_error}"
    if "enc_rules" in expect:  # an encrypted store written (spec/encryption.md)
        from ckptfs_conformance.enc_rules import judge_encrypted

        if out.strip() != "ok":
            raise AdapterBroke(f"enc-write printed {out[:200]!r}, expected 'ok' or 'error: ...'")
        return judge_encrypted(v, work / "out")
    if "store" in expect:
        return judge_written(v, out, work / "out")
    if expect["compare"] == "text":
        if out.strip() == expect["output"]:
            return PASS, ""
        return FAIL, f"expected {expect['output'][:200]!r}, got {out.strip()[:200]!r}"
    try:
        got = json.loads(out)
    except ValueError:
        raise AdapterBroke(f"output is not JSON: {out[:200]!r}") from None
    return compare_json(expect["output"], got)


def compare_json(want: Any, got: Any) -> tuple[str, str]:
    diffs = list(json_diff(want, got))
    if not diffs:
        return PASS, ""
    more = f" (+{len(diffs) - 5} more)" if len(diffs) > 5 else ""
    return FAIL, "; ".join(diffs[:5]) + more


def json_diff(want: Any, got: Any, path: str = "$") -> Iterator[str]:
    """Human-readable differences, as JSON paths: ``$.runs.r1.snapshots[0].seq: want 1, got 2``."""
    if isinstance(want, dict) and isinstance(got, dict):
        for k in sorted(set(want) | set(got)):
            if k not in got:
                yield f"{path}.{k}: missing"
            elif k not in want:
                yield f"{path}.{k}: unexpected"
            else:
                yield from json_diff(want[k], got[k], f"{path}.{k}")
    elif isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            yield f"{path}: want {len(want)} items, got {len(got)}"
        for i, (a, b) in enumerate(zip(want, got)):
            yield from json_diff(a, b, f"{path}[{i}]")
    elif want != got or type(want) is not type(got):
        yield f"{path}: want {json.dumps(want)[:120]}, got {json.dumps(got)[:120]}"


def judge_written(v: dict[str, Any], out: str, store: Path) -> tuple[str, str]:
    """A writer case: read back with the reference reader, CDDL-check, compare (exactly)."""
    from ckptfs.errors import CkptfsError
    from ckptfs_conformance.render import render_store, symbolic
    from ckptfs_conformance.validate import validate_store

    if out.strip() != "ok":
        raise AdapterBroke(f"write printed {out[:200]!r}, expected 'ok' or 'error: ...'")
    problems = validate_store(store)
    if problems:
        return FAIL, "CDDL: " + "; ".join(problems[:5])
    try:
        got = symbolic(render_store(str(store), v["expect"]["now"]))
    except CkptfsError as e:
        return FAIL, f"the reference reader rejects the written store: {e.category}: {e}"
    if "rules" in v["expect"]:  # writer-rules/*: no bytes compared, rules checked (issue 32)
        return judge_rules(v, got, store)
    status, msg = compare_json(v["expect"]["store"], got)
    if status != PASS or "exact" not in v["expect"]:
        return status, msg
    return compare_objects(Path(v["_dir"]) / v["expect"]["exact"], store)


def judge_rules(v: dict[str, Any], got: Any, store: Path) -> tuple[str, str]:
    """A version 2 writer case: the rendering (config aside: the rules judge it) and then
    each rule of spec/v2.md 5.2.1 the vector names (ckptfs_conformance/writer_rules.py)."""
    from ckptfs_conformance.writer_rules import check

    want = v["expect"]["store"]  # None: the rules alone judge (a case a writer may refuse)
    if want is not None:
        got = {k: x for k, x in got.items() if k != "config" or "config" in want}
        status, msg = compare_json(want, got)
        if status != PASS:
            return status, msg
    case = v["files"].get("case", {}).get("json", {"steps": []})  # maintenance: no case
    problems = check(store, v["expect"]["rules"], case)
    if problems:
        return FAIL, "; ".join(problems[:5]) + (f" (+{len(problems) - 5} more)"
                                                if len(problems) > 5 else "")
    return PASS, ""


def compare_objects(want: Path, got: Path) -> tuple[str, str]:
    """Same object paths with the same unframed bytes (framing is the writer's choice, and so
    is a run record's ``nonce``, format.md 8.1: records are compared without it)."""
    a, b = _objects(want), _objects(got)
    diffs = [f"{p}: missing" for p in sorted(set(a) - set(b))]
    diffs += [f"{p}: unexpected" for p in sorted(set(b) - set(a))]
    diffs += [f"{p}: different bytes" for p in sorted(set(a) & set(b)) if a[p] != b[p]]
    if diffs:
        return FAIL, "; ".join(diffs[:5]) + (f" (+{len(diffs) - 5} more)" if len(diffs) > 5 else "")
    return PASS, ""


def _objects(root: Path) -> dict[str, bytes]:
    import zstandard

    out = {}
    for f in root.rglob("*"):
        rel = f.relative_to(root).as_posix()
        if not f.is_file() or rel.startswith("tmp/"):
            continue
        data = f.read_bytes()
        if rel.startswith(("chunks/", "snapshots/")) and data[:1] == b"\x01":
            data = b"\x00" + zstandard.ZstdDecompressor().decompress(data[1:])
        elif _RECORD.fullmatch(rel):
            data = _without_nonce(data)
        out[rel] = data
    return out


_RECORD = re.compile(r"runs/[^/]+/[0-9]{20}")


def _without_nonce(data: bytes) -> bytes:
    """A run record's canonical bytes without its ``nonce`` (unchanged when not a CBOR map)."""
    from ckptfs.errors import FormatError
    from ckptfs.format import cbor

    try:
        m = cbor.decode(data, what="run record")
    except FormatError:
        return data
    if not isinstance(m, dict) or "nonce" not in m:
        return data
    return cbor.encode({k: v for k, v in m.items() if k != "nonce"})


def junit(results: list[Result], path: str, name: str) -> None:
    suite = ET.Element("testsuite", name=name, tests=str(len(results)),
                       failures=str(sum(r.status == FAIL for r in results)),
                       errors=str(sum(r.status == ERROR for r in results)),
                       skipped=str(sum(r.status == SKIP for r in results)),
                       time=f"{sum(r.seconds for r in results):.3f}")
    for r in results:
        cat, _, name_ = r.id.partition("/")
        case = ET.SubElement(suite, "testcase", classname=f"conformance.{cat}", name=name_,
                             time=f"{r.seconds:.3f}")
        tag = {FAIL: "failure", ERROR: "error", SKIP: "skipped"}.get(r.status)
        if tag:
            ET.SubElement(case, tag, message=r.message[:500]).text = r.message
    root = ET.Element("testsuites")
    root.append(suite)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def run(command: str, *, only: str | None = None, capabilities: set[str] | None = None,
        batch: bool = False, timeout: float = 60.0, root: Path = VECTORS) -> list[Result]:
    claims = set(CAPABILITIES) if capabilities is None else capabilities
    driver = Driver(command, batch=batch, timeout=timeout)
    try:
        return [run_vector(v, driver, claims) for v in load_vectors(root, only)]
    finally:
        driver.close()


def summary(results: list[Result]) -> str:
    counts = {s: sum(r.status == s for r in results) for s in (PASS, FAIL, SKIP, ERROR)}
    by_cat: dict[str, dict[str, int]] = {}
    for r in results:
        c = by_cat.setdefault(r.id.split("/")[0], {})
        c[r.status] = c.get(r.status, 0) + 1
    lines = [f"  {cat:<14} " + " ".join(f"{s}={n}" for s, n in sorted(c.items()))
             for cat, c in sorted(by_cat.items())]
    return "\n".join(lines + [" ".join(f"{s}: {n}" for s, n in counts.items())
                              + f"  (of {len(results)})"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ckptfs-conformance", description=__doc__)
    p.add_argument("--impl", help="the adapter command, e.g. 'python -m "
                   "ckptfs_conformance.adapters.ckptfs_adapter' (required unless --coverage)")
    p.add_argument("--coverage", action="store_true", help="print each requirement id of the "
                   "spec with the vectors that test it, then 'N requirements, M untested'")
    p.add_argument("--only", help="run only vectors whose id matches one of these comma-separated globs "
                   "(or substrings), e.g. 'store-invalid/*,cbor/reject-*'")
    p.add_argument("--capabilities", help=f"comma-separated claims (default all): "
                   f"{','.join(CAPABILITIES)}")
    p.add_argument("--batch", action="store_true", help="one adapter process, 'COMMAND batch'")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per request")
    p.add_argument("--junit", help="write JUnit XML here")
    p.add_argument("--verbose", "-v", action="store_true", help="print every result")
    a = p.parse_args(argv)
    if a.coverage:
        from ckptfs_conformance.coverage import coverage, table

        print(table(coverage()))
        return 0
    if not a.impl:
        p.error("--impl is required (or --coverage)")
    claims = None
    if a.capabilities:
        claims = {c.strip() for c in a.capabilities.split(",") if c.strip()}
        unknown = claims - set(CAPABILITIES)
        if unknown:
            p.error(f"unknown capabilities {sorted(unknown)}; known: {', '.join(CAPABILITIES)}")
    results = run(a.impl, only=a.only, capabilities=claims, batch=a.batch, timeout=a.timeout)
    for r in results:
        if a.verbose or r.status in (FAIL, ERROR):
            print(f"{r.status:<5} {r.id}" + (f": {r.message}" if r.message else ""))
    print(summary(results))
    if a.junit:
        junit(results, a.junit, "ckptfs-conformance")
    return 1 if any(r.status in (FAIL, ERROR) for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
