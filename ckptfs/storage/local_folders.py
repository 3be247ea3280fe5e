"""The folders of a local store: paths inside its root, no links, creation, fsync.

The base of ``LocalStorage`` (``local.py``): what every primitive needs before it touches a
file, and the features (``local_caps``) probed for the store at its first write.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterable

import attrs

from ckptfs.errors import StorageError
from ckptfs.format.names import TMP
from ckptfs.storage import local_errors as err
from ckptfs.storage import local_os as los
from ckptfs.storage.base import Capabilities, check_path
from ckptfs.storage.local_caps import LocalFeatures, check_names, disabled_features, probe, \
    static_features
from ckptfs.storage.local_lock import LOCK_TIMEOUT_S, LOCKS

#: from this many files (or folders) on, one syncfs(2) of the store's filesystem replaces their
#: fsyncs: streaming a large blob then costs a few flushes instead of two per 64 KiB chunk
SYNCFS_MIN = 32


class LocalFolders:
    """The root, the features in use, and the store's folders (checked, created, fsynced)."""

    url: str
    capabilities: Capabilities

    def __init__(self, root: str, *, durable: bool = True, create: bool = True,
                 disable: Iterable[str] | None = None) -> None:
        """``disable``: local features to leave unused (``local_caps.FEATURES``); by default
        those that ``CKPTFS_LOCAL_MODE`` / ``CKPTFS_LOCAL_DISABLE`` name."""
        self.root = os.path.abspath(root)
        self.url = self.root
        self.durable = durable
        off = disabled_features() if disable is None else check_names(disable)
        self.features: LocalFeatures = static_features(off)
        self.capabilities = self._capabilities()
        self._known_dirs: set[str] = set()
        self._safe_dirs: set[str] = set()
        self._dirty: set[str] = set()
        self._tmp = os.path.join(self.root, TMP)
        self._locks = os.path.join(self._tmp, LOCKS)
        self._tmpfile_ok = True
        #: filelock mode: how long a create waits for its folder's lock (a live holder's)
        self.lock_timeout = LOCK_TIMEOUT_S
        #: the thread ``probe_features_soon`` started, if any (and the lock that starts one)
        self._probing = threading.Lock()
        self._prober: threading.Thread | None = None

    def _capabilities(self) -> Capabilities:
        f = self.features
        how = f.create_only_how if f.probed else "link(2) or filelock (probed at the first write)"
        return Capabilities(create_only=True, create_only_how=how, durable=self.durable,
                            create_only_scope=f.create_only_scope if f.probed else "")

    def probe_features(self) -> LocalFeatures:
        """The features in use, probed now if no write has probed them yet (``ckptfs init``
        reports them for a store that already existed)."""
        return self._features()

    def probe_features_soon(self) -> None:
        """Probe the features in a background thread, so that the first write finds them
        probed, and a process that only reads does not wait for the probe's files and
        fsyncs (the LangGraph saver's first lookup: a fresh ``get_state`` of a 200-step thread
        took 7.95 ms with the probe in line, 7.41 ms with it in the background). A probe that
        fails is left for the first write, which probes again and reports it. The thread is
        not a daemon: it finishes before the interpreter exits, so no probe file is left
        behind."""
        with self._probing:
            if self.features.probed or self._prober is not None:
                return
            self._prober = threading.Thread(target=self._probe_quietly, name="ckptfs-probe")
            self._prober.start()

    def _probe_quietly(self) -> None:
        """The background probe: an error is the first write's to report, not this thread's."""
        try:
            self._features()
        except (StorageError, OSError):
            pass

    def _features(self) -> LocalFeatures:
        """The features, probed in the store's tmp/ folder the first time a write needs them
        (after a background probe, if one runs: its result is taken)."""
        if not self.features.probed:
            prober = self._prober
            if prober is not None and prober is not threading.current_thread():
                prober.join()  # returns at once in a forked child: the thread is not there
            if not self.features.probed:  # no lock held while probing (a fork may copy
                self._probe_now()         # one held): two probes at once are harmless
        return self.features

    def _probe_now(self) -> None:
        """Probe in tmp/ (made if missing, never through a link) and take the result."""
        self._check_no_links(self._tmp)
        try:
            self._ensure_dir(self._tmp)
            self.features = probe(self._tmp, self.features.disabled)
        except StorageError:
            raise
        except OSError as e:
            raise err.wrap(e, TMP) from e
        self.capabilities = self._capabilities()

    # -- helpers -----------------------------------------------------------------------------
    def _abs(self, path: str) -> str:
        """The absolute path of ``path``; its folders inside the store must not be links."""
        full = os.path.join(self.root, *check_path(path).split("/"))
        self._check_no_links(os.path.dirname(full))
        return full

    def _check_no_links(self, d: str) -> None:
        """Refuse a folder inside the store that is (or lies below) a symbolic link: a link
        would let reads and writes escape the store root. Checked once per folder."""
        if d in self._safe_dirs or d == self.root:
            return
        rel = os.path.relpath(d, self.root)
        cur = self.root
        for part in rel.split(os.sep):
            cur = os.path.join(cur, part)
            if cur in self._safe_dirs:
                continue
            try:
                if stat.S_ISLNK(os.lstat(cur).st_mode):
                    raise err.symlink(os.path.relpath(cur, self.root), "folder")
            except FileNotFoundError:
                return  # not created yet; _ensure_dir creates real folders
            except NotADirectoryError as e:
                raise err.below_a_file(os.path.relpath(cur, self.root)) from e
            self._safe_dirs.add(cur)

    def _fsync(self, fd: int) -> None:
        los.fsync_file(fd, self.features.fullfsync)

    def _fsync_dir(self, d: str) -> None:
        if self.durable and self.features.dir_fsync:
            los.fsync_dir(d, self.features.fullfsync)

    def _ensure_dir(self, d: str) -> None:
        """Create folder ``d`` (and parents) if missing. The parents of created folders must be
        fsynced before anything below them is committed: they join ``_dirty`` and are synced
        by the next ``_sync_dirs``."""
        if d in self._known_dirs:
            return
        missing = []
        cur = d
        while not os.path.isdir(cur):
            missing.append(cur)
            parent = os.path.dirname(cur)
            if parent == cur:
                break
            cur = parent
        for m in reversed(missing):
            try:
                os.mkdir(m)
            except FileExistsError:
                if not os.path.isdir(m):
                    raise err.not_a_folder(os.path.relpath(m, self.root)) from None
            except NotADirectoryError:
                raise err.not_a_folder(os.path.relpath(os.path.dirname(m), self.root)) from None
            self._dirty.add(os.path.dirname(m))
        self._known_dirs.add(d)

    def _sync_dirs(self, dirs: Iterable[str | None]) -> None:
        """fsync the folders whose entries changed, and the parents of folders just created."""
        todo = sorted({d for d in dirs if d is not None} | self._dirty)
        self._dirty.clear()
        if not (self.durable and self.features.dir_fsync):
            return  # Windows: a folder cannot be fsynced (RELIABILITY.md says what it costs)
        if len(todo) >= SYNCFS_MIN and self._syncfs_dir():
            return
        los.parallel(self._fsync_dir, todo)

    def _syncfs_dir(self) -> bool:
        """One syncfs(2) of the store's filesystem; False when it is off or fails (the caller
        then fsyncs one by one; a failing syncfs turns it off for this store)."""
        if not self.features.syncfs:
            return False
        try:
            fd = los.open_dir(self.root)
            try:
                los.syncfs(fd)
            finally:
                os.close(fd)
        except OSError:
            self.features = attrs.evolve(self.features, syncfs=False)
            return False
        return True
