"""References from a store nobody vetted (issue 13, "Hostile stores": outside the root).

A store's ``ref`` entries name URIs the store's author chose. Reading the store must not make
requests or open files its reader did not allow (spec/format.md 6.2): by default no reference
is dereferenced at all; a ``RefPolicy`` (``ref_policy=``, CLI ``--allow-refs``) names the
schemes, hosts and local folders that may be checked; ``::`` chains and caching or archive
wrappers are never followed; local targets are opened without following links, non-blocking,
regular files only, read no further than the declared size.

Measured here: requests that reached a loopback HTTP server (0 by default, from every entry
point), files written outside the store by a ``simplecache::`` chain (0), and hangs on
``/dev/zero`` and a FIFO (none: each runs in a subprocess with a timeout).
"""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ckptfs
from ckptfs.errors import InvalidName, MissingReference
from ckptfs.format.digest import Digest
from ckptfs.ops.check import check
from tests.clihelp import cli

REFS_TIMEOUT = 60  # seconds a subprocess may take before we call it a hang
ROOT = Path(__file__).resolve().parent.parent


class Counter:
    """A loopback HTTP server that answers every path with 3 bytes and counts requests."""

    def __init__(self, redirect_to: str | None = None) -> None:
        self.requests: list[str] = []
        counter = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self, body: bool) -> None:
                counter.requests.append(f"{self.command} {self.path}")
                if redirect_to and self.path.startswith("/redirect"):
                    self.send_response(302)
                    self.send_header("Location", redirect_to)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Length", "3")
                self.end_headers()
                if body:
                    self.wfile.write(b"abc")

            def do_HEAD(self) -> None:  # noqa: N802
                self._answer(False)

            def do_GET(self) -> None:  # noqa: N802
                self._answer(True)

            def log_message(self, *a: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def server() -> Iterator[Counter]:
    s = Counter()
    yield s
    s.close()


def _run(code: str, *, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter with this tree first on the path, under a timeout."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    try:
        return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                              text=True, timeout=REFS_TIMEOUT, env=full_env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"hung for {REFS_TIMEOUT}s (a reference read blocked)")


# -- no requests by default ---------------------------------------------------------------------
def test_http_ref_makes_no_request_from_any_entry_point(tmp_path: Path, server: Counter) -> None:
    url = str(tmp_path / "store")
    store = ckptfs.open_store(url)
    store.start_run("r").checkpoint({"web": ckptfs.Ref(f"{server.base}/data", size=3,
                                                       digest=Digest.of(b"abc")), "x": 1})
    assert server.requests == []  # writing a reference never reads it
    with pytest.raises(MissingReference) as e:
        store.resume("r")
    (name, why), = e.value.problems
    assert name == "web" and "not checked" in why and "--allow-refs" in why
    assert "ref_policy" in why
    assert store.read("r")["web"].missing
    assert ckptfs.open_store(url).read("r", lenient_refs=True)["x"] == 1
    report = check(store, strict_refs=True)
    assert not report.ok and "not checked" in report.failed[0].message
    assert check(store).ok  # lenient: marked, not fetched
    cli("check", url)
    cli("check", url, "--strict-refs", check=1)
    cli("fork", url, "r", "r2")
    cli("show", url, "r")
    cli("cat", url, "r", "web")
    assert server.requests == [], server.requests


def test_http_ref_is_checked_where_the_policy_allows_its_host(tmp_path: Path,
                                                              server: Counter) -> None:
    url = str(tmp_path / "store")
    ckptfs.open_store(url).start_run("r").checkpoint(
        {"web": ckptfs.Ref(f"{server.base}/data", size=3, digest=Digest.of(b"abc"))})
    policy = ckptfs.RefPolicy.allow(server.base)
    run = ckptfs.open_store(url, ref_policy=policy).resume("r")
    assert run.state["web"].missing is None and server.requests
    seen = len(server.requests)
    # per call, too; and the CLI flag
    assert ckptfs.open_store(url).read("r", ref_policy=policy)["web"].missing is None
    cli("check", url, "--strict-refs", "--allow-refs", server.base)
    assert len(server.requests) > seen
    # another host, port or scheme is not the allowed one
    for other in ("http://127.0.0.1:1", "https://" + server.base.split("://")[1],
                  "http://localhost:" + server.base.rsplit(":", 1)[1]):
        with pytest.raises(MissingReference, match="not checked"):
            ckptfs.open_store(url, ref_policy=ckptfs.RefPolicy.allow(other)).resume("r")


def test_redirect_to_another_host_is_not_followed(tmp_path: Path) -> None:
    inner = Counter()
    outer = Counter(redirect_to=f"{inner.base}/secret")
    try:
        url = str(tmp_path / "store")
        ckptfs.open_store(url).start_run("r").checkpoint(
            {"web": ckptfs.Ref(f"{outer.base}/redirect", size=3, digest=Digest.of(b"abc"))})
        store = ckptfs.open_store(url, ref_policy=ckptfs.RefPolicy.allow(outer.base))
        with pytest.raises(MissingReference):
            store.resume("r")
        assert outer.requests and inner.requests == []
    finally:
        inner.close()
        outer.close()


@pytest.mark.parametrize("uri", [
    "http://user@127.0.0.1:9/x", "http://127.0.0.1:9/a/../b", "http://127.0.0.1:9/a/%2e%2e/b"])
def test_tricky_urls_are_not_checked_even_when_the_host_is_allowed(tmp_path: Path,
                                                                    uri: str) -> None:
    store = ckptfs.open_store(str(tmp_path / "store"),
                              ref_policy=ckptfs.RefPolicy.allow("http://127.0.0.1:9"))
    store.start_run("r").checkpoint({"web": ckptfs.Ref(uri)})
    assert "not checked" in (store.read("r")["web"].missing or "")


def test_policy_specs_are_checked() -> None:
    for bad in ("simplecache::file:///tmp", "https://", "", "zip://x", "http://a/../b",
                "http://[::1"):
        with pytest.raises(InvalidName):
            ckptfs.RefPolicy.allow(bad)
    ckptfs.RefPolicy.allow("https://*", "s3://bucket/prefix", "/data", "file:///srv")


# -- chained and caching URLs -------------------------------------------------------------------
@pytest.mark.parametrize("scheme", ["simplecache::", "filecache::", "blockcache::"])
def test_cache_chain_writes_nothing_outside(tmp_path: Path, scheme: str) -> None:
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"abc")
    watched = tmp_path / "tmpdir"
    watched.mkdir()
    url = str(tmp_path / "store")
    uri = f"{scheme}file://{outside}"
    ckptfs.open_store(url).start_run("r").checkpoint(
        {"doc": ckptfs.Ref(uri, size=3, digest=Digest.of(b"abc"))})
    p = _run(f"""
        import ckptfs
        from ckptfs.ops.check import check
        for policy in (None, ckptfs.RefPolicy.allow({str(tmp_path)!r})):
            s = ckptfs.open_store({url!r}, ref_policy=policy)
            print(s.read("r")["doc"].missing)
            check(s, strict_refs=True)
            try:
                s.resume("r")
            except ckptfs.errors.MissingReference as e:
                print("refused", e.problems)
        import os  # before exit: fsspec removes its temporary cache when the process ends
        print("written:", sorted(os.path.join(d, f) for d, _, fs in os.walk({str(watched)!r})
                                 for f in fs))
        """, env={"TMPDIR": str(watched), "HOME": str(watched)})
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("refused") == 2 and "chain" in p.stdout
    assert "written: []" in p.stdout, "files written outside the store"
    assert list(watched.rglob("*")) == [], "files written outside the store"


# -- local targets: allowed folders only, no links, no devices, no FIFOs ------------------------
def test_local_ref_outside_the_allowed_folders_is_not_opened(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"abc")
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "ok.txt").write_bytes(b"abc")
    (allowed / "link.txt").symlink_to(secret)
    (allowed / "dirlink").symlink_to(tmp_path)
    url = str(tmp_path / "store")
    refs = {"ok": ckptfs.Ref(str(allowed / "ok.txt"), size=3, digest=Digest.of(b"abc")),
            "fileurl": ckptfs.Ref(f"file://{allowed}/ok.txt", size=3),
            "plain": ckptfs.Ref(str(secret), size=3),
            "dotdot": ckptfs.Ref(f"{allowed}/../secret.txt", size=3),
            "link": ckptfs.Ref(str(allowed / "link.txt"), size=3),
            "dirlink": ckptfs.Ref(str(allowed / "dirlink" / "secret.txt"), size=3),
            "relative": ckptfs.Ref("secret.txt", size=3)}
    ckptfs.open_store(url).start_run("r").checkpoint(refs)
    default = ckptfs.open_store(url).read("r")
    assert all("not checked" in (default[k].missing or "") for k in refs)
    got = ckptfs.open_store(url, ref_policy=ckptfs.RefPolicy.allow(str(allowed))).read("r")
    assert got["ok"].missing is None and got["fileurl"].missing is None
    for k in ("plain", "dotdot", "relative"):
        assert "not checked" in (got[k].missing or ""), (k, got[k].missing)
    for k in ("link", "dirlink"):
        assert "link" in (got[k].missing or ""), (k, got[k].missing)


def test_declared_size_bounds_what_is_read(tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    with open(big, "wb") as f:
        f.truncate(1 << 33)  # 8 GiB sparse: must not be hashed
    url = str(tmp_path / "store")
    ckptfs.open_store(url).start_run("r").checkpoint(
        {"big": ckptfs.Ref(str(big), size=3, digest=Digest.of(b"abc"))})
    got = ckptfs.open_store(url, ref_policy=ckptfs.RefPolicy.allow(str(tmp_path))).read("r")
    assert "8589934592 bytes, expected 3" in (got["big"].missing or "")


@pytest.mark.parametrize("target", ["/dev/zero", "fifo"])
def test_device_and_fifo_refs_do_not_hang(tmp_path: Path, target: str) -> None:
    if target == "fifo":
        target = str(tmp_path / "fifo")
        os.mkfifo(target)
    url = str(tmp_path / "store")
    ckptfs.open_store(url).start_run("r").checkpoint(
        {"dev": ckptfs.Ref(target, digest=Digest.of(b"abc")),
         "sized": ckptfs.Ref(target, size=3, digest=Digest.of(b"abc"))})
    folder = os.path.dirname(target)
    p = _run(f"""
        import ckptfs
        from ckptfs.ops.check import check
        for policy in (None, ckptfs.RefPolicy.allow({folder!r})):
            s = ckptfs.open_store({url!r}, ref_policy=policy)
            st = s.read("r")
            print(st["dev"].missing, "|", st["sized"].missing)
            assert not check(s, strict_refs=True).ok
        """)
    assert p.returncode == 0, p.stderr
    default, allowed = p.stdout.strip().splitlines()
    assert default.count("not checked") == 2
    assert allowed.count("not a regular file") == 2, allowed
    p = cli("check", url, "--strict-refs", "--allow-refs", folder, check=1)
    assert "not a regular file" in p.stdout


# -- the sweep: every URI shape against every entry point that restores -------------------------
def _corpus(base: str, tmp: Path) -> dict[str, str]:
    """Reference URIs a hostile store may hold; ``base`` is a counting loopback server."""
    fifo = tmp / "fifo"
    os.mkfifo(fifo)
    outside = tmp / "outside.bin"
    outside.write_bytes(b"abc")
    (tmp / "link").symlink_to(outside)
    host = base.split("://", 1)[1]
    return {
        "http": f"{base}/x", "https": f"https://{host}/x", "http-userinfo": f"http://u:p@{host}/x",
        "ftp": f"ftp://{host}/x", "webdav": f"webdav+http://{host}/x",
        "simplecache-http": f"simplecache::{base}/x",
        "simplecache-file": f"simplecache::file://{outside}",
        "filecache": f"filecache::{base}/x", "blockcache": f"blockcache::file://{outside}",
        "zip": f"zip://x::file://{outside}", "tar": f"tar://x::{base}/t.tar",
        "dir": f"dir::file://{tmp}", "reference": f"reference://{base}/refs.json",
        "s3": "s3://bucket/key", "gs": "gs://bucket/key", "memory": "memory://x/y",
        "data": "data:text/plain;base64,YWJj", "dev-zero": "/dev/zero",
        "dev-urandom": "/dev/urandom",
        "fifo": str(fifo), "symlink": str(tmp / "link"), "dotdot": f"{tmp}/a/../outside.bin",
        "file-url": f"file://{outside}", "file-host": f"file://{host}/etc/hostname",
        "relative": "outside.bin", "control-chars": f"{outside}\x1b[2J",
        "bad-ipv6": "http://[::1/x", "bad-port": f"http://{host}:99999/x",
    }


def test_every_uri_shape_from_every_entry_point(tmp_path: Path, server: Counter) -> None:
    """28 URI shapes x 6 entry points with the default policy: 0 requests, 0 files written
    outside the store, 0 hangs, 0 exceptions outside ckptfs.errors. Figures in RELIABILITY.md."""
    corpus = _corpus(server.base, tmp_path)
    watched = tmp_path / "tmpdir"
    watched.mkdir()
    url = str(tmp_path / "store")
    store = ckptfs.open_store(url)
    for name, uri in corpus.items():
        store.start_run(name).checkpoint({"ref": ckptfs.Ref(uri, size=3, digest=Digest.of(b"abc"))})
    p = _run(f"""
        import json, os
        import ckptfs
        from ckptfs.errors import CkptfsError, MissingReference
        from ckptfs.ops.check import check
        s = ckptfs.open_store({url!r})
        calls = escapes = refused = 0
        for run in s.runs():
            for op in ("read", "read-strict", "resume", "fork", "check", "check-strict"):
                calls += 1
                try:
                    if op == "read":
                        assert "not checked" in s.read(run)["ref"].missing
                    elif op == "read-strict":
                        s.read(run, lenient_refs=False)
                    elif op == "resume":
                        s.resume(run)
                    elif op == "fork":
                        s.fork(run, run + "-f", lenient_refs=True)
                    else:
                        rep = check(s, runs=[run], strict_refs=op == "check-strict")
                        assert rep.ok == (op == "check")
                except MissingReference as e:
                    refused += 1
                    assert all("not checked" in why for _, why in e.problems), e.problems
                except CkptfsError:
                    pass
                except Exception as e:
                    escapes += 1
                    print("escape", run, op, repr(e))
        written = [os.path.join(d, f) for d, _, fs in os.walk({str(watched)!r}) for f in fs]
        print(json.dumps({{"calls": calls, "escapes": escapes, "refused": refused,
                          "written": written}}))
        """, env={"TMPDIR": str(watched), "HOME": str(watched),
                  "AWS_EC2_METADATA_DISABLED": "true"})
    assert p.returncode == 0, p.stderr
    figures = __import__("json").loads(p.stdout.strip().splitlines()[-1])
    assert figures["calls"] == 6 * len(corpus)
    assert figures["escapes"] == 0 and figures["written"] == [], p.stdout
    assert figures["refused"] == 2 * len(corpus)  # read-strict and resume fail closed
    assert server.requests == []
    assert (tmp_path / "outside.bin").read_bytes() == b"abc"


def test_an_allowed_host_that_never_answers_does_not_hang(tmp_path: Path) -> None:
    import socket

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts connections (the kernel does), never answers
    base = f"http://127.0.0.1:{silent.getsockname()[1]}"
    try:
        url = str(tmp_path / "store")
        ckptfs.open_store(url).start_run("r").checkpoint({"web": ckptfs.Ref(f"{base}/x", size=3)})
        p = _run(f"""
            import ckptfs
            s = ckptfs.open_store({url!r}, ref_policy=ckptfs.RefPolicy.allow({base!r}, timeout=1))
            print(s.read("r")["web"].missing)
            """)
        assert p.returncode == 0, p.stderr
        assert p.stdout.strip() not in ("", "None")  # marked missing after the timeout
    finally:
        silent.close()


@pytest.mark.parametrize("length", ["\u00b2", "\u0663", "-1", "3 3", "99999999999999999999999"])
def test_a_hostile_content_length_is_a_clean_failure(tmp_path: Path, length: str) -> None:
    """The size a server reports is untrusted text too: never a traceback, never 'verified'."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Length", length)
            self.end_headers()

        do_GET = do_HEAD  # noqa: N815

        def log_message(self, *a: Any) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{srv.server_address[1]}"
    try:
        store = ckptfs.open_store(str(tmp_path / "store"),
                                  ref_policy=ckptfs.RefPolicy.allow(base, timeout=5))
        store.start_run("r").checkpoint(
            {"web": ckptfs.Ref(f"{base}/x", size=3, digest=Digest.of(b"abc"))})
        assert store.read("r")["web"].missing
        with pytest.raises(MissingReference):
            store.resume("r")
    finally:
        srv.shutdown()
        srv.server_close()
