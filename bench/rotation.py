"""Rotating the master key of a keyring with many scopes, on S3 (a moto server on loopback,
started here), issue 33: seconds and S3 (and KMS) requests by operation.

    python -m bench.rotation [--scopes 10000] [--kms] [--out bench/results/rotation.md]

The scopes are made in bulk (each wrapped as ``Keyring.new_scope`` wraps it, written in one
batch): the bench times the rotation, not their creation. With ``--kms`` the keyring wraps
its scope keys with an AWS KMS key (moto's KMS): a rotation to another KMS key then costs one
Decrypt and one Encrypt per scope. Where the keyring has key shards (issue 33), a second
rotation is timed too: it reads the shards the first one wrote.
"""

from __future__ import annotations

import argparse
import collections
import os
import time
import uuid
from pathlib import Path
from typing import Any

BUCKET = "rotation-bench"


def _count(client: Any, ops: collections.Counter[str], service: str) -> None:
    def hook(**kw: Any) -> None:
        ops[f"{service}:{kw.get('event_name', '?').rsplit('.', 1)[-1]}"] += 1

    client.meta.events.register(f"before-send.{service}", hook)


def run(scopes: int, kms_on: bool, endpoint: str) -> dict[str, Any]:
    import boto3

    from ckptfs.format import cbor, crypto
    from ckptfs.storage.keyring import Keyring
    from ckptfs.storage.open import open_storage

    opts: dict[str, Any] = {"key": "testing", "secret": "testing", "endpoint_url": endpoint,
                            "client_kwargs": {"region_name": "us-east-1"}}
    kms = boto3.client("kms", endpoint_url=endpoint, region_name="us-east-1",
                       aws_access_key_id="testing", aws_secret_access_key="testing")
    key_a = kms.create_key()["KeyMetadata"]["KeyId"] if kms_on else None
    key_b = kms.create_key()["KeyMetadata"]["KeyId"] if kms_on else None
    st = open_storage(f"s3://{BUCKET}/{uuid.uuid4().hex}", **opts)
    ring = Keyring.create(st, kms_key_id=key_a, kms=kms if kms_on else None)
    t = time.perf_counter()
    items = []
    for _ in range(scopes):
        sid = crypto.new_scope_id()
        wrapped = ring._wrapper.wrap(crypto.new_key(), ring._wrap_ad(sid, "run"))
        items.append((f"{ring._scopes}/{sid.hex()}", cbor.encode({"kind": "run", "key": wrapped})))
    st.write_many(items)
    made = time.perf_counter() - t
    ops: collections.Counter[str] = collections.Counter()
    _count(st.fs.s3, ops, "s3")  # type: ignore[attr-defined]
    if kms_on:
        _count(kms, ops, "kms")
    load0 = os.getloadavg()
    t = time.perf_counter()
    new = ring.rotate(kms_key_id=key_b, kms=kms if kms_on else None)
    secs = time.perf_counter() - t
    assert new.gen == 1
    some = next(iter(items))[0].rsplit("/", 1)[-1]
    new.scope(bytes.fromhex(some))  # a rewrapped key opens under the new master key
    first = {"scopes": scopes, "kms": kms_on, "seconds": secs, "setup_s": made,
             "requests": dict(sorted(ops.items())), "total": sum(ops.values()),
             "load": (load0, os.getloadavg())}
    if not hasattr(new, "_shards"):  # a keyring without key shards (before issue 33's fix)
        return {"first": first}
    # the next rotation reads the key shards the first one wrote, not the scopes
    ops.clear()
    load0 = os.getloadavg()
    t = time.perf_counter()
    again = new.rotate(kms_key_id=key_a, kms=kms if kms_on else None)
    secs = time.perf_counter() - t
    assert again.gen == 2
    again.scope(bytes.fromhex(some))
    return {"first": first, "second": {**first, "seconds": secs,
                                       "requests": dict(sorted(ops.items())),
                                       "total": sum(ops.values()),
                                       "load": (load0, os.getloadavg())}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scopes", type=int, nargs="+", default=[10000])
    ap.add_argument("--kms", action="store_true")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    # moto in its own process (as S3 is): in this one it would share the GIL with the client
    import socket
    import subprocess
    import sys

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                               str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    import urllib.request

    for _ in range(200):
        try:
            urllib.request.urlopen(endpoint + "/moto-api/", timeout=1)
            break
        except OSError:
            time.sleep(0.05)
    os.environ.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1"})
    import s3fs

    s3fs.S3FileSystem(key="testing", secret="testing", endpoint_url=endpoint).call_s3(
        "create_bucket", Bucket=BUCKET)
    lines = []
    try:
        for n in a.scopes:
            for which, r in run(n, a.kms, endpoint).items():
                line = (f"rotate {r['scopes']} scopes ({'KMS' if r['kms'] else 'key file'}, "
                        f"{which} rotation) on moto S3: {r['seconds']:.1f} s, {r['total']} "
                        f"requests {r['requests']}; load average before/after "
                        f"{r['load'][0][0]:.2f}/{r['load'][1][0]:.2f}")
                print(line, flush=True)
                lines.append(line)
    finally:
        server.terminate()
        server.wait()
    if a.out:
        Path(a.out).write_text("# bench.rotation (one run)\n\n```\n" + "\n".join(lines) + "\n```\n")


if __name__ == "__main__":
    main()
