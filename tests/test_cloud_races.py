"""Racing writers, crash points and the lost-answer rule on the GCS and Azure emulators
(issue 20): gs:// through gcsfs on fake-gcs-server, az:// through adlfs on Azurite.

The writers are subprocesses that reach the emulator through the environment (conftest.py's
emulator fixtures set STORAGE_EMULATOR_HOST and AZURE_STORAGE_CONNECTION_STRING), opening the
bare URL as a user's process would.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import test_racing_writers
from tests.conftest import LONG

KINDS = ["gcs", "azure"]


@pytest.mark.parametrize("kind", KINDS)
def test_eight_writers_race_on_an_emulator(kind: str, request: pytest.FixtureRequest,
                                           tmp_path: Path) -> None:
    """8 processes commit to one run (and each to its own), format v2: every commit lands at a
    unique seq or is refused with ConflictError, none lost, none duplicated, the store
    verifies (the body of tests/test_racing_writers.py)."""
    from tests.emulators import new_url

    request.getfixturevalue(f"{kind}_emulator")
    attempts = 3 if LONG else 1  # per writer and run: 16 commit attempts, 8 on one run
    test_racing_writers.test_eight_writers_race((new_url(kind), attempts), tmp_path)


#: crash points sampled per emulator in the default suite (evenly spread over the script's
#: operations, "before" and "after" alternating); CKPTFS_LONG=1 runs every 4th point
CRASH_SAMPLE = 4


@pytest.mark.parametrize("kind", KINDS)
def test_crash_points_on_an_emulator(kind: str, request: pytest.FixtureRequest) -> None:
    """The crash-point enumeration of tests/test_crash_points.py, a sample of its points on
    gs:// and az://: the scripted run dies at an operation, a fresh Storage on the emulator
    must find a store that verifies, with every returned commit and its exact state, the
    effects neither lost nor doubled, and that accepts new commits."""
    from ckptfs.storage import open_storage
    from tests.conftest import TALLY
    from tests.emulators import new_url
    from tests.faults import Crash, FaultyStorage
    from tests.test_crash_points import SMALL, Journal, check_after_crash, script

    import ckptfs

    emu = request.getfixturevalue(f"{kind}_emulator")
    counting = FaultyStorage(open_storage(new_url(kind), **emu.options))
    script(ckptfs.Store(counting, chunker=SMALL), Journal())
    plan = [(k, mode) for k in range(counting.ops) for mode in ("before", "after")]
    if LONG:
        plan = plan[::4]
    else:
        step = max(1, len(plan) // CRASH_SAMPLE)
        plan = [plan[min(len(plan) - 1, i * step + (i % 2))] for i in range(CRASH_SAMPLE)]
    for k, mode in plan:
        url = new_url(kind)
        faulty = FaultyStorage(open_storage(url, **emu.options), fail_at=k, mode=mode)
        j = Journal()
        with pytest.raises(Crash):
            script(ckptfs.Store(faulty, chunker=SMALL), j)
        check_after_crash(open_storage(url, **emu.options), j, f"op {k}: {faulty.crashed_in}")
    TALLY[f"crash:{kind}:v2"] += len(plan)
    print(f"\ncrash points on {kind} (format v2): {len(plan)} of {2 * counting.ops} "
          f"({counting.ops} operations)")
