"""Shared fixtures: stores on every backend the suite can run locally, S3 included.

The S3 API is a real moto server on 127.0.0.1 started by the suite itself (one per session)
and reached through s3fs, exactly as a user reaches a bucket.
"""

from __future__ import annotations

import collections
import logging
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hypothesis
import pytest

import ckptfs
from ckptfs.storage import Storage, open_storage

#: the ckptfs pytest plugin is opt-in (issue 31: no entry point loads it into every project's
#: pytest run); this suite opts in as a user's conftest.py would
pytest_plugins = ["ckptfs.pytest_plugin"]

S3_BUCKET = "ckptfs-test"
#: generated fuzz cases and enumerated crash points, per test, for the summary line
TALLY: collections.Counter[str] = collections.Counter()

hypothesis.settings.register_profile(
    "ckptfs", database=None, deadline=None, print_blob=True,
    suppress_health_check=[hypothesis.HealthCheck.too_slow,
                           hypothesis.HealthCheck.function_scoped_fixture])
hypothesis.settings.load_profile("ckptfs")


# -- s3req14: the check window of new v2 test stores (spec/v2.md 5.4) ---------------------------
#: every maintenance operation waits the store's window after taking its lease (500 ms by
#: default): test stores get 10 ms, long beside a local commit (so writers do reuse their looks)
#: and short beside the suite's thousands of forget/gc calls. CKPTFS_CHECK_WINDOW_MS overrides.
os.environ.setdefault("CKPTFS_CHECK_WINDOW_MS", "10")
# -- end s3req14 --------------------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--fuzz-long", action="store_true", default=False,
                     help="run the fuzz tests with 50x more generated cases (slow)")
    parser.addoption("--long", action="store_true", default=False,
                     help="also run the long enumerations (tests marked 'long'; CKPTFS_LONG=1)")


#: the long enumerations (``@pytest.mark.long``) run with --long or CKPTFS_LONG=1; the default
#: suite keeps a sample of each so that it stays within about ten minutes on two cores
LONG = bool(os.environ.get("CKPTFS_LONG"))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "long: a long enumeration, run with --long or CKPTFS_LONG=1")
    if config.getoption("--long"):
        os.environ["CKPTFS_LONG"] = "1"
    if config.getoption("--fuzz-long") and not os.environ.get("CKPTFS_FUZZ_SCALE"):
        os.environ["CKPTFS_FUZZ_SCALE"] = "50"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--long") or os.environ.get("CKPTFS_LONG"):
        return
    skip = pytest.mark.skip(reason="long enumeration: run with --long or CKPTFS_LONG=1")
    for item in items:
        if item.get_closest_marker("long") is not None:
            item.add_marker(skip)


def fuzz_examples(n: int) -> int:
    """``n`` hypothesis examples, times CKPTFS_FUZZ_SCALE (50 with --fuzz-long)."""
    return n * max(1, int(os.environ.get("CKPTFS_FUZZ_SCALE") or 1))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Under pytest-xdist, a worker hands its tally to the controller (pytest_testnodedown)."""
    out = getattr(session.config, "workeroutput", None)
    if out is not None:
        out["ckptfs_tally"] = dict(TALLY)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """The controller adds up the tallies of its workers for the summary line."""
    TALLY.update(getattr(node, "workeroutput", {}).get("ckptfs_tally", {}))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if TALLY:
        fuzz = sum(v for k, v in TALLY.items() if k.startswith("fuzz:"))
        crash = sum(v for k, v in TALLY.items() if k.startswith("crash:"))
        terminalreporter.write_line(
            f"ckptfs reliability: {fuzz} fuzz cases, {crash} crash points, "
            f"{TALLY['racing commits landed']} racing commits landed and "
            f"{TALLY['racing commits refused']} refused with ConflictError, "
            f"{TALLY['reads-back that proved a landed commit']} lost answers resolved by a "
            "read-back")
        if TALLY["stateful sequences"]:  # tests/test_ops_stateful.py
            rules = ", ".join(f"{k[9:]} {v}" for k, v in sorted(TALLY.items())
                              if k.startswith("stateful:"))
            terminalreporter.write_line(
                f"ckptfs stateful ops: {TALLY['stateful sequences']} sequences, "
                f"{TALLY['stateful steps']} steps; {rules}")


@pytest.fixture(scope="session")
def s3_options() -> Iterator[dict[str, Any]]:
    """storage_options for a bucket on a moto server on loopback (started here, stopped at end)."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    opts: dict[str, Any] = {"key": "testing", "secret": "testing",
                            "endpoint_url": f"http://{host}:{port}",
                            "client_kwargs": {"region_name": "us-east-1"}}
    # the same server through the environment, so that a bare s3:// URL (and every subprocess
    # the tests start: CLI, racing writers) reaches it too
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL_S3": opts["endpoint_url"]}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    import s3fs

    fs = s3fs.S3FileSystem(**opts)
    fs.call_s3("create_bucket", Bucket=S3_BUCKET)
    try:
        yield opts
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def new_s3_url() -> str:
    """A fresh prefix in the test bucket (needs the ``s3_options`` fixture active)."""
    return f"s3://{S3_BUCKET}/{uuid.uuid4().hex}"


class S3Requests:
    """The requests an S3 store's botocore client sends, by operation name (``GetObject``,
    ``ListObjectsV2``, ...), counted from now on; as a context manager, until the block ends."""

    def __init__(self, store: ckptfs.Store) -> None:
        self.ops: collections.Counter[str] = collections.Counter()
        self._events = store.repo.storage.fs.s3.meta.events  # type: ignore[attr-defined]
        self._events.register("before-send.s3", self._hook)

    def _hook(self, **kw: Any) -> None:
        self.ops[kw.get("event_name", "?").rsplit(".", 1)[-1]] += 1

    def take(self) -> collections.Counter[str]:
        """The counts so far, and start again from zero."""
        out = self.ops.copy()
        self.ops.clear()
        return out

    def __enter__(self) -> collections.Counter[str]:
        return self.ops

    def __exit__(self, *exc: object) -> None:
        self._events.unregister("before-send.s3", self._hook)


@pytest.fixture(params=["local", "memory", "s3"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(url, storage_options) of a fresh, empty store location on each backend."""
    if request.param == "local":
        yield str(tmp_path / "store"), {}
    elif request.param == "memory":
        url = f"memory://ckptfs-test-{uuid.uuid4().hex}"
        yield url, {}
        import fsspec

        fs = fsspec.filesystem("memory")
        if fs.exists(url):
            fs.rm(url, recursive=True)
    else:
        opts = request.getfixturevalue("s3_options")
        yield new_s3_url(), opts


@pytest.fixture
def store_url(backend: tuple[str, dict[str, Any]]) -> str:
    """A fresh, empty store URL on each backend (S3 reaches moto through the environment;
    ``store_options`` gives the explicit storage_options a user would pass)."""
    return backend[0]


@pytest.fixture
def store_options(backend: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    """The storage_options that go with ``store_url``."""
    return dict(backend[1])


@pytest.fixture
def store(store_url: str, store_options: dict[str, Any]) -> ckptfs.Store:
    return ckptfs.open_store(store_url, **store_options)


@pytest.fixture
def storage(store_url: str, store_options: dict[str, Any]) -> Iterator[Storage]:
    """The raw storage backend of a fresh store URL (every backend ``store_url`` has)."""
    s = open_storage(store_url, **store_options)
    yield s
    s.close()


# -- the fault-injecting proxy (issue 13, object-store commit path) ---------------------------
@pytest.fixture
def fault_proxy(s3_options: dict[str, Any]) -> Iterator[Any]:
    """A ``tests.faultproxy.FaultProxy`` in front of the session's moto server, with no rules
    yet (``set_rules``); ``fault_proxy.options()`` are storage_options that reach moto through
    it, ``fault_proxy.env()`` the environment for subprocesses. Stopped after the test."""
    from tests.faultproxy import FaultProxy

    proxy = FaultProxy(s3_options["endpoint_url"], base_options=s3_options).start()
    try:
        yield proxy
    finally:
        proxy.stop()


# -- GCS and Azure emulators (issue 20): fake-gcs-server and Azurite on loopback --------------
def _emulator(kind: str) -> Iterator[Any]:
    """Start one emulator for the session (tests/emulators.py), point the environment at it
    (for bare URLs and subprocesses), create the test bucket; skip with the reason when it
    cannot run here."""
    from tests import emulators

    try:
        emu = emulators.start_fake_gcs() if kind == "gcs" else emulators.start_azurite()
    except emulators.Unavailable as e:
        pytest.skip(f"{kind} emulator unavailable: {e}")
    saved = {k: os.environ.get(k) for k in emu.env}
    os.environ.update(emu.env)
    try:
        emulators.make_bucket(kind, emu)
        yield emu
    finally:
        emu.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="session")
def gcs_emulator() -> Iterator[Any]:
    """fake-gcs-server on loopback (``tests.emulators.Emulator``), reached through gcsfs."""
    yield from _emulator("gcs")


@pytest.fixture(scope="session")
def azure_emulator() -> Iterator[Any]:
    """Azurite (blob service) on loopback (``tests.emulators.Emulator``), reached through adlfs."""
    yield from _emulator("azure")


@pytest.fixture(params=["gcs", "azure"])
def cloud_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """(url, storage_options) of a fresh store location on each emulator: gs:// (gcsfs on
    fake-gcs-server) and az:// (adlfs on Azurite)."""
    from tests.emulators import new_url

    emu = request.getfixturevalue(f"{request.param}_emulator")
    return new_url(request.param), dict(emu.options)
