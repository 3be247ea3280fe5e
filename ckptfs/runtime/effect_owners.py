"""Who issued an effect's call, and whether that call may still be running: the owner names
written in intents (host, pid, nonce, host tag), the proof that an owner is gone, the calls
this process is performing now, and the lease arguments (``timeout=``, ``wait=``). Kept apart
from ``effects`` (the ledger protocol) because this is per-process state: it is reset in a
forked child and shared by every run of the process.

Leases (spec "Leases"): an intent names its owner (this process, ``process_owner()``) and a
deadline (``timeout`` after it was made). Until the deadline another process that resumes the
intent neither reconciles nor re-issues it.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import secrets
import socket
import threading
from collections import Counter
from typing import TYPE_CHECKING, Any

from ckptfs.format.ledger import MAX_OWNER, Effect
from ckptfs.store.sweeps import host_id, pid_gone

if TYPE_CHECKING:
    from ckptfs.runtime.run import Run

#: seconds an issued call may run before another process may reconcile or re-issue it
DEFAULT_TIMEOUT = 60.0
#: the longest lease ``timeout=`` may ask for (30 days)
MAX_TIMEOUT = 30 * 86_400.0


def _new_owner() -> str:
    """``host/pid/nonce/tag``: readable host and pid, a nonce so that no two processes share
    a name, and the tag of this host's id (hostname, boot id, pid namespace), so that a later
    process can prove the owner gone (``owner_gone``)."""
    host = re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname())[:64] or "host"
    return f"{host}/{os.getpid()}/{secrets.token_hex(8)}/{_HOST_TAG}"


#: this host's id (store.sweeps.host_id) as 12 hex digits, the last part of owner names
_HOST_TAG = hashlib.sha256(host_id().encode()).hexdigest()[:12]
_OWNER = re.compile(r"[A-Za-z0-9._-]{1,64}/([1-9][0-9]{0,9})/[0-9a-f]{16}/([0-9a-f]{12})")


def owner_gone(owner: str | None) -> bool:
    """Whether the process that owns an intent provably no longer runs: its name is of this
    runtime's making, its host tag is this host's, and no process has its pid here
    (``store.sweeps.pid_gone``, as for the maintenance lease). A pid that exists is no proof
    (it may have been reused): the lease then holds until its deadline, as before."""
    m = _OWNER.fullmatch(owner or "")
    return m is not None and m.group(2) == _HOST_TAG and pid_gone(int(m.group(1)))


_owner = _new_owner()
_lock = threading.Lock()
#: (owner, key, intent time) of every call this process is performing now; without the run id,
#: so that a fork of a run whose call is in flight here sees that call as running too
_in_flight: Counter[tuple[str, str, int]] = Counter()


def _after_fork() -> None:
    global _owner, _in_flight
    _owner, _in_flight = _new_owner(), Counter()  # a child runs none of its parent's calls


os.register_at_fork(after_in_child=_after_fork)


def process_owner() -> str:
    """This process's owner name, written in the intents it issues: host, pid and a random
    nonce (new after ``fork``), so that no two processes share one."""
    return _owner


def set_process_owner(owner: str) -> None:
    """Name this process's owner (reproducible stores, e.g. the conformance vectors); runs
    started or resumed afterwards issue intents under this name."""
    global _owner
    if type(owner) is not str or not (1 <= len(owner) <= MAX_OWNER):
        raise ValueError(f"an owner is text of 1..{MAX_OWNER} characters, not {owner!r:.80}")
    _owner = owner


def _running_here(owner: str | None, key: str, at: int) -> bool:
    with _lock:
        return _in_flight[(owner or "", key, at)] > 0


def call_started(token: tuple[str, str, int]) -> None:
    """Count the call of intent ``token`` (owner, key, intent time) as running here."""
    with _lock:
        _in_flight[token] += 1


def call_ended(token: tuple[str, str, int]) -> None:
    """The call of intent ``token`` no longer runs here (``release``)."""
    with _lock:
        _in_flight[token] -= 1
        if not _in_flight[token]:
            del _in_flight[token]


def held_elsewhere(run: Run, eff: Effect) -> bool:
    """Whether ``eff`` is issued under a lease that has not run out and whose call may be
    running: another owner's that is not provably gone (``owner_gone``: killed on this host),
    or one of this process's calls still in flight. An intent this process issued whose call
    has ended (it died with a BaseException) holds nothing."""
    if not eff.running(run.store.now()):
        return False
    if eff.owner != run.owner:
        return not owner_gone(eff.owner)
    return _running_here(eff.owner, eff.key, eff.intended_at)


def lease_ms(timeout: Any) -> int:
    """``timeout=`` in seconds as the lease's length in ms (at least 1)."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not (
            0 < timeout <= MAX_TIMEOUT):
        raise ValueError(f"timeout is the seconds a call may run, a number in (0, "
                         f"{MAX_TIMEOUT:.0f}], not {timeout!r:.40}")
    return max(1, math.ceil(timeout * 1000))


def wait_seconds(wait: Any) -> float:
    """``wait=`` as seconds to wait for another owner's lease (True: no limit; False: 0)."""
    if wait is True or wait is False:
        return math.inf if wait else 0.0
    if not isinstance(wait, (int, float)) or math.isnan(wait) or wait < 0:
        raise ValueError(f"wait takes True, False or seconds (>= 0), not {wait!r:.40}")
    return float(wait)
