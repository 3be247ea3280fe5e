"""Names that are not objects, in every folder of a store, never stop a reader or maintenance
and are never deleted (spec/format.md 3.1, spec/v2.md 3; issue 30 defect 4).

A Finder window leaves ``.DS_Store``, rsync its partial ``.<name>.XXXXXX``, an editor its swap
file ``.x.swp`` or backup ``name~``; a half-typed copy leaves a name too short for a digest or a
seq, and a misplaced folder sits where a file is expected. Each is dropped into one folder of a
v2 store with packs, forwards, strays, tombstones, retired markers and expiry overrides (and
into ``chunks/`` and ``snapshots/`` of a store upgraded from v1), and then every operation runs
through the CLI entry point: it must exit 0, leave the junk byte for byte, and (erase) finish
its tombstone. The product of folders x junk x operations is the case count in the module's
collection (see ``test_case_count``).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import ckptfs
from ckptfs.cli import main
from ckptfs.format.lifecycle import Tombstone
from ckptfs.ops.erase import erase
from ckptfs.ops.gc import gc
from ckptfs.ops.retention import forget_snapshots
from ckptfs.ops.upgrade import upgrade
from tests.retention_helpers import age_tree
from tests.v1_stores import v1_store


SECRET = b"JUNK-TEST-SECRET-"

#: folders of a v2 store (relative to the root); ``{fan}``: an existing pack fan-out folder
V2_FOLDERS = ["", "packs", "packs/{fan}", "moved", "moved/runs", "moved/runs/old",
              "moved/packs", "runs", "runs/keep", "runs/old", "runs/old/retired", "tombstones",
              "tombstones/sn", "leases"]
#: folders only an upgraded v1 store has
V1_FOLDERS = ["chunks", "chunks/{cfan}", "snapshots", "snapshots/{sfan}"]
#: folders whose children are two-hex-digit fan-out folders
FANNED = ("packs", "moved/packs", "chunks", "snapshots")


def _junk(kind: str, folder: str) -> tuple[str, bool]:
    """The name of one kind of junk for ``folder`` and whether it is a directory."""
    last = folder.rsplit("/", 1)[-1]
    if kind == "short":  # looks like the folder's objects, too short to be one
        if len(last) == 2 and all(c in "0123456789abcdef" for c in last):
            return last + "0" * 10, False
        if folder in FANNED:  # "ab" there is a fan-out folder's name: a pack gc or forget
            return "a", False  # writes under packs/ab/ is then refused (CI: 1 run in ~256)
        return "0000000001" if folder.startswith(("runs/", "moved/runs/")) else "ab", False
    if kind == "dir":  # a folder where a file is expected, named like the folder's objects
        if len(last) == 2 and all(c in "0123456789abcdef" for c in last):
            return last + "f" * 62, True
        if folder.startswith(("runs/", "moved/runs/")) and folder.count("/") <= 2:
            return "00000000000000000099", True
        return "00", True
    return {"ds": ".DS_Store", "swp": ".x.swp", "tilde": "name~",
            "rsync": ".00000000000000000002.a1B2c3"}[kind], False


JUNK = ["ds", "swp", "tilde", "rsync", "short", "dir"]


def _grow(store: ckptfs.Store, run_id: str, n: int, tag: str) -> None:
    run = store.start_run(run_id)
    for i in range(n):
        run.checkpoint({"msgs": [f"{tag} {j} " * 30 for j in range(i * 10 + 1)],
                        "blob": ckptfs.Blob((tag.encode() + b"-%d-" % i) * 40_000)})


def _build(root: str) -> None:
    store = ckptfs.open_store(root)
    store.init({"record_bulk_max": 64 * 1024})
    _grow(store, "keep", 3, "keep")
    _grow(store, "old", 6, "old")
    run = store.start_run("gone")
    for i in range(3):
        run.checkpoint({"secret": (SECRET + b"%d " % i).decode() * 50,
                        "blob": ckptfs.Blob(SECRET * 20_000 + b"%d" % i)})
    _grow(store, "past", 2, "past")
    _grow(store, "sn", 3, "sn")
    forget_snapshots(store.repo, {"old": {1, 2, 3, 4}})
    gc(store.repo, grace_ms=0)  # forwards under moved/
    forget_snapshots(store.repo, {"old": {5}})  # and strays left for the next gc
    erase(store.repo, "past", reason="test")
    erase(store.repo, "sn", seq=1, reason="test")
    assert main(["expire", root, "keep", "--in", "300d"]) == 0
    assert main(["expire", root, "keep@2", "--in", "300d"]) == 0
    age_tree(root, 7200)


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    v2 = str(tmp_path_factory.mktemp("v2") / "store")
    _build(v2)
    assert any(Path(v2, "moved").rglob("*")), "the template needs forwards"
    assert any(Path(v2, "packs").rglob("*")), "the template needs packs"
    # a version 1 store (golden: runs alpha 1-4, beta 1, gamma 1-2) upgraded in place, alpha@1
    # forgotten (a v1 stray); its runs stand in for keep (alpha) and gone (gamma)
    v1 = v1_store(tmp_path_factory.mktemp("v1") / "store", "v1-basic")
    upgrade(ckptfs.open_store(v1).repo)
    forget_snapshots(ckptfs.open_store(v1).repo, {"alpha": {1}})
    age_tree(v1, 7200)
    return {"v2": v2, "v1": v1}


def _fill(folder: str, root: str) -> str:
    def first(top: str) -> str:
        return sorted(p.name for p in Path(root, top).iterdir() if len(p.name) == 2)[0]
    return folder.format(
        fan=first("packs") if "{fan}" in folder else "",
        cfan=first("chunks") if "{cfan}" in folder else "",
        sfan=first("snapshots") if "{sfan}" in folder else "")


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out + out.err


def _stone(root: str, run: str) -> Tombstone:
    return Tombstone.from_bytes(Path(root, "tombstones", f"{run}.cbor").read_bytes(), what=run)


def _op_gc(root: str, tmp: Path, c: Callable[..., tuple[int, str]]) -> None:
    rc, out = c("gc", root, "--grace", "0s")
    assert rc == 0, out
    rc, out = c("gc", root)
    assert rc == 0, out


def _runs(root: str) -> tuple[str, str]:
    """The runs that are kept and erased: keep and gone, or in the store upgraded from the
    golden version 1 store alpha and gamma."""
    return ("keep", "gone") if Path(root, "runs", "keep").exists() else ("alpha", "gamma")


def _op_erase(root: str, tmp: Path, c: Callable[..., tuple[int, str]]) -> None:
    keep, gone = _runs(root)
    rc, out = c("erase", root, gone, "--reason", "junk test")
    assert rc == 0, out
    assert _stone(root, gone).state == "erased"
    rc, out = c("erase", root, keep, "--snapshot", "2", "--reason", "junk test")
    assert rc == 0, out


def _op_forget(root: str, tmp: Path, c: Callable[..., tuple[int, str]]) -> None:
    rc, out = c("forget", root, "--keep-last", "1", "--prune")
    assert rc == 0, out


def _op_verify(root: str, tmp: Path, c: Callable[..., tuple[int, str]]) -> None:
    rc, out = c("verify", root, "--read-data")
    assert rc == 0, out


def _op_ls_log(root: str, tmp: Path, c: Callable[..., tuple[int, str]]) -> None:
    rc, out = c("ls", root)
    assert rc == 0, out
    for run in _runs(root):
        rc, out = c("log", root, run)
        assert rc == 0, out
    rc, out = c("du", root)
    assert rc == 0, out


def _op_copy(root: str, tmp: Path, c: Callable[..., tuple[int, str]]) -> None:
    dst = str(tmp / "dst")
    rc, out = c("copy", root, dst)
    assert rc == 0, out
    rc, out = c("verify", dst, "--read-data")
    assert rc == 0, out


def _op_export(root: str, tmp: Path, c: Callable[..., tuple[int, str]]) -> None:
    rc, out = c("export", root, str(tmp / "out.zip"))
    assert rc == 0, out


OPS = {"gc": _op_gc, "erase": _op_erase, "forget": _op_forget, "verify": _op_verify,
       "ls_log": _op_ls_log, "copy": _op_copy, "export": _op_export}

CASES = ([("v2", f) for f in V2_FOLDERS] + [("v1", f) for f in V1_FOLDERS])


def _refused(folder: str, kind: str) -> bool:
    """A file named like a run id where the run's folder belongs (``runs/``, ``tombstones/``),
    or a folder named like a record where the record file belongs (a run's folder, its
    ``retired/``): not junk but a damaged object of that name, which the storage layer refuses
    with an error naming the path and saying to remove it (tests/test_hostile_objects.py);
    ``test_misplaced_file_or_folder_is_refused_by_name`` covers those."""
    if kind == "short":
        return folder in ("runs", "tombstones")
    return kind == "dir" and folder.startswith("runs/")


JUNK_CASES = [(layout, folder, kind) for layout, folder in CASES for kind in JUNK
              if not _refused(folder, kind)]


def _files(root: str) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in Path(root).rglob("*")
            if p.is_file()}


def _drop(templates: dict[str, str], tmp_path: Path, layout: str, folder: str, kind: str
          ) -> tuple[str, dict[Path, bytes]]:
    """A copy of the template with one junk name in ``folder``; the junk files' bytes."""
    root = str(tmp_path / "s")
    shutil.copytree(templates[layout], root)
    folder = _fill(folder, root)
    name, is_dir = _junk(kind, folder)
    where = Path(root, folder, name)
    where.parent.mkdir(parents=True, exist_ok=True)
    if is_dir:
        where.mkdir()
        (where / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1junk")
        junk = {where / ".DS_Store": b"\x00\x00\x00\x01Bud1junk"}
    else:
        where.write_bytes(b"\x00\x00\x00\x01Bud1junk")
        junk = {where: b"\x00\x00\x00\x01Bud1junk"}
    old = time.time() - 7200
    for p in [where, *junk]:
        os.utime(p, (old, old))
    return root, junk


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("layout,folder,kind", JUNK_CASES,
                         ids=[f"{a}:{b or 'root'}-{c}" for a, b, c in JUNK_CASES])
def test_junk_is_ignored_and_kept(templates: dict[str, str], tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str], layout: str, folder: str,
                                  kind: str, op: str) -> None:
    root, junk = _drop(templates, tmp_path, layout, folder, kind)
    OPS[op](root, tmp_path, lambda *a: _cli(capsys, *a))
    for p, data in junk.items():
        assert p.read_bytes() == data, f"{p} changed or was deleted"


REFUSED = [(f, k) for _, f in CASES for k in JUNK if _refused(f, k)]


@pytest.mark.parametrize("folder,kind", REFUSED)
def test_misplaced_file_or_folder_is_refused_by_name(
        templates: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        folder: str, kind: str) -> None:
    """A reader that meets a file where a run's folder belongs, or a folder where a record
    belongs, either goes on or stops with an error naming that path (exit 1 or 3, never a
    traceback); gc and forget delete nothing of it."""
    root, junk = _drop(templates, tmp_path, "v2", folder, kind)
    name = folder + "/" + _junk(kind, folder)[0]
    for args in (["verify", root], ["ls", root], ["copy", root, str(tmp_path / "dst")]):
        rc, out = _cli(capsys, *args)
        assert rc == 0 or (rc in (1, 3) and name in out), (args, rc, out)
    for args in (["gc", root, "--grace", "0s"], ["forget", root, "--keep-last", "1"]):
        _cli(capsys, *args)
    for p, data in junk.items():
        assert p.read_bytes() == data, f"{p} changed or was deleted"


def test_case_count() -> None:
    """What the matrix covers: 18 folders x 6 junk names, less 5 placements that are refused
    by name rather than ignored, times 7 operations (each of which runs 1-4 commands)."""
    assert (len(CASES), len(JUNK), len(REFUSED), len(OPS)) == (18, 6, 5, 7)
    assert len(JUNK_CASES) * len(OPS) == (18 * 6 - 5) * 7 == 721


def test_erase_in_a_store_upgraded_from_v1(templates: dict[str, str], tmp_path: Path) -> None:
    """Found by the matrix, junk or not: erase of a run whose records are version 1 records (a
    store upgraded in place) stopped with "not a ckptfs v2 container" for every such record
    (exit 3, tombstone left ``erasing``); a version 1 record holds no bodies, so erase deletes
    the erased run's and ignores the others (spec/v2.md 10)."""
    root = str(tmp_path / "s")
    shutil.copytree(templates["v1"], root)
    stone = erase(ckptfs.open_store(root).repo, "gamma", reason="test")
    assert stone.state == "erased"
    assert not [p for p in Path(root, "runs", "gamma").iterdir() if p.name.isdigit()]
    assert Path(root, "runs", "alpha", "00000000000000000001").exists()  # a v1 stray: kept
    assert ckptfs.open_store(root).head("beta") is not None
