"""``CkptfsSessionService``: Google ADK's ``BaseSessionService`` over a ckptfs store.

Every ADK call is one or two ckptfs operations, run in a worker thread (``asyncio.to_thread``)
so that a slow object store never blocks the event loop:

* ``create_session``: the session's run starts (seq 1; a taken id conflicts: AlreadyExistsError);
* ``append_event``: one commit of the session's run holding the new event and, when it changed,
  the session-scoped state. The commit is create-only on the run's next sequence number, so of
  two processes appending to the same session revision exactly one commits; the other gets
  ``SessionConflict`` (ADK's ``StaleSessionError`` and ckptfs's ``ConflictError``);
* ``get_session``: the run's head (a bounded number of requests however long the history), its
  state, and only the events asked for (``log.LogReader``); the app's and user's state heads.

``app:`` and ``user:`` state live in runs of their own (``names``), shared as ADK defines them:
by every session of the app, by every session of the user. They are committed right after the
event that changed them, each update a merge into the newest head (retried when another session
committed first), so two sessions never lose each other's keys. ``temp:`` keys never reach the
store: ``append_event`` trims them through the base class first.

The event and its app:/user: deltas are in different runs, so they cannot be one commit. The
event's commit therefore also carries the deltas (entry ``scopes``: the pending deltas and the
event's timestamp), and each scope run keeps, next to its state, the timestamp of the newest
write of each key (entry ``stamps``). A process killed between the two writes leaves the deltas
pending in the session's head: the next ``get_session`` (or ``append_event``) of that session,
in any process, applies every pending key whose stamp is older than the event (a key written
since by a newer event keeps the newer value: last writer wins by event time), and the next
event's commit clears the entry. A read never returns the event without its scope state.

Retention: a session's head holds the whole session (its events' segments, its state), and a
scope run's head the whole app:/user: state, so the earlier snapshots of these runs are
history nothing reads. Every ``forget_every`` commits of a run (default ``FORGET_EVERY``; 0:
never) the service forgets its snapshots before the new head, in a background thread
(``agent_common.forget_quietly``: the run's retired marker), so the next ``ckptfs gc`` drops
the per-event records and repacks the chunks the heads still use.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from google.adk.errors._stale_session_error import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.platform import time as platform_time
from google.adk.platform import uuid as platform_uuid
from google.adk.sessions import _session_util
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
    ListSessionsResponse,
)
from google.adk.sessions.session import Session
from google.adk.sessions.state import State
from typing_extensions import override

from ckptfs import errors
from ckptfs.errors import ConflictError, ErasedError, NotFound
from ckptfs.integrations.agent_common import (
    ToolEffects,
    as_store,
    forget_quietly,
    forgets_done,
)
from ckptfs.integrations.google_adk import names
from ckptfs.integrations.google_adk.log import (
    META,
    STATE,
    LogReader,
    SealedCache,
    append_items,
    undo,
)
from ckptfs.runtime.run import Run
from ckptfs.runtime.store import Store, open_store
from ckptfs.store.repository import Snapshot

if TYPE_CHECKING:
    from ckptfs.integrations.google_adk.effects import OnceTool

T = TypeVar("T")
SCHEMA = ("google-adk-session", 1)
SCOPE_SCHEMA = ("google-adk-state", 1)
EFFECTS_SCHEMA = ("google-adk-effects", 1)
#: snapshot label holding the session's last update time (ADK's ``last_update_time``)
L_UPDATED = "adk.updated"
#: how often a scope update (app:/user: state) is retried after losing to another writer
SCOPE_RETRIES = 100
#: session-run entry: the app:/user: deltas of the head's event, until they are known applied
SCOPES = "scopes"
#: scope-run entry: key -> timestamp of the newest event that wrote it
STAMPS = "stamps"
#: a session run's snapshots before its head are forgotten every this many commits
FORGET_EVERY = 16


class SessionConflict(errors.SessionConflict, StaleSessionError):
    """Another process committed to this session since this copy of it was read: nothing was
    stored. Read the session again (``get_session``) and retry the turn on the new copy."""


class CkptfsSessionService(BaseSessionService):
    """ADK sessions in a ckptfs store: ``CkptfsSessionService("s3://bucket/agents")`` (a URL,
    a local path or an open ``ckptfs.Store``; ``storage_options`` go to ``open_store``)."""

    def __init__(self, store: Store | str | os.PathLike[str], *,
                 forget_every: int = FORGET_EVERY, **storage_options: Any) -> None:
        if forget_every < 0:
            raise errors.InvalidArgument(f"forget_every is {forget_every}: give the commits "
                                         "of a run between forgets (0: never)")
        self.forget_every = forget_every
        if storage_options and not isinstance(store, Store):
            self.store, self._owns_store = open_store(os.fspath(store), **storage_options), True
        else:
            self.store, self._owns_store = as_store(store)
        self._lock = threading.Lock()
        self._run_locks: dict[str, threading.RLock] = {}
        #: live Run handles by run id (a session appended to by this process, scope runs)
        self._runs: dict[str, Run] = {}
        #: run id base -> the generation live now
        self._live: dict[str, str] = {}
        #: effect ledgers by run id (``effects``)
        self._effects: dict[str, ToolEffects] = {}
        #: sealed segments read whole, decoded (they never change)
        self._sealed = SealedCache()
        #: (session run id, seq) whose pending app:/user: deltas this process knows applied
        self._applied: set[tuple[str, int]] = set()

    # -- plumbing ----------------------------------------------------------------------------
    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.to_thread(fn, *args, **kwargs)

    def run_lock(self, key: str) -> threading.RLock:
        with self._lock:
            lock = self._run_locks.get(key)
            if lock is None:
                lock = self._run_locks[key] = threading.RLock()
            return lock

    def _forget(self, run_id: str) -> None:
        with self._lock:
            self._runs.pop(run_id, None)

    def find(self, base: str) -> tuple[str, Snapshot | None]:
        """The live generation of ``base`` and its head (None: no such session now; the id is
        the one a new session takes). An erased generation has no records but a tombstone."""
        with self._lock:
            rid = self._live.get(base, base)
        gen = 1 if rid == base else int(rid.rsplit(".", 1)[1])
        while True:
            try:
                snap = self.store.repo.resolve(rid)
            except ErasedError:
                gen += 1
                rid = names.generation(base, gen)
                continue
            except NotFound:
                snap = None
            with self._lock:
                self._live[base] = rid
            return rid, snap

    def live_run(self, rid: str, *, create: Callable[[], Run] | None = None) -> Run:
        """This process's handle on run ``rid``: cached, else resumed at the head, else (with
        ``create``) a new run. NotFound when there is none and nothing to create."""
        with self._lock:
            run = self._runs.get(rid)
        if run is None:
            try:
                run = self.store.resume(rid)
            except ErasedError:
                raise
            except NotFound:
                if create is None:
                    raise
                run = create()
            with self._lock:
                self._runs[rid] = run
        return run

    # -- scoped state (app:, user:) ----------------------------------------------------------
    def _scope_state(self, rid: str) -> dict[str, Any]:
        try:
            snap = self.store.repo.resolve(rid)
        except NotFound:
            return {}
        return dict(LogReader(self.store.repo, snap).value(STATE))

    def _scope_update(self, rid: str, delta: Mapping[str, Any], when: float, *,
                      repair: bool = False) -> None:
        """Merge ``delta`` into the newest state of scope run ``rid`` (dict.update semantics),
        retrying on top of whatever another process committed first. ``repair``: apply only
        the keys no event newer than ``when`` wrote (a pending delta applied late)."""
        with self.run_lock(rid):
            for _ in range(SCOPE_RETRIES):
                run = self.live_run(rid, create=lambda: self.store.start_run(
                    rid, schema=SCOPE_SCHEMA))
                state = dict(run.state) if run.state else {STATE: {}}
                stamps = dict(state.get(STAMPS) or {})
                if repair:
                    delta = {k: v for k, v in delta.items() if stamps.get(k, -1.0) < when}
                    if not delta:
                        return  # applied already (stamps only grow), or newer writes since
                state[STATE] = {**state.get(STATE, {}), **delta}
                state[STAMPS] = {**stamps, **{k: max(when, stamps.get(k, when))
                                              for k in delta}}
                try:
                    snap = run.checkpoint(state, changed=[STATE, STAMPS],
                                          labels={L_UPDATED: repr(when)})
                    self._retain(rid, snap.seq)
                    return
                except ConflictError:
                    self._forget(rid)  # another session committed first: merge on its head
            raise ConflictError(f"state run {rid!r}: {SCOPE_RETRIES} updates in a row lost to "
                                "other writers; retry the turn")

    def _merged(self, app_name: str, user_id: str, session_state: Mapping[str, Any]
                ) -> dict[str, Any]:
        merged = dict(session_state)
        for k, v in self._scope_state(names.app_run(app_name)).items():
            merged[State.APP_PREFIX + k] = v
        for k, v in self._scope_state(names.user_run(app_name, user_id)).items():
            merged[State.USER_PREFIX + k] = v
        return merged

    def _apply_scopes(self, app_name: str, user_id: str, deltas: Mapping[str, Any],
                      when: float, *, repair: bool = False) -> None:
        if deltas["app"]:
            self._scope_update(names.app_run(app_name), deltas["app"], when, repair=repair)
        if deltas["user"]:
            self._scope_update(names.user_run(app_name, user_id), deltas["user"], when,
                               repair=repair)

    def _repair_scopes(self, app_name: str, user_id: str, rid: str,
                       pending: Mapping[str, Any] | None) -> None:
        """Apply the app:/user: deltas the session's head left pending (module docstring)
        unless this process knows them applied: the process that committed the event may
        have been killed before it wrote them."""
        if not pending or (rid, pending["seq"]) in self._applied:
            return
        self._apply_scopes(app_name, user_id, pending, pending["ts"], repair=True)
        with self._lock:
            self._applied.add((rid, pending["seq"]))

    def _applied_now(self, rid: str, pending: Mapping[str, Any] | None) -> None:
        if pending:
            with self._lock:
                self._applied.add((rid, pending["seq"]))

    # -- BaseSessionService --------------------------------------------------------------------
    @override
    async def create_session(self, *, app_name: str, user_id: str,
                             state: dict[str, Any] | None = None,
                             session_id: str | None = None) -> Session:
        return await self._call(self.create_session_sync, app_name, user_id, state, session_id)

    def create_session_sync(self, app_name: str, user_id: str,
                            state: dict[str, Any] | None = None,
                            session_id: str | None = None) -> Session:
        sid = (session_id.strip() if session_id else None) or platform_uuid.new_uuid()
        base = names.session_base(app_name, user_id, sid)
        deltas = _session_util.extract_json_safe_state_delta(state or {})
        now = platform_time.get_time()
        with self.run_lock(base):
            rid, head = self.find(base)
            if head is not None:
                raise AlreadyExistsError(f"Session with id {sid} already exists.")
            run = self.store.start_run(rid, schema=SCHEMA)
            meta = {"app_name": app_name, "user_id": user_id, "id": sid, "create_time": now}
            pending = _pending(deltas, 1, now)
            try:
                snap = run.checkpoint({META: meta, STATE: deltas["session"], SCOPES: pending},
                                      boundary="start", labels={L_UPDATED: repr(now)})
            except ConflictError:
                raise AlreadyExistsError(f"Session with id {sid} already exists.") from None
            with self._lock:
                self._runs[rid] = run
        self._apply_scopes(app_name, user_id, deltas, now)
        self._applied_now(rid, pending)
        session = Session(app_name=app_name, user_id=user_id, id=sid,
                          state=self._merged(app_name, user_id, deltas["session"]),
                          events=[], last_update_time=now)
        session._storage_update_marker = _marker(snap)
        return session

    @override
    async def get_session(self, *, app_name: str, user_id: str, session_id: str,
                          config: GetSessionConfig | None = None) -> Session | None:
        return await self._call(self.get_session_sync, app_name, user_id, session_id, config)

    def get_session_sync(self, app_name: str, user_id: str, session_id: str,
                         config: GetSessionConfig | None = None) -> Session | None:
        sid = session_id.strip() if session_id else session_id
        rid, snap = self.find(names.session_base(app_name, user_id, sid))
        if snap is None:
            return None
        reader = LogReader(self.store.repo, snap, self._sealed)
        meta = reader.value(META)
        if (meta.get("app_name"), meta.get("user_id"), meta.get("id")) != (app_name, user_id, sid):
            return None  # another session's run under a colliding hash: not this one
        if SCOPES in snap.manifest.entries:
            self._repair_scopes(app_name, user_id, rid, reader.value(SCOPES))
        n = config.num_recent_events if config else None
        after = config.after_timestamp if config else None
        texts = [] if n == 0 else reader.events(n, after)
        session = Session(app_name=app_name, user_id=user_id, id=sid,
                          state=self._merged(app_name, user_id, reader.value(STATE)),
                          events=[Event.model_validate_json(t) for t in texts],
                          last_update_time=_updated(snap))
        session._storage_update_marker = _marker(snap)
        return session

    @override
    async def list_sessions(self, *, app_name: str, user_id: str | None = None
                            ) -> ListSessionsResponse:
        return await self._call(self.list_sessions_sync, app_name, user_id)

    def list_sessions_sync(self, app_name: str, user_id: str | None = None
                           ) -> ListSessionsResponse:
        prefix = names.sessions_of(app_name, user_id)
        bases = sorted({names.base_of(r) for r in self.store.repo.run_ids()
                        if r.startswith(prefix)})
        out = []
        users: dict[str, dict[str, Any]] = {}
        app_state = self._scope_state(names.app_run(app_name))
        for base in bases:
            _, snap = self.find(base)
            if snap is None:
                continue
            reader = LogReader(self.store.repo, snap)
            meta = reader.value(META)
            if meta.get("app_name") != app_name or user_id not in (None, meta.get("user_id")):
                continue
            uid = meta["user_id"]
            if uid not in users:
                users[uid] = self._scope_state(names.user_run(app_name, uid))
            state = dict(reader.value(STATE))
            state.update({State.APP_PREFIX + k: v for k, v in app_state.items()})
            state.update({State.USER_PREFIX + k: v for k, v in users[uid].items()})
            out.append(Session(app_name=app_name, user_id=uid, id=meta["id"], state=state,
                               events=[], last_update_time=_updated(snap)))
        out.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=out)

    @override
    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        await self._call(self.delete_session_sync, app_name, user_id, session_id)

    def delete_session_sync(self, app_name: str, user_id: str, session_id: str) -> None:
        """Erase the session's run and its effect ledger now (ckptfs ``erase``: the records,
        then every chunk no other run uses). The id can be used again: a new generation."""
        from ckptfs.ops.erase import erase

        sid = session_id.strip() if session_id else session_id
        for base in (names.session_base(app_name, user_id, sid),
                     names.effects_base(app_name, user_id, sid)):
            with self.run_lock(base):
                rid, snap = self.find(base)
                self._forget(rid)
                with self._lock:
                    self._effects.pop(rid, None)
                if snap is not None:
                    erase(self.store.repo, rid, reason="google-adk delete_session")

    @override
    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        return await self._call(self._scope_state, names.user_run(app_name, user_id))

    @override
    async def append_event(self, session: Session, event: Event) -> Event:
        if event.partial:
            return event
        # the base class's rules: temp: state reaches the in-memory session, not the store
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        await self._call(self._store_event, session, event)
        return await super().append_event(session, event)  # the in-memory session's update

    def _store_event(self, session: Session, event: Event) -> None:
        """Commit ``event`` to the session's run, then its app:/user: deltas to theirs."""
        base = names.session_base(session.app_name, session.user_id, session.id)
        deltas = _session_util.extract_json_safe_state_delta(
            event.actions.state_delta if event.actions else {})
        with self.run_lock(base):
            rid, run = self._positioned(base, session)
            # the head's pending scope deltas are applied before this commit clears them
            self._repair_scopes(session.app_name, session.user_id, rid, run.state.get(SCOPES))
            state = dict(run.state)
            changed, grown = append_items(state, [event.model_dump_json(exclude_none=True)],
                                          [event.timestamp])
            if deltas["session"]:
                state[STATE] = {**state[STATE], **deltas["session"]}
                changed.add(STATE)
            pending = _pending(deltas, run.seq + 1, event.timestamp)
            if pending or state.get(SCOPES):
                state[SCOPES] = pending
                changed.add(SCOPES)
            try:
                snap = run.checkpoint(state, labels={L_UPDATED: repr(event.timestamp)},
                                      changed=changed)
            except ConflictError as e:
                undo(grown, state)
                self._forget(rid)
                if isinstance(e, ErasedError):
                    raise SessionNotFoundError(f"Session {session.id} not found.") from None
                raise SessionConflict(
                    f"session {session.id!r} (app {session.app_name!r}): another process "
                    "committed to it first; nothing was stored. Read it again with "
                    f"get_session and retry the turn (ckptfs: {e})") from None
            except BaseException:
                undo(grown, state)
                self._forget(rid)
                raise
        self._retain(rid, snap.seq)
        session.last_update_time = event.timestamp
        session._storage_update_marker = _marker(snap)
        self._apply_scopes(session.app_name, session.user_id, deltas, event.timestamp)
        self._applied_now(rid, pending)

    def _retain(self, rid: str, seq: int) -> None:
        """Every ``forget_every`` commits of a run, forget what precedes its head (module
        docstring)."""
        if self.forget_every and seq % self.forget_every == 0:
            forget_quietly(self.store, rid, range(1, seq))

    def _positioned(self, base: str, session: Session) -> tuple[str, Run]:
        """The session run's handle at the revision ``session`` was read at; SessionConflict
        when the store holds a newer one (another copy or process appended since)."""
        marker = session._storage_update_marker
        rid = marker.rpartition("@")[0] if marker else ""
        with self._lock:
            run = self._runs.get(rid) if names.base_of(rid) == base else None
        if run is not None and run.snapshot is not None and marker == _marker(run.snapshot):
            return rid, run  # this process's handle, at the copy's revision: no request
        rid, _ = self.find(base)
        for fresh in (False, True):
            if fresh:
                self._forget(rid)
            try:
                run = self.live_run(rid)
            except NotFound:
                raise SessionNotFoundError(f"Session {session.id} not found.") from None
            if marker is None:
                stored = _updated(run.snapshot) if run.snapshot else 0.0
                if stored <= session.last_update_time:
                    return rid, run
            elif run.snapshot is not None and marker == _marker(run.snapshot):
                return rid, run
        raise SessionConflict(
            f"session {session.id!r} (app {session.app_name!r}) was appended to since this "
            "copy was read (by another process or another copy of it); nothing was stored. "
            "Read it again with get_session and retry the turn.")

    # -- tools that run once (effects.OnceTool) ------------------------------------------------
    def once(self, func: Callable[..., Any], **kwargs: Any) -> OnceTool:
        """``OnceTool(func, self, **kwargs)``: an ADK FunctionTool whose function runs at most
        once per function call id (``require_confirmation=``, ``reconcile=``, ``timeout=``)."""
        from ckptfs.integrations.google_adk.effects import OnceTool

        return OnceTool(func, self, **kwargs)

    def effects(self, session: Session) -> ToolEffects:
        """The session's effect ledger (run ``names.effects_base``, its live generation), as
        the shared adapter layer's ``ToolEffects``: calls keyed by ADK's function call id."""
        base = names.effects_base(session.app_name, session.user_id, session.id)
        with self._lock:
            rid = self._live.get(base)
            fx = self._effects.get(rid) if rid else None
        if fx is None:
            rid, _ = self.find(base)
            fx = ToolEffects(self.store, rid, schema=EFFECTS_SCHEMA)
            with self._lock:
                fx = self._effects.setdefault(rid, fx)
        return fx

    def close(self) -> None:
        """Close the store if this service opened it."""
        forgets_done(60.0)  # the background forgets of its folds use the store
        if self._owns_store:
            self.store.close()


def _pending(deltas: Mapping[str, Any], seq: int, when: float) -> dict[str, Any]:
    """The ``scopes`` entry of commit ``seq``: its app:/user: deltas ({}: none)."""
    if not deltas["app"] and not deltas["user"]:
        return {}
    return {"seq": seq, "ts": when, "app": deltas["app"], "user": deltas["user"]}


def _marker(snap: Snapshot) -> str:
    return f"{snap.run}@{snap.seq}"


def _updated(snap: Snapshot) -> float:
    try:
        return float(snap.manifest.labels.get(L_UPDATED, "0"))
    except ValueError:
        return 0.0
