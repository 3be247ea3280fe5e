"""``ckptfs init STORE``: create an empty store (it is otherwise created by the first checkpoint)."""

from __future__ import annotations

import argparse

from ckptfs.cli import EXIT_OK, human, print_json
from ckptfs.cli._args import store_command
from ckptfs.cli import stores as _stores


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = store_command(sub, "init", run, help="create an empty store at a URL",
                      description="Create a store (its ckptfs.cbor config, format version 2) "
                                  "at STORE. Does nothing "
                                  "but print the config in force when a store already exists.")
    p.add_argument("--create-bucket", action="store_true",
                   help="create the bucket (or container) of an object-store URL first if it "
                        "does not exist (s3://, gs://, az://; needs the right to create one)")
    p.add_argument("--json", action="store_true", help="print the config as JSON")
    p.add_argument("--encrypt", action="store_true",
                   help="create an encrypted store whose keys live in the keyring --keyring "
                        "(or CKPTFS_KEYRING) names; the keyring folder is made if it is empty "
                        "(spec/encryption.md)")


def create_bucket(store: object) -> str | None:
    """Create the bucket the store's URL names unless it exists; its URL when it was made."""
    from ckptfs.errors import InvalidURL, StorageError
    from ckptfs.storage.objects import FsspecStorage

    st = getattr(store, "storage", None)
    if not isinstance(st, FsspecStorage) or st.protocol in ("memory", "zip", "tar", "http",
                                                              "https"):
        raise InvalidURL("--create-bucket is for object-store URLs (s3://BUCKET/..., gs://, "
                         "az://); this store has no bucket")
    bucket = st.root.split("/", 1)[0]
    try:
        if st.fs.exists(bucket):
            return None
        st.fs.mkdir(bucket)
    except Exception as e:  # the backend's own errors: permissions, naming rules, network
        raise StorageError(f"{st.protocol}://{bucket}: cannot create the bucket ({e}); create "
                           "it with the provider's tools or check the account's rights") from e
    return f"{st.protocol}://{bucket}"


def run(args: argparse.Namespace) -> int:
    if args.encrypt:
        import os

        from ckptfs.storage.keyring import KEYRING_ENV

        ring = args.keyring or os.environ.get(KEYRING_ENV)
        if not ring:
            from ckptfs.cli._usage import usage_error

            return usage_error("init", "--encrypt needs a keyring: --keyring KEYRING or "
                                       f"{KEYRING_ENV}")
        store = _stores.open_store(args.store, keyring=ring)
    else:
        store = _stores.open_store(args.store)
    made = create_bucket(store) if args.create_bucket else None
    existed = store.repo.load_config() is not None
    store.init()
    cfg = store.repo.config
    c = cfg.chunker
    how, scope = create_only_mode(store)
    if args.json:
        print_json({"store": store.url, "created": not existed, "format": cfg.version,
                    "chunker": c.to_cbor(), "bucket_created": made is not None,
                    "create_only": how, "create_only_scope": scope})
    else:
        verb = "exists" if existed else "created"
        if made:
            print(f"bucket created: {made}")
        print(f"store {verb}: {store.url} (format version {cfg.version})")
        print(f"chunker: {c.algorithm} min {human.size(c.min_size)} avg {human.size(c.avg_size)} "
              f"max {human.size(c.max_size)}")
        if how:
            print(f"create-only: {how}" + (f"\n  safe for: {scope}" if scope else ""))
    return EXIT_OK


def create_only_mode(store: object) -> tuple[str, str]:
    """How the store's backend makes commits create-only, and whom that covers (issue 19: a
    local store says whether it got link(2) or the filelock fallback); ("", "") when the
    backend has not been probed (an existing object store that init did not write to)."""
    from ckptfs.errors import StorageError
    from ckptfs.storage.local import LocalStorage

    st = getattr(store, "storage", None)
    if isinstance(st, LocalStorage):
        try:
            st.probe_features()
        except StorageError:  # an existing store on a read-only disk: nothing to say
            return "", ""
    caps = getattr(st, "capabilities", None)
    if caps is None or "not probed" in caps.create_only_how:
        return "", ""
    return caps.create_only_how, caps.create_only_scope
