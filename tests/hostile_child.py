"""The child process of the hostile-store corpus: run every public reader entry point against
each store it is given, under a memory cap, a per-call timeout and an audit hook that records
every file access outside the store (tests/test_hostile_stores.py starts it).

    python -m tests.hostile_child SPEC.json OUT.jsonl     # API entry points, one line per call
    python -m tests.hostile_child --cli ACCESS.json ARGS   # one CLI command, hooked the same way

An outcome is ``ok``, ``error:<category>`` (a ckptfs.errors exception: a clean failure),
``escape:<type>: <message>``, ``hang`` (the call did not return within the timeout) or ``oom``
(MemoryError under the cap).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import traceback
from collections.abc import Callable
from typing import Any

_WRITE_FLAGS = (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
                | getattr(os, "O_TMPFILE", 0))
_PATH_EVENTS = {"open", "os.listdir", "os.scandir", "os.mkdir", "os.remove", "os.rmdir",
                "os.utime", "os.chmod", "os.chown", "os.truncate", "os.rename", "os.link",
                "os.symlink", "os.mkfifo", "shutil.rmtree", "shutil.copyfile", "shutil.move",
                "os.chdir", "os.exec", "os.posix_spawn", "socket.connect", "os.system"}
_WRITES = {"os.mkdir", "os.remove", "os.rmdir", "os.utime", "os.chmod", "os.chown",
           "os.truncate", "os.rename", "os.link", "os.symlink", "os.mkfifo", "shutil.rmtree",
           "shutil.copyfile", "shutil.move"}


#: calls that act on a link itself, not on what it leads to
_NO_FOLLOW = {"os.rename", "os.remove", "os.rmdir", "os.mkdir", "os.link", "os.symlink",
              "os.mkfifo", "shutil.rmtree"}


class Watch:
    """Records accesses to paths outside the allowed roots (the store, the scratch folder, the
    Python installation and system folders). Paths are resolved (symbolic links followed), so a
    store path that leads outside through a link counts as outside."""

    def __init__(self) -> None:
        self.allowed: list[str] = []
        self.hits: list[str] = []
        self._busy = False
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        base = {sys.prefix, sys.base_prefix, sys.exec_prefix, here, "/proc", "/sys", "/dev",
                "/etc", "/usr", "/lib", "/lib64", "/bin", "/sbin", "/run"}
        self.system = sorted({os.path.realpath(p) for p in base})

    def allow(self, *roots: str) -> None:
        self.allowed = [os.path.realpath(r) for r in roots] + self.system
        self.hits = []

    def _outside(self, p: Any, follow: bool = True) -> str | None:
        """The resolved path if outside the allowed roots, else None. ``follow`` False: the
        call does not follow a link in the last component (rename, unlink, O_NOFOLLOW, ...),
        so only the folder is resolved."""
        if isinstance(p, bytes):
            p = os.fsdecode(p)
        if isinstance(p, os.PathLike):
            p = os.fspath(p)
        if not isinstance(p, str) or not self.allowed:
            return None
        p = os.path.join(os.getcwd(), p)
        if follow:
            real = os.path.realpath(p)
        else:
            real = os.path.join(os.path.realpath(os.path.dirname(p)), os.path.basename(p))
        for a in self.allowed:
            if real == a or real.startswith(a + os.sep):
                return None
        return real

    def __call__(self, event: str, args: tuple[Any, ...]) -> None:
        if event not in _PATH_EVENTS or self._busy:
            return
        self._busy = True
        try:
            if event.startswith("socket"):
                self.hits.append(f"{event} {args[1:]!r:.100}")
                return
            paths = [args[0]] if args else []
            if event in ("os.rename", "os.link", "shutil.copyfile", "shutil.move"):
                paths.append(args[1])
                if event == "os.link" and len(args) > 2 and args[2] not in (None, -1):
                    paths = [args[1]]  # the source is relative to a descriptor (/proc/self/fd)
            write = event in _WRITES
            follow = event not in _NO_FOLLOW
            if event == "open":
                mode, flags = (args + (None, None))[1:3]
                write = bool((isinstance(mode, str) and set(mode) & set("wax+"))
                             or (isinstance(flags, int) and flags & _WRITE_FLAGS))
                follow = not (isinstance(flags, int) and (
                    flags & os.O_NOFOLLOW or flags & (os.O_CREAT | os.O_EXCL) == (os.O_CREAT | os.O_EXCL)))
            for k, p in enumerate(paths):
                out = self._outside(p, follow or (event == "os.link" and k == 0 and len(paths) == 2))
                if out is not None:
                    self.hits.append(f"{'write' if write else 'read'} {event} {out}")
        finally:
            self._busy = False


class Hang(BaseException):
    """Raised by the per-call timer: the call blocked."""


def _alarm(signum: int, frame: Any) -> None:
    raise Hang()


def cap_memory(limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def outcome(fn: Callable[[], Any], timeout: float) -> str:
    from ckptfs.errors import CkptfsError

    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        fn()
        return "ok"
    except Hang:
        return "hang"
    except MemoryError:
        return "oom"
    except CkptfsError as e:
        return f"error:{e.category}"
    except Exception as e:  # noqa: BLE001 - the point: report what escaped
        tb = traceback.extract_tb(e.__traceback__)[-1]
        where = f"{os.path.basename(tb.filename)}:{tb.lineno}"
        return f"escape:{type(e).__name__}: {str(e)[:160]} [{where}]"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


# -- the API entry points -------------------------------------------------------------------------
def entry_points(url: str, scratch: str, facts: dict[str, str]) -> dict[str, Callable[[], Any]]:
    import ckptfs
    from ckptfs.ops.check import check
    from ckptfs.ops.copy import copy_runs
    from ckptfs.ops.erase import erase
    from ckptfs.ops.export import export_archive
    from ckptfs.ops.gc import gc
    from ckptfs.ops.inspect import list_runs, run_effects, run_log
    from ckptfs.ops.retention import forget_snapshots
    from ckptfs.ops.usage import usage
    from ckptfs.ops.verify import verify
    from ckptfs.storage.local import LocalStorage
    from ckptfs.store.repository import Repository
    from tests.hostile_corpus import FUTURE

    runs = ("r1", "r2", "r3")

    def st() -> ckptfs.Store:
        return ckptfs.open_store(url)

    def read_all(ref: str) -> None:
        for v in st().read(ref).values():
            if isinstance(v, ckptfs.StoredBlob):
                for _ in v.chunks_iter() if hasattr(v, "chunks_iter") else [v.read()]:
                    pass

    n = [0]

    def dst() -> Repository:
        n[0] += 1
        return Repository(LocalStorage(os.path.join(scratch, f"copy-{n[0]}"), durable=False))

    return {
        "open_store": lambda: st().repo.config,
        "runs": lambda: st().runs(),
        "ls": lambda: list_runs(st().repo),
        "log": lambda: [run_log(st().repo, r) for r in runs],
        "snapshots": lambda: [list(st().snapshots(r)) for r in runs],
        "head": lambda: [st().head(r) for r in runs],
        "get-by-id": lambda: st().get(facts["head_id"]),
        "get-RUN@SEQ": lambda: st().get("r1@2"),
        "read-head": lambda: [read_all(r) for r in runs],
        "read-RUN@SEQ": lambda: read_all("r1@2"),
        "read-by-id": lambda: read_all(facts["head_id"]),
        "resume": lambda: st().resume("r1"),
        "effects": lambda: (run_effects(st().repo, "r1"), st().ledger("r1")),
        "verify": lambda: verify(st().repo),
        "verify-read-data": lambda: verify(st().repo, read_data=True),
        "check": lambda: check(st()),
        "usage": lambda: usage(st().repo),
        "copy-out": lambda: copy_runs(st().repo, dst()),
        "export": lambda: export_archive(st().repo, os.path.join(scratch, f"out-{n[0]}.zip")),
        "gc-dry-run": lambda: gc(st().repo, dry_run=True),
        # writers last: they may change the hostile store
        "checkpoint": lambda: st().resume("r1").checkpoint(FUTURE),
        "gc": lambda: gc(st().repo),
        "forget": lambda: forget_snapshots(st().repo, {"r2": [1]}),
        "erase": lambda: erase(st().repo, "r3", reason="hostile corpus"),
    }


CLI_COMMANDS: list[tuple[str, list[str]]] = [
    ("ls", ["ls", "{store}"]),
    ("log", ["log", "{store}", "r1"]),
    ("show", ["show", "{store}", "r1"]),
    ("cat", ["cat", "{store}", "{head_id}", "plan"]),
    ("effects", ["effects", "{store}", "r1"]),
    ("verify", ["verify", "{store}"]),
    ("verify --read-data", ["verify", "--read-data", "{store}"]),
    ("check", ["check", "{store}"]),
    ("du", ["du", "{store}"]),
    ("gc --dry-run", ["gc", "--dry-run", "{store}"]),
    ("copy", ["copy", "{store}", "{scratch}/cli-copy"]),
    ("export", ["export", "{store}", "{scratch}/cli-out.zip"]),
]


def run_cli(args: list[str], store: str, scratch: str, timeout: float, mem: int,
            facts: dict[str, str]) -> tuple[str, list[str]]:
    """One CLI command in its own process; (outcome, outside accesses)."""
    access = os.path.join(scratch, "cli-access.json")
    argv = [a.format(store=store, scratch=scratch, head_id=facts["head_id"]) for a in args]
    cmd = [sys.executable, "-m", "tests.hostile_child", "--cli", access, str(mem), store,
           scratch, *argv]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                           env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    except subprocess.TimeoutExpired:
        return "hang", []
    hits: list[str] = []
    if os.path.exists(access):
        with open(access) as f:
            hits = json.load(f)
        os.unlink(access)
    err = p.stderr
    if "MemoryError" in err:
        return "oom", hits
    if "Traceback" in err:
        last = err.strip().splitlines()[-1]
        return f"escape:{last[:200]}", hits
    if p.returncode == 0 or p.returncode == 1:
        return ("ok" if p.returncode == 0 else "problems"), hits
    if p.returncode in (2, 3) and "ckptfs: error (" in err:
        cat = err.split("ckptfs: error (", 1)[1].split(")", 1)[0]
        return f"error:{cat}", hits
    return f"escape:exit {p.returncode}: {err.strip()[-200:]}", hits


def cli_in_process(args: list[str], store: str, scratch: str, facts: dict[str, str],
                   timeout: float) -> str:
    """One CLI command run through ``ckptfs.cli.main`` in this process (the code the console
    script runs, without the interpreter start-up): its outcome by exit code and stderr."""
    import contextlib
    import io

    from ckptfs.cli import main

    argv = [a.format(store=store, scratch=scratch, head_id=facts["head_id"]) for a in args]
    err = io.StringIO()
    rc: list[int] = []

    def call() -> None:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            rc.append(main(argv))

    res = outcome(call, timeout)
    if res != "ok":
        return res  # an exception escaped main(): the console script would print a traceback
    text = err.getvalue()
    if rc[0] in (0, 1):
        return "ok" if rc[0] == 0 else "problems"
    if rc[0] in (2, 3) and "ckptfs: error (" in text:
        return "error:" + text.split("ckptfs: error (", 1)[1].split(")", 1)[0]
    return f"escape:exit {rc[0]}: {text.strip()[-200:]}"


def _cli_main(argv: list[str]) -> int:
    access, mem, store, scratch, *args = argv
    cap_memory(int(mem))
    watch = Watch()
    watch.allow(store, scratch)
    sys.addaudithook(watch)
    from ckptfs.cli import main

    try:
        return main(args)
    finally:
        watch.allowed = []
        with open(access, "w") as f:
            json.dump(watch.hits, f)


def _api_main(spec_path: str, out_path: str) -> None:
    with open(spec_path) as f:
        spec = json.load(f)
    cap_memory(spec["mem"])
    signal.signal(signal.SIGALRM, _alarm)
    import ckptfs  # noqa: F401 - import before the hook: module loading is not an access
    import ckptfs.cli  # noqa: F401
    import tests.hostile_corpus  # noqa: F401

    entry_points("x", "x", spec["facts"])  # imports every module the entry points need
    watch = Watch()
    sys.addaudithook(watch)
    with open(out_path, "a") as out:
        for job in spec["stores"]:
            eps = entry_points(job["store"], job["scratch"], spec["facts"])
            skip = set(job.get("skip", ()))  # done by an earlier child that then blocked
            for name, fn in eps.items():
                if name in skip:
                    continue
                watch.allow(job["store"], job["scratch"])
                res = outcome(fn, spec["timeout"])
                hits, watch.allowed = list(watch.hits), []
                out.write(json.dumps({"case": job["case"], "api": name, "outcome": res,
                                      "outside": hits}) + "\n")
                out.flush()
            for name, args in CLI_COMMANDS:
                if (name not in spec.get("cli_in_process", [n for n, _ in CLI_COMMANDS])
                        or f"cli {name}" in skip):
                    continue
                watch.allow(job["store"], job["scratch"])
                res = cli_in_process(args, job["store"], job["scratch"], spec["facts"],
                                     spec["timeout"])
                hits, watch.allowed = list(watch.hits), []
                out.write(json.dumps({"case": job["case"], "cli": name, "outcome": res,
                                      "outside": hits}) + "\n")
                out.flush()
            if job.get("cli"):
                for name, args in CLI_COMMANDS:
                    if f"cli-process {name}" in skip:
                        continue
                    res, hits = run_cli(args, job["store"], job["scratch"],
                                        spec["cli_timeout"], spec["mem"], spec["facts"])
                    out.write(json.dumps({"case": job["case"], "cli-process": name,
                                          "outcome": res, "outside": hits}) + "\n")
                    out.flush()


if __name__ == "__main__":
    if sys.argv[1] == "--cli":
        sys.exit(_cli_main(sys.argv[2:]))
    _api_main(sys.argv[1], sys.argv[2])
