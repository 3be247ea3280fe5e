"""The portable local backend (issue 19): the fallbacks for macOS, Windows and filesystems
without hard links, proven on this machine.

``CKPTFS_LOCAL_MODE=portable`` turns off link mode, O_TMPFILE, syncfs(2) and O_NOFOLLOW:
create-only then takes a filelock per run folder. Under the lock a create is link(2) where the
store's filesystem has hard links (a link-mode writer of another process may create there:
tests/test_local_modes.py) and a check and a rename only where it has none. The rename path is
run here on a filesystem without hard links as every writer of the store sees it: ``os.link``
removed in the test process (fixture ``no_links``) and in its writer processes
(tests/nolinks.py), and on real exFAT through FUSE where this machine can mount it. Through
both create paths run: the storage contract, the crash-point enumeration (a sample by default,
all of it with ``--long``), processes killed while holding the lock, 8 racing writer processes,
gc of named temp files, and an import with the POSIX-only calls removed (as on Windows).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import ckptfs
from ckptfs.errors import InvalidArgument, StorageError
from ckptfs.ops.gc import gc
from ckptfs.ops.verify import verify
from ckptfs.storage import Storage, local_temps, open_storage
from ckptfs.storage.local import LocalStorage
from ckptfs.storage.local_caps import PORTABLE
from ckptfs.storage.local_lock import LOCKS, lock_name
from tests import test_crash_points as crash
from tests import test_racing_writers as racing
from tests import test_storage_contract as contract
from tests.conftest import TALLY
from tests.faults import Crash, FaultyStorage
from tests.lock_killee import dying_creates

HERE = Path(__file__).parent
LOCK_KILLEE = str(HERE / "lock_killee.py")
NOLINKS = str(HERE / "nolinks.py")
#: the two ways a filelock-mode create puts its file: link(2) (the filesystem has hard links)
#: or check and rename (it has none, as every writer sees it: ``os.link`` removed)
CREATE_PATHS = ("link", "rename")


@pytest.fixture
def portable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fallback mode for this process and every subprocess it starts."""
    monkeypatch.setenv("CKPTFS_LOCAL_MODE", "portable")


@pytest.fixture
def no_links(monkeypatch: pytest.MonkeyPatch) -> None:
    """A filesystem without hard links, as this process sees it: the probe finds none."""
    monkeypatch.delattr(os, "link")


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(HERE.parent), **extra}


# -- choosing the mode --------------------------------------------------------------------------
def test_the_probe_picks_the_fast_paths_where_they_work(tmp_path: Path) -> None:
    s = LocalStorage(str(tmp_path / "s"), disable=())
    assert not s.features.probed and "probed at the first write" in s.capabilities.create_only_how
    s.create("runs/r/1", b"x")
    f = s.features
    assert f.probed and f.link and f.o_nofollow and f.dir_fsync  # Linux, a disk with links
    assert s.capabilities.create_only_how == "link(2)"
    assert "hosts" in s.capabilities.create_only_scope
    assert os.listdir(tmp_path / "s" / "tmp") == []  # the probe left nothing


def test_portable_mode_is_chosen_by_the_environment(tmp_path: Path, portable: None) -> None:
    s = open_storage(str(tmp_path / "s"))
    assert isinstance(s, LocalStorage)
    s.create("runs/r/1", b"x")
    f = s.features
    assert not (f.link or f.o_tmpfile or f.syncfs or f.o_nofollow) and f.dir_fsync
    # the filesystem has hard links: the create under the lock is link(2), never a rename
    assert f.hard_links and s.capabilities.create_only_how == "filelock + link(2)"
    assert s.capabilities.create_only
    assert "processes on this host" in s.capabilities.create_only_scope
    assert os.listdir(tmp_path / "s" / "tmp" / LOCKS) == [lock_name("runs/r")]


def test_finer_settings_and_the_open_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                            ) -> None:
    monkeypatch.setenv("CKPTFS_LOCAL_DISABLE", "syncfs, o_tmpfile")
    s = open_storage(str(tmp_path / "a"))
    assert isinstance(s, LocalStorage)
    s.write("x/y", b"1")
    assert s.features.link and not s.features.syncfs and not s.features.o_tmpfile
    monkeypatch.delenv("CKPTFS_LOCAL_DISABLE")
    o = open_storage(str(tmp_path / "b"), local_mode="portable")
    assert isinstance(o, LocalStorage) and o.features.disabled == PORTABLE
    o2 = open_storage(str(tmp_path / "c"), local_disable=["link"])
    assert isinstance(o2, LocalStorage) and o2.features.disabled == {"link"}
    monkeypatch.setenv("CKPTFS_LOCAL_MODE", "fast")
    with pytest.raises(InvalidArgument, match="portable"):
        open_storage(str(tmp_path / "d"))
    monkeypatch.setenv("CKPTFS_LOCAL_MODE", "")
    monkeypatch.setenv("CKPTFS_LOCAL_DISABLE", "link,hardlinks")
    with pytest.raises(InvalidArgument, match="hardlinks"):
        open_storage(str(tmp_path / "e"))


def test_init_says_which_create_only_mode_the_store_got(tmp_path: Path) -> None:
    from tests.clihelp import cli

    out = cli("init", str(tmp_path / "a"), env=_env()).stdout
    assert "create-only: link(2)" in out and "hosts sharing it" in out
    out = cli("init", str(tmp_path / "b"), env=_env(CKPTFS_LOCAL_MODE="portable")).stdout
    assert "create-only: filelock" in out and "processes on this host" in out
    again = json.loads(cli("init", str(tmp_path / "b"), "--json",
                           env=_env(CKPTFS_LOCAL_MODE="portable")).stdout)
    assert again["created"] is False and again["create_only"] == "filelock + link(2)"


# -- the storage contract through the fallbacks -------------------------------------------------
class TestPortableContract(contract.TestStorageContract):
    """Every test of the storage contract, on local disk in filelock mode."""

    @pytest.fixture
    def storage(self, tmp_path: Path) -> Storage:
        return LocalStorage(str(tmp_path / "store"), disable=PORTABLE)


class TestNoLinksContract(contract.TestStorageContract):
    """Every test of the storage contract, in filelock mode on a filesystem without hard
    links (check and rename under the lock)."""

    @pytest.fixture
    def storage(self, tmp_path: Path, no_links: None) -> Storage:
        return LocalStorage(str(tmp_path / "store"), disable=PORTABLE)


@pytest.fixture(params=CREATE_PATHS)
def local(request: pytest.FixtureRequest, tmp_path: Path) -> LocalStorage:
    """A filelock-mode store, on a filesystem with hard links and on one without."""
    if request.param == "rename":
        request.getfixturevalue("no_links")
    return LocalStorage(str(tmp_path / "store"), disable=PORTABLE)


def test_portable_leaves_only_lock_files(local: LocalStorage) -> None:
    local.write_many([(f"chunks/ab/{i}", b"d" * i) for i in range(10)])
    local.create("runs/r/00000000000000000001", b"rec")
    with pytest.raises(FileExistsError):
        local.create("runs/r/00000000000000000001", b"rec2")
    local.replace("runs/r/hint", b"h")
    local.write("chunks/ab/3", b"ddd")  # present: nothing written
    tmp = Path(local.root) / "tmp"
    assert os.listdir(tmp) == [LOCKS]
    assert os.listdir(tmp / LOCKS) == [lock_name("runs/r")]
    assert local.read("runs/r/00000000000000000001") == b"rec"


@pytest.mark.parametrize("fail", ["write", "create", "replace"])
def test_portable_failed_writes_leave_nothing(local: LocalStorage,
                                             monkeypatch: pytest.MonkeyPatch, fail: str) -> None:
    local.write("warm/up", b"creates tmp/")

    def boom(*a: object, **k: object) -> None:
        raise OSError(28, "No space left on device")

    if fail == "create":  # the call that puts the record under the lock
        fail = "link" if local.features.hard_links else "rename"
    monkeypatch.setattr(os, fail, boom)
    with pytest.raises(StorageError, match="No space"):
        if fail == "replace":
            local.replace("runs/r/hint", b"x")
        else:
            local.create("runs/r/00000000000000000001", b"x")
    monkeypatch.undo()
    assert [n for n in os.listdir(Path(local.root) / "tmp") if n != LOCKS] == []
    assert not local.exists("runs/r/00000000000000000001") and not local.exists("runs/r/hint")
    local.lock_timeout = 5  # the failed create released its lock
    local.create("runs/r/00000000000000000001", b"x")


def test_portable_never_follows_a_symlink(local: LocalStorage, tmp_path: Path) -> None:
    """Without O_NOFOLLOW the refusal is lstat-based, for reads, hints and folders."""
    secret = tmp_path / "secret"
    secret.write_bytes(b"outside the store")
    local.write("chunks/aa/real", b"x")
    os.symlink(secret, Path(local.root) / "chunks" / "aa" / "link")
    for call in (lambda: local.read("chunks/aa/link"),
                 lambda: local.read_range("chunks/aa/link", 0, 4),
                 lambda: local.hint("chunks/aa/link", b"overwritten")):
        with pytest.raises(StorageError, match="symbolic link"):
            call()
    assert secret.read_bytes() == b"outside the store"
    os.symlink(tmp_path, Path(local.root) / "chunks" / "bb")
    with pytest.raises(StorageError, match="symbolic link"):
        local.write("chunks/bb/new", b"y")
    assert local.read_many(["chunks/aa/real"]) == [b"x"]


def test_a_symlinked_lock_folder_is_refused(local: LocalStorage, tmp_path: Path) -> None:
    """tmp/locks/ must be a real folder of the store: a link there would put the lock files
    (created by every commit) outside it."""
    local.write("warm/up", b"creates tmp/")
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, Path(local.root) / "tmp" / LOCKS)
    with pytest.raises(StorageError, match="symbolic link"):
        local.create("runs/r/00000000000000000001", b"x")
    assert list(outside.iterdir()) == [] and not local.exists("runs/r/00000000000000000001")


def test_a_link_swapped_in_after_the_lstat_is_refused(local: LocalStorage, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The race lstat leaves open: the object is replaced by a link between the lstat and the
    open. The open follows it, but the inode differs from the one lstat saw: refused."""
    secret = tmp_path / "secret"
    secret.write_bytes(b"outside the store")
    local.write("chunks/aa/obj", b"inside")
    swap_link_in_at_open(monkeypatch, os.path.join(local.root, "chunks", "aa", "obj"), secret)
    with pytest.raises(StorageError, match="symbolic link"):
        local.read("chunks/aa/obj")


def swap_link_in_at_open(monkeypatch: pytest.MonkeyPatch, target: str, secret: Path) -> None:
    """Just before ``os.open`` of ``target``: replace it by a symbolic link to ``secret``."""
    real_open = os.open

    def swapping_open(path: str, flags: int, *a: object, **k: object) -> int:
        if path == target:
            os.unlink(target)
            os.symlink(secret, target)
        return real_open(path, flags, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", swapping_open)


# -- processes killed while holding the lock ----------------------------------------------------
@pytest.mark.parametrize("how", CREATE_PATHS)
@pytest.mark.parametrize("when", ["before-rename", "after-rename"])
def test_a_writer_killed_holding_the_lock_blocks_nobody(tmp_path: Path, when: str,
                                                        how: str) -> None:
    """SIGKILL inside the create (just before or after its rename, or its link), lock held:
    the OS releases it, the lock file stays and blocks nobody; the run is at the last commit
    or the one in flight, and goes on."""
    url = str(tmp_path / "store")
    env = _env(CKPTFS_LOCAL_MODE="portable")
    pre = [NOLINKS] if how == "rename" else []
    p = subprocess.run([sys.executable, *pre, LOCK_KILLEE, url, "r", when], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == -9 and p.stdout == "committed 1\n", (p.returncode, p.stdout, p.stderr)
    lock = Path(url) / "tmp" / LOCKS / lock_name("runs/r")
    assert lock.exists()  # left behind by the dead holder
    store = ckptfs.Store(LocalStorage(url, disable=PORTABLE))
    store.storage.lock_timeout = 10  # type: ignore[attr-defined]  # held: StorageError
    head = store.head("r")
    assert head.seq == (2 if when == "after-rename" else 1)
    assert store.read("r") == {"n": "second" if when == "after-rename" else "first"}
    run = store.resume("r")
    run.checkpoint({"n": "after"})
    assert store.head("r").seq == head.seq + 1 and store.read("r") == {"n": "after"}
    assert verify(store.repo, read_data=True).ok
    if when == "before-rename":  # the fsynced temp file stayed: gc's to remove
        temps = [n for n in os.listdir(Path(url) / "tmp") if n != LOCKS]
        assert len(temps) == 1, temps
        report = gc(store.repo, grace_ms=0, now=2**62)
        assert report.tmp_deleted == 1
        assert os.listdir(Path(url) / "tmp") == [LOCKS] and lock.exists()
        assert verify(store.repo, read_data=True).ok and store.read("r") == {"n": "after"}
    TALLY[f"crash:portable:killed-holding-lock:{how}"] += 1


def test_a_live_holder_excludes_other_processes(tmp_path: Path) -> None:
    """The lock is exclusive across processes: while another process holds it a create
    waits, and gives up with a StorageError (not a hang) after lock_timeout."""
    url = str(tmp_path / "store")
    holder = subprocess.Popen([sys.executable, LOCK_KILLEE, url, "r", "hold"], text=True,
                              env=_env(CKPTFS_LOCAL_MODE="portable"),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert holder.stdout is not None and holder.stdin is not None
    try:
        assert holder.stdout.readline() == "held\n"
        s = LocalStorage(url, disable=PORTABLE)
        s.lock_timeout = 0.3
        with pytest.raises(StorageError, match="held the create lock"):
            s.create("runs/r/00000000000000000001", b"x")
        assert not s.exists("runs/r/00000000000000000001")
        s.create("runs/other/00000000000000000001", b"y")  # another run's lock is free
    finally:
        holder.stdin.write("\n")
        holder.stdin.close()
        assert holder.wait(timeout=60) == 0
    s.create("runs/r/00000000000000000001", b"x")  # released: the create goes through


# -- crash points and racing writers through the fallbacks --------------------------------------
def _crash_plan(log: list[tuple[str, bool]], sample: bool, creates: float = 1.0,
                others: float = 1 / 7) -> list[tuple[int, str]]:
    """Every operation dies before, after and torn (writes), and every create also inside it
    with its lock held (before and after the rename); the sample keeps a seeded fraction of
    the creates (where the lock is taken: all by default) and of the rest."""
    plan = [(k, mode) for k, (_, has_data) in enumerate(log)
            for mode in ("before", "after", "tear", "in-lock", "in-lock-after-rename")
            if (mode != "tear" or has_data) and (mode[:2] != "in" or log[k][0] == "create")]
    if not sample:
        return plan
    rng = random.Random(19)
    return [(k, m) for k, m in plan
            if rng.random() < (creates if log[k][0] == "create" else others)]


def _crash(mode: str) -> Callable[[], None]:
    def crash_now() -> None:
        raise Crash(f"inside create ({mode})")

    return crash_now


def _crash_points(root: Path, monkeypatch: pytest.MonkeyPatch, *, sample: bool,
                  disable: frozenset[str] | None = PORTABLE, links: bool = True,
                  **fractions: float) -> int:
    """The crash-point plan through filelock mode; ``links=False``: on a filesystem without
    hard links (as this process sees it), so that creates check and rename."""
    if not links:
        monkeypatch.delattr(os, "link")

    def fresh() -> LocalStorage:
        return LocalStorage(str(root / os.urandom(8).hex()), durable=False, disable=disable)

    # a check window no step of the script outlasts (spec/v2.md 5.4), as in
    # tests/test_crash_points.py: every run makes the same storage operations
    monkeypatch.setenv("CKPTFS_CHECK_WINDOW_MS", "60000")
    counting = FaultyStorage(fresh())
    crash.script(ckptfs.Store(counting, chunker=crash.SMALL), crash.Journal())
    plan = _crash_plan(counting.log, sample, **fractions)
    reals = {name: getattr(os, name) for name in ("rename", "link") if hasattr(os, name)}
    real_lock = local_temps.folder_lock
    for k, mode in plan:
        inner = fresh()
        inside = mode.startswith("in-lock")
        if inside:  # die inside the create, lock held: before or after its rename or link
            dying = dying_creates(mode.endswith("rename"), _crash(mode))
            hook = (lambda i, name, path, k=k, dying=dying: monkeypatch.setattr(
                local_temps, "folder_lock", dying) if i == k else None)
            faulty = FaultyStorage(inner, before=hook)
        else:
            faulty = FaultyStorage(inner, fail_at=k, mode=mode)
        j = crash.Journal()
        with pytest.raises(Crash):
            crash.script(ckptfs.Store(faulty, chunker=crash.SMALL), j)
        for name, real in reals.items():
            monkeypatch.setattr(os, name, real)
        monkeypatch.setattr(local_temps, "folder_lock", real_lock)
        if inside:
            _drop_empty_run_folders(Path(inner.root))
        after = LocalStorage(inner.root, durable=False, disable=disable)
        after.lock_timeout = 10  # a lock left held would raise, not hang
        crash.check_after_crash(after, j, f"op {k} {mode}: {faulty.crashed_in}")
    return len(plan)


def _drop_empty_run_folders(root: Path) -> None:
    """A death inside the first create of a run leaves its folder empty (link mode too: the
    folder is made before the link). ``Store.runs()`` then lists a run that ``resume`` says does
    not exist, a quirk of local folders outside this test's subject (noted in the issue's
    report); the folder is removed so that the promises below are what gets checked."""
    runs = root / "runs"
    for d in runs.iterdir() if runs.is_dir() else []:
        if d.is_dir() and not any(d.iterdir()):
            d.rmdir()
            TALLY["empty run folders left by a death inside a first create"] += 1


@pytest.fixture
def scratch() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="ckptfs-portable-",
                              dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("how", CREATE_PATHS)
def test_crash_points_in_filelock_mode_sample(scratch: Path, monkeypatch: pytest.MonkeyPatch,
                                             how: str) -> None:
    n = _crash_points(scratch, monkeypatch, sample=True, links=how == "link")
    TALLY[f"crash:portable:sample:{how}"] += n
    print(f"\ncrash points in filelock mode, creates by {how} (sample): {n}")


@pytest.mark.long
@pytest.mark.parametrize("how", CREATE_PATHS)
def test_crash_points_in_filelock_mode_all(scratch: Path,
                                          monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    n = _crash_points(scratch, monkeypatch, sample=False, links=how == "link")
    TALLY[f"crash:portable:v2:{how}"] += n
    print(f"\ncrash points in filelock mode, creates by {how}, format v2: {n}")


def test_sigkill_at_random_moments_in_filelock_mode(tmp_path: Path, portable: None) -> None:
    crash.test_sigkill_at_random_moments(tmp_path)
    assert os.listdir(tmp_path / "store" / "tmp" / LOCKS)  # the killees took the lock


@pytest.mark.parametrize("how", CREATE_PATHS)
def test_eight_writers_race_in_filelock_mode(tmp_path: Path, portable: None,
                                             capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """8 processes (inheriting CKPTFS_LOCAL_MODE) race for one run: 0 lost, 0 duplicated;
    on a filesystem with hard links and (tests/nolinks.py) without."""
    if how == "rename":
        monkeypatch.setattr(racing, "RACER_PREFIX", [NOLINKS])
    url = str(tmp_path / "store")
    racing.test_eight_writers_race((url, racing.ATTEMPTS["local"]), tmp_path)
    locks = os.listdir(Path(url) / "tmp" / LOCKS)
    assert lock_name("runs/shared") in locks  # the writers created under the lock
    with capsys.disabled():
        print(capsys.readouterr().out.strip().replace("local", f"local, filelock mode, {how}"))


# -- no POSIX-only call at all (as on Windows) --------------------------------------------------
NO_POSIX = """
import os, sys
for name in ("O_NOFOLLOW", "O_TMPFILE", "O_DIRECTORY", "O_NONBLOCK", "O_NOCTTY", "O_CLOEXEC",
             "pread", "link", "fchmod"):
    if hasattr(os, name):
        delattr(os, name)
sys.modules["fcntl"] = None  # import fcntl raises ImportError, as on Windows
import ckptfs
store = ckptfs.open_store(sys.argv[1])
run = store.start_run("r")
for i in range(3):
    run.checkpoint({"i": i, "blob": ckptfs.Blob(bytes([i]) * 300000)})
print(store.storage.capabilities.create_only_how, store.storage.features.describe())
store = ckptfs.open_store(sys.argv[1])
assert store.read("r")["blob"].read() == bytes([2]) * 300000
assert store.resume("r").state["i"] == 2
"""


def test_commit_and_restore_without_the_posix_only_calls(tmp_path: Path) -> None:
    """Importing ckptfs and a commit/restore with O_NOFOLLOW, O_TMPFILE, O_DIRECTORY,
    os.pread, os.link and the fcntl module gone (a regression test: before issue 19 the first
    checkpoint raised AttributeError for os.link, and reads for os.O_NOFOLLOW)."""
    p = subprocess.run([sys.executable, "-c", NO_POSIX, str(tmp_path / "s")], env=_env(),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.startswith("filelock uses syncfs, dir_fsync;"), p.stdout
    assert verify(ckptfs.open_store(str(tmp_path / "s")).repo, read_data=True).ok


# -- a real filesystem without hard links: exFAT through FUSE -----------------------------------
def _mount_exfat(base: Path) -> tuple[str, str] | str:
    """Mount a fresh exFAT image (loop device + exfat-fuse); (mount point, loop device), or
    why it cannot be done here."""
    tools = ("losetup", "mkfs.exfat", "mount.exfat-fuse", "umount")
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        return f"needs {', '.join(missing)} (Debian: exfatprogs, exfat-fuse)"
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        return "needs root and /dev/fuse to mount a loop device through FUSE"
    img, mnt = base / "exfat.img", base / "mnt"
    mnt.mkdir()
    with open(img, "wb") as f:
        f.truncate(96 << 20)

    def run(*cmd: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60)

    if (p := run("mkfs.exfat", str(img))).returncode:
        return f"mkfs.exfat failed: {p.stderr.strip()[:200]}"
    if (p := run("losetup", "-f", "--show", str(img))).returncode:
        return f"no loop device: {p.stderr.strip()[:200]}"
    loop = p.stdout.strip()
    if (p := run("mount.exfat-fuse", loop, str(mnt))).returncode:
        run("losetup", "-d", loop)
        return f"mount refused: {(p.stderr or p.stdout).strip()[:200]}"
    return str(mnt), loop


@pytest.fixture(scope="module")
def exfat() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="ckptfs-exfat-"))
    got = _mount_exfat(base)
    if isinstance(got, str):
        shutil.rmtree(base, ignore_errors=True)
        pytest.skip(f"no exFAT filesystem here: {got}")
    mnt, loop = got
    try:
        yield Path(mnt)
    finally:
        _unmount(mnt, loop)
        shutil.rmtree(base, ignore_errors=True)


def _unmount(mnt: str, loop: str) -> None:
    """Unmount (lazily if the FUSE daemon is still busy) and free the loop device; the image
    is removed only once nothing holds it."""
    p = subprocess.run(["umount", mnt], capture_output=True, text=True, timeout=60)
    if p.returncode:
        print(f"umount {mnt}: {p.stderr.strip()}; detaching lazily")
        subprocess.run(["umount", "-l", mnt], capture_output=True, timeout=60)
    subprocess.run(["losetup", "-d", loop], capture_output=True, timeout=60)


def test_exfat_gets_filelock_by_the_probe(exfat: Path) -> None:
    """No setting: the probe finds no hard links and takes the filelock fallback (a regression
    test: the first checkpoint failed with 'ckptfs.cbor: Operation not permitted')."""
    store = ckptfs.open_store(str(exfat / "probe"))
    run = store.start_run("r")
    for i in range(3):
        run.checkpoint({"i": i, "blob": ckptfs.Blob(bytes([i]) * 200000)})
    st = store.storage
    assert isinstance(st, LocalStorage)
    assert not st.features.link and not st.features.hard_links
    assert st.capabilities.create_only_how == "filelock"  # check and rename under the lock
    assert store.read("r")["i"] == 2 and verify(store.repo, read_data=True).ok


class TestExfatContract(contract.TestStorageContract):
    """Every test of the storage contract on exFAT (FUSE): no hard links, no symlinks."""

    @pytest.fixture
    def storage(self, exfat: Path) -> Storage:
        return LocalStorage(str(exfat / os.urandom(8).hex()))


def test_eight_writers_race_on_exfat(exfat: Path, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    url = str(exfat / "race")
    racing.test_eight_writers_race((url, 2), tmp_path)
    with capsys.disabled():
        print(capsys.readouterr().out.strip().replace("local", "exFAT (FUSE), filelock"))


@pytest.mark.long
def test_crash_points_on_exfat_sample(exfat: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash sample on the real filesystem, no feature disabled: the probe decides (long:
    FUSE makes each point slow; the default suite has the filelock-mode sample on tmpfs)."""
    root = exfat / "crash"
    root.mkdir()
    n = _crash_points(root, monkeypatch, sample=True, disable=frozenset(), creates=1 / 3,
                      others=1 / 20)
    TALLY["crash:exfat:sample"] += n
    print(f"\ncrash points on exFAT (sample): {n}")



def test_reference_checks_without_o_nonblock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                             ) -> None:
    """A local reference is checked where os.O_NONBLOCK does not exist (Windows): a regression
    test, the check raised AttributeError before."""
    from ckptfs.format.models import Reference
    from ckptfs.runtime.refs import check_reference, policy_of

    page = tmp_path / "page.txt"
    page.write_bytes(b"an external page")
    monkeypatch.delattr(os, "O_NONBLOCK")
    entry = Reference(uri=page.as_uri(), size=len(b"an external page"))
    assert check_reference(entry, policy=policy_of([str(tmp_path)])) is None
    wrong = Reference(uri=page.as_uri(), size=3)
    assert "expected 3" in (check_reference(wrong, policy=policy_of([str(tmp_path)])) or "")


def test_the_ci_workflow_runs_every_platform_and_python() -> None:
    """.github/workflows/ci.yml (checked with actionlint; it runs on GitHub, not here) keeps
    the matrix README promises: Linux, macOS, Windows by Python 3.11-3.13, suite and mypy."""
    yaml = pytest.importorskip("yaml")
    wf = yaml.safe_load((HERE.parent / ".github" / "workflows" / "ci.yml").read_text())
    job = wf["jobs"]["test"]
    matrix = job["strategy"]["matrix"]
    assert set(matrix["os"]) == {"ubuntu-latest", "macos-latest", "windows-latest"}
    assert matrix["python"] == ["3.11", "3.12", "3.13"]
    runs = " ".join(step.get("run", "") for step in job["steps"])
    assert "python -m mypy" in runs and "python -m pytest" in runs
    assert "tests/test_local_portable.py" in runs
