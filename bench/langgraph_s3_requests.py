"""Storage calls a CkptfsSaver makes on S3 (a moto server on loopback) per user turn and for a
fresh process's ``get_state``, after a history of T turns (issue 14: an invoke must not list
the whole run). Counts, not times: they do not drift with the machine's load.

    python bench/langgraph_s3_requests.py [--turns 10 100 1000]

Each turn is one ``invoke`` of a one-node graph (3 checkpoints and 2 writes snapshots). Printed
per turn (the mean of 5 more turns after T): calls by storage method and the names all listings
returned; then the same for a new saver's first ``get_state``.
"""

from __future__ import annotations

import argparse
import logging
import operator
import os
import sys
import uuid
from pathlib import Path
from typing import Annotated, Any, TypedDict

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

METHODS = ("list", "list_after", "read", "exists", "read_range", "read_ranges", "create",
           "replace", "hint", "size")


class S(TypedDict):
    msgs: Annotated[list[str], operator.add]


def app(saver: Any) -> Any:
    from langgraph.graph import END, START, StateGraph

    g = StateGraph(S)
    g.add_node("a", lambda s: {"msgs": ["a"]})
    g.add_edge(START, "a")
    g.add_edge("a", END)
    return g.compile(checkpointer=saver)


def counting(saver: Any) -> dict[str, int]:
    """Count the calls of ``saver``'s storage methods (and the names its listings return)."""
    c: dict[str, int] = {}
    st = saver.store.storage
    for m in METHODS:
        f = getattr(st, m, None)
        if f is None:
            continue

        def g(*a: Any, _f: Any = f, _m: str = m, **k: Any) -> Any:
            out = _f(*a, **k)
            c[_m] = c.get(_m, 0) + 1
            if _m in ("list", "list_after") and out is not None:
                c["names listed"] = c.get("names listed", 0) + len(out)
            return out

        setattr(st, m, g)
    return c


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, nargs="+", default=[10, 100, 1000])
    args = ap.parse_args()
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    os.environ.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1",
                       "AWS_ENDPOINT_URL_S3": f"http://{host}:{port}"})
    import s3fs

    from ckptfs.integrations.langgraph import CkptfsSaver

    s3fs.S3FileSystem().call_s3("create_bucket", Bucket="lg-requests")
    cfg: Any = {"configurable": {"thread_id": "t"}}
    try:
        for turns in args.turns:
            url = f"s3://lg-requests/{uuid.uuid4().hex}"
            saver = CkptfsSaver(url)
            graph = app(saver)
            for i in range(turns):
                graph.invoke({"msgs": [str(i)]}, cfg)
            c = counting(saver)
            for i in range(5):
                graph.invoke({"msgs": [str(i)]}, cfg)
            print(f"T={turns} per turn:", {k: v / 5 for k, v in sorted(c.items())})
            fresh = CkptfsSaver(url)
            c = counting(fresh)
            app(fresh).get_state(cfg)
            print(f"T={turns} fresh get_state:", dict(sorted(c.items())))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
