"""An erasure in an encrypted store reaches the copies key destruction cannot reach (issue 33,
spec/encryption.md 5.2 and 7): a copy under another keyring and a decrypted one get it from the
next ``ckptfs copy``, as plaintext stores do (retention.md 9 step 1). Before the whole-run
tombstone was named by a keyed digest under the store scope, it was named under the run's own
scope, whose key the erase destroys: no copy found it, and both copies kept the run, readable,
forever. Run as CLI subprocesses, like a user would."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import ckptfs
from ckptfs.errors import ErasedError
from ckptfs.ops.erase import erase
from tests.test_encrypted_copy import cli


def _store(tmp_path: Path) -> tuple[str, str]:
    src, ring = str(tmp_path / "src"), str(tmp_path / "ring")
    s = ckptfs.open_store(src, keyring=ring)
    s.init()
    s.start_run("alice.example.com").checkpoint({"note": "to be erased"})
    s.start_run("bob").checkpoint({"note": "kept"})
    s.close()
    return src, ring


@pytest.mark.parametrize("into", ["decrypted", "other keyring"])
def test_the_next_copy_repeats_an_erasure_key_destruction_cannot_reach(
        tmp_path: Path, into: str) -> None:
    src, ring = _store(tmp_path)
    dst = str(tmp_path / "dst")
    extra = (["--decrypt"] if into == "decrypted"
             else ["--encrypt", "--dst-keyring", str(tmp_path / "ring2")])
    cli("copy", src, dst, "--keyring", ring, *extra)
    opts = {} if into == "decrypted" else {"keyring": str(tmp_path / "ring2")}
    assert ckptfs.open_store(dst, **opts).read("alice.example.com") == {"note": "to be erased"}
    cli("erase", src, "alice.example.com", "--reason", "deletion request 17", "--keyring", ring)
    out = cli("copy", src, dst, "--keyring", ring, *extra, "--json").stdout
    assert '"alice.example.com"' in out  # the copy reports the erasure it repeated
    d = ckptfs.open_store(dst, **opts)
    # decrypted: the tombstone's reason; another keyring: its own scope of the run was erased
    # there too, by key destruction (ScopeErased, an ErasedError)
    with pytest.raises(ErasedError, match="deletion request 17" if into == "decrypted"
                       else "key scope .* was erased"):
        d.read("alice.example.com")
    assert d.read("bob") == {"note": "kept"}


def test_a_tombstone_written_under_the_run_segment_is_still_read(tmp_path: Path) -> None:
    """Writers before the keyed tombstone name put it under the run's segment: while the
    run's scope opens (a run inside a subject's scope), readers still find it there."""
    src, ring = str(tmp_path / "src"), str(tmp_path / "ring")
    s = ckptfs.open_store(src, keyring=ring)
    s.start_run("chat-7", subject="user-42").checkpoint({"note": "x"})
    s.start_run("chat-8", subject="user-42").checkpoint({"note": "y"})
    erase(s.repo, "chat-7", reason="old writer")
    view = s.storage
    new = Path(src) / view.out("tombstones/chat-7.cbor")  # type: ignore[attr-defined]
    old = Path(src) / "tombstones" / (view._run_seg("chat-7") + ".cbor")  # type: ignore[attr-defined]
    assert new.name.startswith("x-") and new.exists()
    shutil.move(new, old)
    s.close()
    again = ckptfs.open_store(src, keyring=ring)
    with pytest.raises(ErasedError, match="old writer"):
        again.read("chat-7")
    assert again.read("chat-8") == {"note": "y"}
