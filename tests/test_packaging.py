"""What a user installs (issue 31): the ckptfs wheel holds the runtime only, the conformance suite
is a distribution of its own, and the pytest plugin loads only where a project opts in.

Before: the wheel held three top-level names (``ckptfs``, ``conformance`` with 4,838 vector files,
and ``ckptfs-demo-store`` whenever the demo had run in the checkout) and a ``pytest11`` entry
point that loaded into every pytest run of every project that installed ckptfs."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _wheel(src: Path, out: Path) -> zipfile.ZipFile:
    """Build the wheel of the project in ``src`` (no network: build deps are installed)."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(out), str(src)],
                   check=True, capture_output=True, timeout=300)
    (whl,) = out.glob("*.whl")
    return zipfile.ZipFile(whl)


def _top_levels(whl: zipfile.ZipFile) -> set[str]:
    return {n.split("/")[0] for n in whl.namelist() if ".dist-info/" not in n}


#: what a build must not see or leave behind in the checkout (a build in place leaves build/
#: and *.egg-info, which mypy and the next build would then pick up)
IGNORED = shutil.ignore_patterns(".git", ".venv", ".emulators", "build", "*.egg-info",
                                 "__pycache__", ".mypy_cache", ".pytest_cache", "site")


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, zipfile.ZipFile]:
    """Both wheels, built from a copy of the checkout holding what the quickstart leaves in it
    (the demo's store and payments log): neither may get into a wheel."""
    src = tmp_path_factory.mktemp("src") / "ckptfs"
    shutil.copytree(REPO, src, ignore=IGNORED)
    (src / "ckptfs-demo-store").mkdir(exist_ok=True)
    (src / "ckptfs-demo-store" / "ckptfs.cbor").write_bytes(b"x")
    (src / "ckptfs-demo-store.payments.jsonl").write_text("{}\n")
    return {"ckptfs": _wheel(src, tmp_path_factory.mktemp("w1")),
            "conformance": _wheel(src / "ckptfs_conformance", tmp_path_factory.mktemp("w2"))}


def test_runtime_wheel_holds_ckptfs_only(wheels: dict[str, zipfile.ZipFile]) -> None:
    whl = wheels["ckptfs"]
    assert _top_levels(whl) == {"ckptfs"}
    assert "ckptfs/py.typed" in whl.namelist()
    (meta,) = [n for n in whl.namelist() if n.endswith(".dist-info/entry_points.txt")]
    entry_points = whl.read(meta).decode()
    assert "pytest11" not in entry_points and "ckptfs = ckptfs.cli:main" in entry_points
    assert sum(i.file_size for i in whl.infolist()) < 8 * 2**20  # vectors: ~40 MB


def test_conformance_is_its_own_distribution(wheels: dict[str, zipfile.ZipFile]) -> None:
    whl = wheels["conformance"]
    assert _top_levels(whl) == {"ckptfs_conformance"}
    names = whl.namelist()
    vectors = [n for n in names if n.startswith("ckptfs_conformance/vectors/")]
    on_disk = [p for p in (REPO / "ckptfs_conformance" / "vectors").rglob("*") if p.is_file()]
    assert len(vectors) == len(on_disk) > 1000
    assert "ckptfs_conformance/adapters/ckptfs_adapter.py" in names
    # every module of the suite, subpackages included (a split must list a new subpackage)
    src = REPO / "ckptfs_conformance"
    modules = {f"ckptfs_conformance/{p.relative_to(src).as_posix()}" for p in src.rglob("*.py")
               if not {"vectors", "build"} & set(p.relative_to(src).parts)}
    assert len(modules) > 20 and modules <= set(names), sorted(modules - set(names))
    (meta,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    assert "ckptfs-conformance = ckptfs_conformance.runner:main" in whl.read(meta).decode()


def test_pytest_plugin_is_opt_in(tmp_path: Path) -> None:
    """A project that installs ckptfs gets no fixture until it opts in."""
    (tmp_path / "test_uses_store.py").write_text(
        "def test_it(ckptfs_store):\n"
        "    ckptfs_store.start_run('r').checkpoint({'x': 1})\n"
        "    assert ckptfs_store.read('r') == {'x': 1}\n")
    base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)]
    plain = subprocess.run(base, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert plain.returncode == 1 and "fixture 'ckptfs_store' not found" in plain.stdout
    opted = subprocess.run([*base, "-p", "ckptfs.pytest_plugin"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
    assert opted.returncode == 0, opted.stdout
