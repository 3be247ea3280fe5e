"""A process that imports the agent frameworks once and forks a fresh child per scenario, so
that many kill-and-resume trials cost a fork each instead of a Python start and an import.

Protocol: one JSON request per stdin line, ``{"fn": "name", "args": [...]}`` (a function of
``tests.agents_scenarios``); the zygote forks, the child runs the function and exits 0 (or dies
however the scenario makes it die), and the zygote answers one JSON line ``{"status": N}``:
the exit code, or minus the signal that killed the child. The zygote itself never opens a
store nor starts a thread, so every child starts from the same clean state.
"""

from __future__ import annotations

import json
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests import agents_scenarios  # noqa: E402


def main() -> None:
    agents_scenarios.warm()
    for line in sys.stdin:
        req = json.loads(line)
        fn = getattr(agents_scenarios, req["fn"])
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                fn(*req.get("args", []))
            except BaseException:
                traceback.print_exc()
                code = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        sys.stdout.write(json.dumps({"status": code}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
