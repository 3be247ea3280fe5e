"""Conformance vectors of spec/encryption.md (capability ``encryption``; issue 32 traces the
``enc.*`` requirements to them): the primitives with the published test keys of
spec/vectors/encryption.json, and reads of the encrypted stores of
spec/vectors/encrypted-stores/ (each with its keyring) and of copies damaged one rule at a time.

Store vectors keep a folder ``NAME.store/`` holding ``store/`` and, unless the vector is about a
missing keyring, ``keyring/``; the ops ``enc-read DIR NOW`` and ``enc-snapshot DIR NOW REF``
take that folder (ckptfs_conformance/README.md, "Encrypted stores").
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cbor2

from ckptfs.format import cbor, crypto
from ckptfs.format.cdc import ChunkerParams, cut_lengths
from ckptfs_conformance.gen_encryption import NONCE, SCOPE_ID, SCOPE_KEY, STORE_ID, STORES

CAT = "encryption"
ENC = ["encryption"]
READ = ["reader", "v2", "encryption"]


def _config(folder: Path, change: Callable[[dict[str, Any]], None]) -> None:
    f = folder / "store" / "ckptfs.cbor"
    cfg = cbor2.loads(f.read_bytes())
    change(cfg)
    f.write_bytes(cbor.encode(cfg))


def _other_master(folder: Path) -> None:
    """master.key replaced by a well-formed key file of another master key."""
    import hashlib

    key = bytes(range(100, 132))
    (folder / "keyring" / "master.key").write_bytes(
        b"CKMK" + key + hashlib.sha256(key).digest()[:4])


def _plain_v2(folder: Path, new_store: Any) -> None:
    """A plaintext version 2 store (one snapshot) beside the valid store's keyring."""
    s, _ = new_store(folder / "store")
    s.start_run("chat-1").checkpoint({"msg": "hello"})
    s.close()
    shutil.copytree(STORES / "valid" / "keyring", folder / "keyring")


def primitives(g: Any) -> None:
    key = SCOPE_KEY.hex()
    for label, size in ((crypto.CONTENT, 32), (crypto.NAMES, 64), (crypto.CHUNK_IDS, 32),
                        (crypto.GEAR, 32)):
        name = "derive-" + label.decode().split()[-1]
        g.vector(CAT, name, f"spec/encryption.md 4.1: HKDF-SHA256 subkey {label.decode()!r} "
                 "of the published scope key", ["enc-derive", key, label.decode(), str(size)],
                 {"output": crypto.derive(SCOPE_KEY, label, size).hex(), "compare": "text"},
                 ENC)
    path = "runs/chat-1/00000000000000000001"
    plain = b"\x00hello, sealed world"
    sealed = crypto.seal(SCOPE_KEY, store_id=STORE_ID, scope_id=SCOPE_ID, path=path,
                         plaintext=plain, nonce=NONCE)
    g.vector(CAT, "seal", "spec/encryption.md 5.1: the sealed object of a plaintext under the "
             "published keys and nonce", ["enc-seal", key, STORE_ID.hex(), SCOPE_ID.hex(), path,
                                          NONCE.hex(), "{file:plain}"],
             {"output": sealed.hex(), "compare": "text"}, ENC, {"plain": {"hex": plain.hex()}})
    g.vector(CAT, "open", "spec/encryption.md 5.1: the sealed object opens to its plaintext",
             ["enc-open", key, STORE_ID.hex(), path, "{file:sealed}"],
             {"output": plain.hex(), "compare": "text"}, ENC, {"sealed": {"hex": sealed.hex()}})
    tampered = bytearray(sealed)
    tampered[-1] ^= 1
    for name, why, at, data in (
            ("open-tampered", "the last tag bit flipped", path, bytes(tampered)),
            ("open-moved", "the same bytes at another path (the AD differs)",
             "runs/chat-1/00000000000000000002", sealed),
            ("open-planted", "a plain framed object (no CKE 0x01 header)", path, plain)):
        g.vector(CAT, name, f"spec/encryption.md 5.1, 9: MUST fail to open: {why}",
                 ["enc-open", key, STORE_ID.hex(), at, "{file:sealed}"], {"error": "corrupt"},
                 ENC, {"sealed": {"hex": data.hex()}})
    for i, (ctx, name) in enumerate((("run", "chat-1"), ("run", "alice@example.com"),
                                     ("packs", "ab" * 32))):
        g.vector(CAT, f"name-{i + 1}", f"spec/encryption.md 5.2: the encrypted path segment of "
                 f"{name!r} in context {ctx!r}", ["enc-name", key, ctx, name],
                 {"output": crypto.encrypt_name(SCOPE_KEY, name, context=ctx),
                  "compare": "text"}, ENC)
    for i, run in enumerate(("chat-1", "alice@example.com")):
        g.vector(CAT, f"stone-name-{i + 1}", f"spec/encryption.md 5.2: the stored segment of "
                 f"the whole-run tombstone of {run!r} (a keyed digest under the store scope, "
                 "which outlives the run's scope)", ["enc-stone-name", key, run],
                 {"output": crypto.stone_name(SCOPE_KEY, run), "compare": "text"}, ENC)
    from ckptfs_conformance.generate import prng

    data = prng("enc-seeded", 16384)
    seed = (int.from_bytes(crypto.derive(SCOPE_KEY, crypto.GEAR, 32)[:8], "big") >> 1) or 1
    params: dict[str, Any] = dict(min_size=64, avg_size=256, max_size=1024, normalization=1)
    seeded = cut_lengths(data, ChunkerParams(**params, seed=seed))
    assert seeded != cut_lengths(data, ChunkerParams(**params))

    g.vector(CAT, "cut-seeded", "spec/encryption.md 4.1: the chunker of a scope, its gear table "
             "XORed with the seed from the gear subkey (the unseeded cut points differ)",
             ["enc-cut", key, "64", "256", "1024", "1", "{file:input}"],
             {"output": seeded, "compare": "json"}, ENC,
             {"input": {"prng": {"seed": "enc-seeded", "length": 16384}}})


def stores(g: Any, new_store: Any, now: int) -> None:
    """Reads of the encrypted stores (each answer checked with ckptfs here)."""
    from ckptfs.errors import CkptfsError
    from ckptfs_conformance.adapters.enc_ops import enc_read, enc_snapshot

    def drop_keyring(f: Path) -> None:
        shutil.rmtree(f / "keyring")

    cases: dict[str, tuple[str, str, Callable[[Path], Any] | None, list[str]]] = {
        # name: (base variant, description, change, argv tail after DIR NOW)
        "valid": ("valid", "an encrypted store with its keyring: both runs read", None, []),
        "tampered": ("tampered", "one bit of one record flipped: it does not authenticate",
                     None, []),
        "swapped": ("swapped", "two runs' records exchanged (the AD binds the path)", None, []),
        "planted": ("planted", "a record replaced by an unsealed plaintext object", None, []),
        "wrong-keyring": ("wrong-keyring", "another store's keyring", None, []),
        "no-keyring": ("valid", "no keyring given for an encrypted store", drop_keyring, []),
        "keyring-for-plain": ("", "a keyring given for a store that does not require "
                              "encrypted", None, []),
        "setting-missing": ("valid", "the config's settings lack 'encryption'",
                            lambda f: _config(f, lambda c: c["settings"].pop("encryption")), []),
        "setting-scheme-unknown": ("valid", "the encryption setting's scheme is another",
                                   lambda f: _config(f, lambda c: c["settings"]["encryption"]
                                                     .update(scheme="ckptfs-enc-9")), []),
        "required-missing": ("valid", "the config no longer requires 'encrypted' (the objects "
                             "are sealed), read with the keyring",
                             lambda f: _config(f, lambda c: c.update(required=[
                                 x for x in c["required"] if x != "encrypted"])), []),
        "version-1": ("valid", "an encrypted store whose config says version 1",
                      lambda f: _config(f, lambda c: c.update(version=1)), []),
        "wrong-master": ("valid", "a keyring whose master key file is well-formed but holds "
                         "another key: reported from the keyring's check", _other_master, []),
        "erased-scope": ("erased-scope", "a copy made before the subject's scope was erased, "
                         "with the keyring after it: the erased run is no run of the store",
                         None, []),
        "erased-scope-by-run": ("erased-scope", "the erased subject's run by name: erased "
                                "(the keyring's tombstone first)", None, ["chat-1"]),
        "erased-scope-other-run": ("erased-scope", "the other run of that copy reads", None,
                                   ["chat-2"]),
        "run-id-97": ("valid", "a run id of 97 characters (at most 96 in an encrypted store)",
                      None, ["r" * 97]),
    }
    for name, (base, desc, change, tail) in cases.items():
        d = g.store_dir(CAT, "store-" + name)
        if base:
            shutil.copytree(STORES / base, d)
        else:
            _plain_v2(d, new_store)
        if change is not None:
            change(d)
        scratch = g.out / "_enc_scratch"
        shutil.copytree(d, scratch)  # reading may write (leases): never into the vector
        try:
            got: dict[str, Any] = {"output": None, "compare": "json"}
            if tail:
                got["output"] = __import__("json").loads(enc_snapshot(str(scratch), str(now),
                                                                      tail[0]))
            else:
                got["output"] = __import__("json").loads(enc_read(str(scratch), str(now)))
            expect = got
        except CkptfsError as e:
            expect = {"error": e.category}
        finally:
            shutil.rmtree(scratch)
        op = ["enc-snapshot", "{store}", str(now), *tail] if tail else [
            "enc-read", "{store}", str(now)]
        g.vector(CAT, "store-" + name, "spec/encryption.md: " + desc, op, expect, READ,
                 store=f"store-{name}.store")


def writer_case() -> dict[str, Any]:
    """Two subjects, a run of its own scope, a fork, and one blob committed in every scope (it
    is deduplicated inside a scope only)."""
    from ckptfs_conformance.generate import T0, prng

    blob = prng("enc-writer-blob", 3000).hex()
    schema = {"name": "agent", "version": 1}

    def start(run: str, t: int, subject: str | None = None) -> dict[str, Any]:
        out = {"op": "start", "run": run, "time": t, "schema": schema}
        return out if subject is None else {**out, "subject": subject}

    def cp(run: str, t: int, text: str, **kw: Any) -> dict[str, Any]:
        return {"op": "checkpoint", "run": run, "time": t, "state": {
            "conversation": {"value": ["hello, here is my secret plan", text]},
            "attachment": {"blob": blob}}, **kw}

    return {"writer": "ckptfs-conformance/1", "chunker": {"min": 64, "avg": 256, "max": 1024,
                                                            "normalization": 1},
            "steps": [start("alice-chat-7", T0, "user-alice-42"),
                      cp("alice-chat-7", T0 + 1, "alice writes first",
                         labels={"customer": "acme-corporation"}),
                      start("bobs-own-run-9", T0 + 2),
                      cp("bobs-own-run-9", T0 + 3, "bob writes alone"),
                      {"op": "fork", "from": "alice-chat-7@1", "run": "alice-forked-3",
                       "time": T0 + 4},
                      cp("alice-forked-3", T0 + 5, "alice forks"),
                      start("carol-chat-5", T0 + 6, "user-carol-77"),
                      cp("carol-chat-5", T0 + 7, "carol has the same attachment")]}


def writer(g: Any, now: int) -> None:
    """``encryption/write-scopes`` (op ``enc-write``): the rules of enc_rules.py."""
    from ckptfs_conformance.adapters.enc_ops import ENC_OPS
    from ckptfs_conformance.enc_rules import RULES
    from ckptfs_conformance.render import canonical_json, render_store, symbolic

    case = writer_case()
    tmp = g.out / "_enc_writer"
    tmp.mkdir(parents=True)
    (tmp / "case.json").write_text(canonical_json(case))
    assert ENC_OPS["enc-write"](str(tmp / "case.json"), str(tmp / "out")) == "ok"
    raw = render_store(str(tmp / "out" / "store"), now, keyring=str(tmp / "out" / "keyring"))
    for rule, check in RULES.items():
        assert not check(tmp / "out" / "store", tmp / "out" / "keyring", case, raw), rule
    expected = {k: x for k, x in symbolic(raw).items() if k != "config"}
    shutil.rmtree(tmp)
    g.vector(CAT, "write-scopes", "spec/encryption.md 2, 3, 4.2: a writer case into an "
             "encrypted store with a new keyring (two subjects, a run of its own scope, a fork, "
             "one blob in every scope): read back with that keyring, and no name, content or "
             "id of the plaintext in any path or byte; every locator inside its record's scope",
             ["enc-write", "{file:case}", "{out}"],
             {"store": expected, "now": now, "enc_rules": sorted(RULES)}, ["encryption"],
             {"case": {"json": case}})
