"""A forked child is a new owner that runs none of its parent's calls (ckptfs.runtime.
effect_owners), and the names ``effects`` re-exports are that module's.

The owner name and the calls in flight live in ``effect_owners`` and are reset there after a
fork (``effects.issue``/``release`` change the count only through ``call_started`` and
``call_ended``). No test covered that reset before the split moved it.
"""

from __future__ import annotations

import os
import sys

import pytest

from ckptfs.runtime import effect_owners, effects


def test_effects_re_exports_the_owner_functions() -> None:
    for name in ("DEFAULT_TIMEOUT", "MAX_TIMEOUT", "owner_gone", "held_elsewhere", "lease_ms",
                 "process_owner", "set_process_owner"):
        assert getattr(effects, name) is getattr(effect_owners, name), name


@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "darwin",
                    reason="needs a plain os.fork")
def test_a_forked_child_is_a_new_owner_with_no_calls_in_flight() -> None:
    parent = effects.process_owner()
    token = (parent, "charge-1", 1234)
    effect_owners.call_started(token)
    try:
        assert effect_owners._running_here(*token)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report and leave at once, without pytest's cleanup
            try:
                os.close(r)
                child = effects.process_owner()
                effect_owners.call_started((child, "charge-2", 1))
                seen = (child != parent, effect_owners._running_here(*token),
                        effect_owners._running_here(child, "charge-2", 1))
                os.write(w, repr(seen).encode())
            finally:
                os._exit(0)
        os.close(w)
        with os.fdopen(r, "rb") as f:
            got = f.read().decode()
        os.waitpid(pid, 0)
        assert got == "(True, False, True)"
        assert effect_owners._running_here(*token)  # still running here, in the parent
        assert not effect_owners._running_here(parent, "charge-2", 1)
    finally:
        effect_owners.call_ended(token)
    assert not effect_owners._running_here(*token)
