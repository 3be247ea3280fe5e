"""A process of an ADK app for the crash tests (tests/test_adk_crash.py): one step of a
conversation against a session service, then exit (or be killed).

    python -m tests.adk_child SERVICE URL SESSION MODE [ARGS...]

SERVICE: ``ckptfs`` (URL: a store), ``sqlite`` (ADK's SqliteSessionService, URL: a file) or
``database`` (ADK's DatabaseSessionService, URL: a SQLAlchemy URL). MODE:

* ``turns TEXT...``: one turn per TEXT (creating the session if needed); ``ADK_KILL_IN=TEXT``
  SIGKILLs this process inside that turn's tool call;
* ``ask TEXT``: a turn whose tool call asks for confirmation: prints ``CONFIRM <id>``;
* ``confirm ID``: sends confirmation ``ID``: prints ``RESULT``, ``IN-DOUBT`` or ``ERROR <type>``;
* ``trial PREV_SID PREV_ID NEXT_SID DELAY_MS``: one process of the kill trials. First the
  resume of the previous trial (``-``: none): the client sends confirmation ``PREV_ID`` of
  session ``PREV_SID`` again, as it never saw the result; prints ``OUTCOME SID RESULT``,
  ``IN-DOUBT`` or ``ERROR <type>``. Then the next trial: in session ``NEXT_SID`` the model
  calls ``pay`` (amount: the digits of NEXT_SID), which asks for confirmation (prints
  ``CONFIRM SID ID``); the confirmation runs ``pay``, which appends a line to ``ADK_EFFECTS``
  (the outside world) and has this process SIGKILLed ``DELAY_MS`` ms later (0: at once,
  inside the tool);
* ``append TEXT``: reads the session, waits for file ``ADK_GO`` (after creating ``ADK_READY``),
  then appends one event: prints ``COMMITTED`` or ``CONFLICT <type>``;
* ``show``: prints the session's state (``STATE json``) and events, one JSON line each.

``ADK_KILL_AFTER_APPENDS=n`` SIGKILLs the process right after its n-th ``append_event``.
``ADK_KILL_BEFORE_SCOPES=1`` (ckptfs) SIGKILLs it between an event's commit and the commit of
its ``app:``/``user:`` state deltas (the crash point of that pair of writes).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading
import time
from typing import Any

from google.adk.events.event import Event
from google.adk.sessions.base_session_service import BaseSessionService
from google.adk.tools.function_tool import FunctionTool

from ckptfs.errors import EffectInDoubt
from tests.adk_scripted import APP, USER, confirm, confirmation_id, runner, turn, user


#: ms after the side effect at which this process is killed (None: not killed)
KILL_AFTER_MS: int | None = None


def pay(amount: int) -> dict[str, Any]:
    """Pay an amount (the side effect: a line in the file ADK_EFFECTS)."""
    with open(os.environ["ADK_EFFECTS"], "a") as f:
        f.write(f"paid {amount} pid {os.getpid()}\n")
        f.flush()
        os.fsync(f.fileno())
    delay = KILL_AFTER_MS
    if delay is not None:
        if delay == 0:
            os.kill(os.getpid(), signal.SIGKILL)

        def later() -> None:
            time.sleep(delay / 1000)
            os.kill(os.getpid(), signal.SIGKILL)

        threading.Thread(target=later, daemon=True).start()
    return {"paid": amount}


async def send(r: Any, sid: str, message: Any) -> str:
    """A turn's outcome as the trials report it."""
    try:
        await turn(r, sid, message)
        return "RESULT"
    except EffectInDoubt:
        return "IN-DOUBT"
    except Exception as e:  # the outcome the test reports
        return f"ERROR {type(e).__name__}"


def service(kind: str, url: str) -> BaseSessionService:
    if kind == "ckptfs":
        from ckptfs.integrations.google_adk import CkptfsSessionService

        return CkptfsSessionService(url)
    if kind == "sqlite":
        from google.adk.sessions.sqlite_session_service import SqliteSessionService

        return SqliteSessionService(url)
    from google.adk.sessions.database_session_service import DatabaseSessionService

    return DatabaseSessionService(url)


def tools(kind: str, svc: BaseSessionService) -> list[Any]:
    if kind == "ckptfs":
        return [svc.once(pay, require_confirmation=True)]  # type: ignore[attr-defined]
    return [FunctionTool(pay, require_confirmation=True)]


async def ensure(svc: BaseSessionService, sid: str) -> None:
    if await svc.get_session(app_name=APP, user_id=USER, session_id=sid) is None:
        await svc.create_session(app_name=APP, user_id=USER, session_id=sid)


def killing(svc: BaseSessionService, n: int) -> None:
    """SIGKILL this process right after the service's n-th append_event."""
    orig = svc.append_event
    count = [0]

    async def append_event(session: Any, event: Any) -> Any:
        out = await orig(session, event)
        count[0] += 1
        if count[0] == n:
            os.kill(os.getpid(), signal.SIGKILL)
        return out

    svc.append_event = append_event  # type: ignore[method-assign]


def killing_before_scopes(svc: Any) -> None:
    """SIGKILL this process when the service is about to commit app:/user: state deltas, i.e.
    after the event that carries them was committed."""
    orig = svc._apply_scopes

    def apply(app_name: str, user_id: str, deltas: Any, when: float, **kw: Any) -> None:
        if (deltas["app"] or deltas["user"]) and not kw.get("repair"):
            os.kill(os.getpid(), signal.SIGKILL)
        orig(app_name, user_id, deltas, when, **kw)

    svc._apply_scopes = apply


async def main(kind: str, url: str, sid: str, mode: str, args: list[str]) -> None:
    global KILL_AFTER_MS
    svc = service(kind, url)
    r = runner(svc, tools(kind, svc))
    if os.environ.get("ADK_KILL_AFTER_APPENDS"):
        killing(svc, int(os.environ["ADK_KILL_AFTER_APPENDS"]))
    if os.environ.get("ADK_KILL_BEFORE_SCOPES"):
        killing_before_scopes(svc)
    if mode != "trial":
        await ensure(svc, sid)
    if mode == "trial":
        prev_sid, prev_id, next_sid, delay = args
        if prev_sid != "-":
            print("OUTCOME", prev_sid, await send(r, prev_sid, confirm(prev_id)), flush=True)
        if next_sid != "-":
            await ensure(svc, next_sid)
            amount = int("".join(c for c in next_sid if c.isdigit()))
            cid = confirmation_id(await turn(r, next_sid, user(f"pay {amount}")))
            print("CONFIRM", next_sid, cid, flush=True)
            KILL_AFTER_MS = int(delay)
            print("SURVIVED", next_sid, await send(r, next_sid, confirm(str(cid))), flush=True)
    elif mode == "turns":
        for text in args:
            await turn(r, sid, user(text))
    elif mode == "ask":
        print("CONFIRM", confirmation_id(await turn(r, sid, user(args[0]))), flush=True)
    elif mode == "confirm":
        print(await send(r, sid, confirm(args[0])), flush=True)
    elif mode == "append":
        session = await svc.get_session(app_name=APP, user_id=USER, session_id=sid)
        assert session is not None
        open(os.environ["ADK_READY"], "w").close()
        while not os.path.exists(os.environ["ADK_GO"]):
            await asyncio.sleep(0.001)
        ev = Event(author="user", invocation_id=f"inv-{os.getpid()}",
                   content=user(args[0]))
        try:
            await svc.append_event(session, ev)
            print("COMMITTED", flush=True)
        except Exception as e:
            print("CONFLICT", type(e).__name__, str(e)[:300].replace("\n", " "), flush=True)
    elif mode == "show":
        session = await svc.get_session(app_name=APP, user_id=USER, session_id=sid)
        assert session is not None
        print("STATE", json.dumps(session.state, sort_keys=True), flush=True)
        for ev in session.events:
            print(json.dumps(json.loads(ev.model_dump_json(exclude_none=True))), flush=True)
    close = getattr(svc, "close", None)
    if close is not None:
        res = close()
        if asyncio.iscoroutine(res):
            await res


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]))
