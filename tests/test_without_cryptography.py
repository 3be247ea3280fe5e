"""``cryptography`` is the ``encrypt`` extra: a plain ``pip install ckptfs`` has no such
package, and plaintext stores must work there (README's first quickstart command runs the demo
on exactly that install). Run in a child process whose imports of ``cryptography`` and
``argon2`` fail, as on a machine without them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import ckptfs

BLOCK = textwrap.dedent("""
    import sys

    class _NoCrypto:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("cryptography", "argon2"):
                raise ImportError(f"No module named {name!r} (blocked by the test)")

    sys.meta_path.insert(0, _NoCrypto())
""")


def _child(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCK + textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=120)


def test_plaintext_stores_need_no_cryptography(tmp_path: Path) -> None:
    p = _child(f"""
        import ckptfs, ckptfs.cli
        s = ckptfs.open_store({str(tmp_path / "plain")!r})
        run = s.start_run("chat")
        run.checkpoint({{"messages": ["hi"]}})
        run.append("messages", "there")
        s.close()
        s = ckptfs.open_store({str(tmp_path / "plain")!r})
        print(s.resume("chat").state["messages"])
        assert not any(m.split(".")[0] == "cryptography" for m in sys.modules), "loaded"
    """)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "['hi', 'there']"


def test_an_encrypted_store_without_the_extra_says_what_to_install(tmp_path: Path) -> None:
    store, ring = tmp_path / "enc", tmp_path / "ring"
    s = ckptfs.open_store(str(store), keyring=str(ring))
    s.start_run("chat").checkpoint({"secret": "x"})
    s.close()
    before = sorted(f.relative_to(store).as_posix() for f in store.rglob("*"))
    p = _child(f"""
        import ckptfs
        from ckptfs.errors import KeyringError
        for kw in ({{"keyring": {str(ring)!r}}}, {{}}):
            try:
                ckptfs.open_store({str(store)!r}, **kw).resume("chat")
            except KeyringError as e:
                print(e.category, "|", e)
    """)
    assert p.returncode == 0, p.stderr
    with_ring, without = p.stdout.strip().splitlines()
    assert with_ring.startswith("keyring |") and "pip install 'ckptfs[encrypt]'" in with_ring
    assert without.startswith("keyring |") and "open it with its keyring" in without
    assert sorted(f.relative_to(store).as_posix() for f in store.rglob("*")) == before
