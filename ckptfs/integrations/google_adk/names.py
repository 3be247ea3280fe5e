"""The ckptfs runs an ADK app's sessions live in. Run ids are hashes of ADK's ids (which may
hold any characters); the ids themselves are in each session run's ``session`` entry.

* ``adk-s-<app>-<user>-<session>``: one session (events, session-scoped state);
* ``adk-a-<app>``: the app's ``app:`` state, shared by every session of the app;
* ``adk-u-<app>-<user>``: the user's ``user:`` state, shared by every session of the user;
* ``adk-x-<app>-<user>-<session>``: the session's effect ledger (tools that run once).

A session deleted and created again gets the next generation, ``<run>.2`` and so on: an erased
run is closed to writers forever (spec/retention.md section 3).
"""

from __future__ import annotations

from ckptfs.format.digest import hasher

SESSIONS = "adk-s-"
APPS = "adk-a-"
USERS = "adk-u-"
EFFECTS = "adk-x-"


def _h(domain: str, text: str, n: int) -> str:
    h = hasher()
    h.update(domain.encode() + b"\0" + text.encode("utf-8", "surrogatepass"))
    return str(h.hexdigest())[:n]


def sessions_of(app_name: str, user_id: str | None = None) -> str:
    """The run id prefix of every session of an app (or of one user of it)."""
    app = f"{SESSIONS}{_h('app', app_name, 16)}-"
    return app if user_id is None else f"{app}{_h('user', user_id, 16)}-"


def session_base(app_name: str, user_id: str, session_id: str) -> str:
    return f"{sessions_of(app_name, user_id)}{_h('session', session_id, 32)}"


def effects_base(app_name: str, user_id: str, session_id: str) -> str:
    return EFFECTS + session_base(app_name, user_id, session_id)[len(SESSIONS):]


def app_run(app_name: str) -> str:
    return f"{APPS}{_h('app', app_name, 16)}"


def user_run(app_name: str, user_id: str) -> str:
    return f"{USERS}{_h('app', app_name, 16)}-{_h('user', user_id, 16)}"


def generation(base: str, gen: int) -> str:
    return base if gen == 1 else f"{base}.{gen}"


def base_of(run_id: str) -> str:
    """``generation``'s inverse: the run id without its generation suffix."""
    head, dot, tail = run_id.rpartition(".")
    return head if dot and tail.isdigit() else run_id
