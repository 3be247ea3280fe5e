"""The fault proxy itself (tests/faultproxy.py): each action does what it says, triggers are
deterministic, and it stays on loopback. Plain HTTP against the session's moto server."""

from __future__ import annotations

import http.client
import time
import urllib.parse
from typing import Any

import pytest

from tests.faultproxy import FaultProxy, Rule


def _get(proxy: FaultProxy, path: str = "/", method: str = "GET",
         headers: dict[str, str] | None = None, body: bytes | None = None,
         timeout: float = 10) -> tuple[int, bytes] | None:
    """(status, body), or None when the proxy hung up without answering."""
    u = urllib.parse.urlsplit(proxy.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read()
    except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, TimeoutError):
        return None
    finally:
        conn.close()


def test_each_action(fault_proxy: FaultProxy) -> None:
    assert _get(fault_proxy) is not None and _get(fault_proxy)[0] == 200  # type: ignore[index]
    fault_proxy.set_rules([Rule("drop_request", nth=(1,))])
    assert _get(fault_proxy) is None and _get(fault_proxy) is not None
    fault_proxy.set_rules([Rule("drop_response", nth=(1,))])
    assert _get(fault_proxy) is None
    fault_proxy.set_rules([Rule("error", status=500, method="GET")])
    got = _get(fault_proxy)
    assert got is not None and got[0] == 500 and b"InternalError" in got[1]
    fault_proxy.set_rules([Rule("delay", delay=0.3)])
    t = time.monotonic()
    assert _get(fault_proxy) is not None and time.monotonic() - t >= 0.3
    fault_proxy.set_rules([Rule("delay_response", delay=2.0, limit=1)])
    assert _get(fault_proxy, timeout=0.5) is None  # the client gave up; the proxy survives
    assert _get(fault_proxy) is not None
    assert fault_proxy.faults == {"drop_request": 1, "drop_response": 1, "error": 1,
                                  "delay": 1, "delay_response": 1}


def test_strip_header_makes_a_conditional_put_unconditional(fault_proxy: FaultProxy) -> None:
    import s3fs

    from tests.conftest import S3_BUCKET

    fs = s3fs.S3FileSystem(**fault_proxy.options(skip_instance_cache=True))
    key = f"{S3_BUCKET}/faultproxy-{time.time_ns()}"
    fs.pipe_file(key, b"one", mode="create")
    with pytest.raises(FileExistsError):
        fs.pipe_file(key, b"two", mode="create")
    fault_proxy.set_rules([Rule("strip_header", method="PUT", header="If-None-Match")])
    fs.pipe_file(key, b"three", mode="create")  # the precondition never reached the server
    assert fs.cat_file(key) == b"three"
    assert fault_proxy.faults["strip_header"] == 1


def test_triggers_are_deterministic(fault_proxy: FaultProxy) -> None:
    def pattern(rule: Rule) -> list[bool]:
        fault_proxy.set_rules([rule])
        return [_get(fault_proxy) is None for _ in range(12)]

    a = pattern(Rule("drop_response", rate=0.5, seed=7))
    assert a == pattern(Rule("drop_response", rate=0.5, seed=7)) and any(a) and not all(a)
    assert pattern(Rule("drop_response", nth=(2, 5))) == [i in (1, 4) for i in range(12)]
    assert pattern(Rule("drop_response", limit=2)) == [i < 2 for i in range(12)]
    fault_proxy.set_rules([Rule("drop_response", first_per_path=True)])
    assert [_get(fault_proxy, p) is None for p in ("/a", "/a", "/b", "/a", "/b")] == [
        True, False, True, False, False]


def test_only_loopback() -> None:
    with pytest.raises(ValueError):
        FaultProxy("http://example.com:80")
    with pytest.raises(ValueError):
        FaultProxy("http://10.0.0.1:9000")
    with pytest.raises(ValueError):
        Rule("explode")


def test_stops_by_itself(s3_options: dict[str, Any]) -> None:
    proxy = FaultProxy(s3_options["endpoint_url"], lifetime=0.3).start()
    url = proxy.url
    time.sleep(1.0)
    u = urllib.parse.urlsplit(url)
    with pytest.raises(OSError):
        http.client.HTTPConnection(u.hostname, u.port, timeout=2).request("GET", "/")
