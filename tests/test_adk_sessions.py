"""CkptfsSessionService against ADK's own session services: the same calls, the same answers
(ADK's package ships no session test suite to run against another service, so this module is
that suite, run on InMemorySessionService, SqliteSessionService and CkptfsSessionService);
and reads that cost O(what they return): ``get_session(num_recent_events=10)`` on a
10,000-event session, objects and S3 requests counted."""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("google.adk")

from google.adk.errors._stale_session_error import StaleSessionError  # noqa: E402
from google.adk.errors.already_exists_error import AlreadyExistsError  # noqa: E402
from google.adk.events.event import Event  # noqa: E402
from google.adk.events.event_actions import EventActions  # noqa: E402
from google.adk.sessions import InMemorySessionService  # noqa: E402
from google.adk.sessions.base_session_service import (  # noqa: E402
    BaseSessionService,
    GetSessionConfig,
)
from google.adk.sessions.sqlite_session_service import SqliteSessionService  # noqa: E402
from google.genai import types  # noqa: E402

import ckptfs  # noqa: E402
from ckptfs.errors import ConflictError  # noqa: E402
from ckptfs.integrations.google_adk import CkptfsSessionService, SessionConflict  # noqa: E402
from ckptfs.integrations.google_adk import log as adk_log  # noqa: E402
from ckptfs.integrations.google_adk import names  # noqa: E402
from ckptfs.storage.local import LocalStorage  # noqa: E402
from tests.conftest import S3Requests, new_s3_url  # noqa: E402

APP, OTHER_APP = "shop", "bank"


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture(params=["memory", "sqlite", "ckptfs"])
def service(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseSessionService]:
    if request.param == "memory":
        yield InMemorySessionService()
    elif request.param == "sqlite":
        yield SqliteSessionService(str(tmp_path / "adk.db"))
    else:
        svc = CkptfsSessionService(str(tmp_path / "store"))
        yield svc
        svc.close()


def event(text: str, ts: float, delta: dict[str, Any] | None = None) -> Event:
    return Event(author="user", invocation_id="inv", timestamp=ts,
                 content=types.Content(role="user", parts=[types.Part(text=text)]),
                 actions=EventActions(state_delta=delta or {}))


def texts(session: Any) -> list[str]:
    return [e.content.parts[0].text for e in session.events]


def test_state_scopes_events_and_lifecycle(service: BaseSessionService) -> None:
    async def go() -> None:
        s = await service.create_session(
            app_name=APP, user_id="u1", session_id="s1",
            state={"a": 1, "app:theme": "dark", "user:lang": "en", "temp:t": 0})
        assert s.state == {"a": 1, "app:theme": "dark", "user:lang": "en"}
        with pytest.raises(AlreadyExistsError):
            await service.create_session(app_name=APP, user_id="u1", session_id="s1")
        t0 = time.time() - 100
        for i in range(6):
            delta = {"n": i, "temp:scratch": i}
            if i == 2:
                delta.update({"app:theme": "light", "user:lang": "fr"})
            await service.append_event(s, event(f"m{i}", t0 + i, delta))
        assert s.state["temp:scratch"] == 5  # temp: reaches the live session ...
        got = await service.get_session(app_name=APP, user_id="u1", session_id="s1")
        assert got is not None and texts(got) == [f"m{i}" for i in range(6)]
        assert got.state == {"a": 1, "n": 5, "app:theme": "light", "user:lang": "fr"}
        assert all("temp:scratch" not in e.actions.state_delta for e in got.events)  # ... not storage
        assert got.last_update_time == pytest.approx(t0 + 5)
        tail = await service.get_session(app_name=APP, user_id="u1", session_id="s1",
                                         config=GetSessionConfig(num_recent_events=2))
        assert tail is not None and texts(tail) == ["m4", "m5"] and tail.state == got.state
        none = await service.get_session(app_name=APP, user_id="u1", session_id="s1",
                                         config=GetSessionConfig(num_recent_events=0))
        assert none is not None and none.events == []
        after = await service.get_session(app_name=APP, user_id="u1", session_id="s1",
                                          config=GetSessionConfig(after_timestamp=t0 + 3.5))
        assert after is not None and texts(after) == ["m4", "m5"]
        both = await service.get_session(
            app_name=APP, user_id="u1", session_id="s1",
            config=GetSessionConfig(num_recent_events=5, after_timestamp=t0 + 0.5))
        assert both is not None and texts(both) == ["m1", "m2", "m3", "m4", "m5"]
        # app: state is the app's (every user), user: state the user's (every session)
        s2 = await service.create_session(app_name=APP, user_id="u2", session_id="s2")
        assert s2.state == {"app:theme": "light"}
        s3 = await service.create_session(app_name=APP, user_id="u1", session_id="s3")
        assert s3.state == {"app:theme": "light", "user:lang": "fr"}
        s4 = await service.create_session(app_name=OTHER_APP, user_id="u1", session_id="s1")
        assert s4.state == {}
        assert await service.get_user_state(app_name=APP, user_id="u1") == {"lang": "fr"}
        listed = await service.list_sessions(app_name=APP)
        assert [(x.user_id, x.id) for x in listed.sessions] == [("u1", "s1"), ("u2", "s2"),
                                                                ("u1", "s3")]
        assert all(x.events == [] for x in listed.sessions)
        assert listed.sessions[0].state == got.state
        mine = await service.list_sessions(app_name=APP, user_id="u1")
        assert [x.id for x in mine.sessions] == ["s1", "s3"]
        assert await service.get_session(app_name=APP, user_id="u2", session_id="s1") is None
        await service.delete_session(app_name=APP, user_id="u1", session_id="s1")
        assert await service.get_session(app_name=APP, user_id="u1", session_id="s1") is None
        assert [x.id for x in (await service.list_sessions(app_name=APP)).sessions] == [
            "s2", "s3"]
        again = await service.create_session(app_name=APP, user_id="u1", session_id="s1")
        await service.append_event(again, event("new", time.time()))
        back = await service.get_session(app_name=APP, user_id="u1", session_id="s1")
        assert back is not None and texts(back) == ["new"]
        assert back.state == {"app:theme": "light", "user:lang": "fr"}
        await service.delete_session(app_name=APP, user_id="u9", session_id="nope")

    run(go())


@pytest.mark.parametrize("kind", ["sqlite", "ckptfs"])
def test_a_stale_copy_cannot_append(tmp_path: Path, kind: str) -> None:
    """Two copies of one session: the second to append is refused and stores nothing."""
    svc: BaseSessionService = (SqliteSessionService(str(tmp_path / "a.db")) if kind == "sqlite"
                               else CkptfsSessionService(str(tmp_path / "store")))

    async def go() -> None:
        await svc.create_session(app_name=APP, user_id="u", session_id="s")
        a = await svc.get_session(app_name=APP, user_id="u", session_id="s")
        b = await svc.get_session(app_name=APP, user_id="u", session_id="s")
        assert a is not None and b is not None
        await svc.append_event(a, event("from a", time.time() + 1))
        with pytest.raises(StaleSessionError) as e:
            await svc.append_event(b, event("from b", time.time() + 2))
        if kind == "ckptfs":
            assert isinstance(e.value, SessionConflict)
            assert isinstance(e.value, ConflictError)
        got = await svc.get_session(app_name=APP, user_id="u", session_id="s")
        assert got is not None and texts(got) == ["from a"]
        await svc.append_event(got, event("after", time.time() + 3))  # a fresh copy appends

    run(go())


def test_segments_seal_by_count_and_by_bytes(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Small segments (4 events, 3,000 bytes): every read, across open and sealed segments and
    after a resume in a new service, returns exactly what was appended."""
    monkeypatch.setattr(adk_log, "SEGMENT", 4)
    monkeypatch.setattr(adk_log, "SEGMENT_BYTES", 3000)
    url = str(tmp_path / "store")
    svc = CkptfsSessionService(url)
    s = run(svc.create_session(app_name=APP, user_id="u", session_id="s"))
    want = [f"m{i} " + "y" * (1700 if i % 5 == 3 else i * 7) for i in range(30)]
    for i, text in enumerate(want[:20]):
        run(svc.append_event(s, event(text, 1_700_000_000.0 + i)))
    other = CkptfsSessionService(url)  # a new process resumes: sealed segments stay unread
    s2 = run(other.get_session(app_name=APP, user_id="u", session_id="s"))
    assert s2 is not None and texts(s2) == want[:20]
    for i, text in enumerate(want[20:], 20):
        run(other.append_event(s2, event(text, 1_700_000_000.0 + i)))
    head = other.store.repo.resolve(other.find(names.session_base(APP, "u", "s"))[0])
    kinds = {n: e.kind for n, e in head.manifest.entries.items() if n.startswith("events/")}
    assert list(kinds.values())[-1] == "value" and set(list(kinds.values())[:-1]) == {"blob"}
    sizes = [head.manifest.entries[n].size for n in kinds]
    assert len(kinds) > 8 and all(x <= 3000 for x in sizes[:-1])  # some sealed by bytes
    fresh = CkptfsSessionService(url)
    for n in (None, 1, 3, 4, 5, 9, 17, 30, 31):
        cfg = None if n is None else GetSessionConfig(num_recent_events=n)
        got = run(fresh.get_session(app_name=APP, user_id="u", session_id="s", config=cfg))
        assert got is not None and texts(got) == want[-n if n else 0:], n
    for t in (0.0, 7.5, 12.0, 29.0, 40.0):
        got = run(fresh.get_session(app_name=APP, user_id="u", session_id="s",
                                    config=GetSessionConfig(after_timestamp=1.7e9 + t)))
        assert got is not None and texts(got) == [w for i, w in enumerate(want) if i >= t], t


# -- reads cost O(what they return) -----------------------------------------------------------
def grow(svc: CkptfsSessionService, sid: str, n: int, per_commit: int = 100) -> None:
    """A session of ``n`` events, ``per_commit`` per commit (the layout ``append_event``
    writes one at a time; this only builds long histories fast)."""
    run(svc.create_session(app_name=APP, user_id="u", session_id=sid))
    rid, _ = svc.find(names.session_base(APP, "u", sid))
    r = svc.live_run(rid)
    t0 = 1_700_000_000.0
    for start in range(0, n, per_commit):
        evs = [event(f"event {i} " + "x" * (i % 300), t0 + i)
               for i in range(start, min(n, start + per_commit))]
        state = dict(r.state)
        changed, _ = adk_log.append_items(state, [e.model_dump_json(exclude_none=True)
                                                  for e in evs], [e.timestamp for e in evs])
        r.checkpoint(state, changed=changed)


class CountingStorage(LocalStorage):
    """Local storage counting the objects read or listed (each path once per call)."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.calls: collections.Counter[str] = collections.Counter()

    def read(self, path: str) -> bytes:
        self.calls["read " + path] += 1
        return super().read(path)

    def read_range(self, path: str, start: int, end: int) -> bytes:
        self.calls["range " + path] += 1
        return super().read_range(path, start, end)

    def open_ranges(self, path: str) -> Any:
        self.calls["ranges " + path] += 1
        return super().open_ranges(path)

    def listing(self, prefix: str) -> Any:
        self.calls["list " + prefix] += 1
        return super().listing(prefix)

    def list(self, prefix: str) -> list[str]:
        self.calls["list " + prefix] += 1
        return super().list(prefix)

    def list_after(self, prefix: str, after: str) -> list[str] | None:
        self.calls["list " + prefix] += 1
        return super().list_after(prefix, after)


def _local_reads(url: str, sid: str, config: GetSessionConfig | None) -> tuple[int, int]:
    counting = CountingStorage(url)
    svc = CkptfsSessionService(ckptfs.Store(counting))  # a fresh process: nothing known
    got = run(svc.get_session(app_name=APP, user_id="u", session_id=sid, config=config))
    assert got is not None
    return sum(counting.calls.values()), len(got.events)


def test_tail_read_of_a_10000_event_session_is_bounded(tmp_path: Path, capsys: Any) -> None:
    url = str(tmp_path / "store")
    svc = CkptfsSessionService(url)
    grow(svc, "long", 10_000)
    grow(svc, "short", 100)
    ten = GetSessionConfig(num_recent_events=10)
    long_ten, n = _local_reads(url, "long", ten)
    short_ten, _ = _local_reads(url, "short", ten)
    long_all, n_all = _local_reads(url, "long", None)
    assert n == 10 and n_all == 10_000
    # the same objects for the last 10 of 10,000 events as of 100
    assert long_ten <= short_ten + 2, (long_ten, short_ten)
    after = GetSessionConfig(after_timestamp=1_700_000_000.0 + 9_995)
    long_after, n_after = _local_reads(url, "long", after)
    assert n_after == 5 and long_after <= short_ten + 2
    counting = CountingStorage(url)  # a process reading the whole session every turn
    again = CkptfsSessionService(ckptfs.Store(counting))
    reads = []
    for _ in range(2):
        assert len(run(again.get_session(app_name=APP, user_id="u", session_id="long")
                       ).events) == 10_000
        reads.append(sum(counting.calls.values()))
        counting.calls.clear()
    assert reads[1] < reads[0] - 2 * 9, reads  # 9 sealed segments' events and index: read once
    fresh = CkptfsSessionService(url)
    for cfg, first in ((ten, 9_990), (GetSessionConfig(num_recent_events=1_500), 8_500),
                       (None, 0), (GetSessionConfig(after_timestamp=1_700_000_000.0 + 1_000.5),
                                   1_001)):
        got = run(fresh.get_session(app_name=APP, user_id="u", session_id="long", config=cfg))
        assert got is not None and texts(got) == [  # across sealed segments too
            f"event {i} " + "x" * (i % 300) for i in range(first, 10_000)], cfg
    with capsys.disabled():
        print(f"\nADK get_session on local disk, objects read: num_recent_events=10 of 10,000 "
              f"events {long_ten} (of 100: {short_ten}); after_timestamp (5 events) "
              f"{long_after}; all 10,000 events {long_all}, again in the same process {reads[1]}")


def test_tail_read_on_s3_counts_requests(s3_options: dict[str, Any], capsys: Any) -> None:
    url = new_s3_url()
    svc = CkptfsSessionService(url, **s3_options)
    grow(svc, "long", 10_000, per_commit=500)
    grow(svc, "short", 100)
    counts = {}
    for sid in ("long", "short"):
        fresh = CkptfsSessionService(url, **s3_options)
        fresh.store.repo.load_config()
        c = S3Requests(fresh.store)
        got = run(fresh.get_session(app_name=APP, user_id="u", session_id=sid,
                                    config=GetSessionConfig(num_recent_events=10)))
        assert got is not None and len(got.events) == 10
        counts[sid] = c.take()
    assert sum(counts["long"].values()) <= sum(counts["short"].values()) + 2, counts
    # appends: the first in a process resumes the run (reads the head's entries, O(history)),
    # the next ones write the new record and read nothing
    fresh = CkptfsSessionService(url, **s3_options)
    got = run(fresh.get_session(app_name=APP, user_id="u", session_id="long",
                                config=GetSessionConfig(num_recent_events=10)))
    c = S3Requests(fresh.store)
    appends = []
    for i in range(3):
        run(fresh.append_event(got, event(f"more {i}", 1_800_000_000.0 + i)))
        appends.append(dict(c.take()))
    assert "GetObject" not in appends[2] and sum(appends[2].values()) <= 3, appends
    # one look at the maintenance lease per append, though each runs in a new worker thread
    # (asyncio.to_thread): a thread's first commit reuses another thread's quiet look as its
    # look before writing (ckptfs.store.sweeps.SweepGuard.before_write); it listed twice
    assert all(a.get("ListObjectsV2", 0) <= 1 for a in appends[1:]), appends
    again = run(fresh.get_session(app_name=APP, user_id="u", session_id="long",
                                  config=GetSessionConfig(num_recent_events=4)))
    assert again is not None and texts(again)[1:] == ["more 0", "more 1", "more 2"]
    with capsys.disabled():
        print(f"\nADK get_session(num_recent_events=10) on moto S3: 10,000 events "
              f"{dict(counts['long'])}; 100 events {dict(counts['short'])}; append_event "
              f"requests, first three in a process: {appends}")


def test_old_snapshots_are_forgotten_as_a_session_grows(tmp_path: Path) -> None:
    """Every ``forget_every`` commits, append_event forgets the session run's snapshots before
    its head (the head holds the whole session): after gc the run keeps a handful of
    snapshots, its files take less room than with forget_every=0, and a fresh service reads
    every event and the state back."""
    from ckptfs.integrations.agent_common import forgets_done
    from ckptfs.ops.gc import gc

    sizes = {}
    for every in (0, 8):
        url = str(tmp_path / f"e{every}")
        svc = CkptfsSessionService(url, forget_every=every)
        s = run(svc.create_session(app_name=APP, user_id="u", session_id="s"))
        for i in range(60):
            run(svc.append_event(s, event(f"event {i} " + "words " * 40, 1_700_000_000.0 + i,
                                          {"n": i})))
        assert forgets_done(60)
        gc(svc.store.repo, grace_ms=0)
        rid, _ = svc.find(names.session_base(APP, "u", "s"))
        seqs = svc.store.repo.seqs(rid)
        got = run(CkptfsSessionService(url).get_session(app_name=APP, user_id="u",
                                                        session_id="s"))
        assert got is not None and got.state == {"n": 59}
        assert texts(got) == [f"event {i} " + "words " * 40 for i in range(60)]
        sizes[every] = (len(seqs), sum(f.stat().st_size for f in Path(url).rglob("*")
                                       if f.is_file()))
        svc.close()
    assert sizes[0][0] == 61 and sizes[8][0] <= 8, sizes  # 61: create + 60 events
    assert sizes[8][1] < sizes[0][1] / 2, sizes
