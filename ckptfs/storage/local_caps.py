"""What the local backend can use on this OS and this filesystem, probed, never guessed.

Six features, each with a fallback (RELIABILITY.md "Local disk modes"):

- ``link``: link mode. Create-only is ``link(2)``, which fails with EEXIST when the name
  exists, with no lock. Off where the store's filesystem has no hard links (exFAT/FAT, many
  SMB and FUSE mounts) or where the settings below turn it off: create-only then takes a
  ``filelock`` lock per folder (``local_lock``) and creates as ``local_temps`` says, by
  ``link(2)`` still wherever the filesystem has hard links (``hard_links``, probed whatever
  the settings), so that it never replaces what a link-mode writer created.
- ``o_tmpfile``: unnamed temp files (Linux O_TMPFILE, linked through /proc/self/fd); else named
  temp files in the store's ``tmp/`` folder, removed after use and by ``ckptfs gc`` when a
  crash leaves them.
- ``syncfs``: one syncfs(2) flushes a large batch; else one fsync per file.
- ``o_nofollow``: opens refuse symbolic links in the kernel; else lstat before the open and a
  check after it that the file opened is the one lstat saw.
- ``fullfsync``: macOS ``fcntl(F_FULLFSYNC)``, which flushes the drive's cache too.
- ``dir_fsync``: folders can be fsynced (not on Windows, where a folder cannot be opened).

``probe`` tries each on the store's own ``tmp/`` folder at the first write (as object stores
are probed). ``CKPTFS_LOCAL_DISABLE=link,o_tmpfile,...`` (or ``CKPTFS_LOCAL_MODE=portable``,
the four Linux-only ones) turns features off, to run the fallbacks where the fast paths work.
No setting makes a writer that renames over a name: whether the filesystem has hard links
(``LocalFeatures.hard_links``) is a fact of the store's filesystem, probed whatever the
settings say, because a writer in another process may be in link mode there.
"""

from __future__ import annotations

import errno
import os
import secrets
from collections.abc import Iterable, Mapping

import attrs

from ckptfs.errors import InvalidArgument
from ckptfs.storage import local_os as los

FEATURES = ("link", "o_tmpfile", "syncfs", "o_nofollow", "fullfsync", "dir_fsync")
#: what ``CKPTFS_LOCAL_MODE=portable`` turns off: the calls Linux has and macOS/Windows lack
PORTABLE = frozenset({"link", "o_tmpfile", "syncfs", "o_nofollow"})
ENV_MODE = "CKPTFS_LOCAL_MODE"
ENV_DISABLE = "CKPTFS_LOCAL_DISABLE"

LINK_HOW = "link(2)"
LOCK_HOW = "filelock"
LOCK_LINK_HOW = "filelock + link(2)"
LINK_SCOPE = "atomic in the filesystem: processes and hosts sharing it, NFS included"
LOCK_SCOPE = ("a lock per run folder: processes on this host; hosts sharing the filesystem "
              "only where its locks work across hosts, as NFS with a working lock manager, "
              "not every SMB or FUSE mount")


def disabled_features(environ: Mapping[str, str] | None = None) -> frozenset[str]:
    """The features the environment turns off (``CKPTFS_LOCAL_MODE``, ``CKPTFS_LOCAL_DISABLE``)."""
    env = os.environ if environ is None else environ
    out: set[str] = set()
    mode = env.get(ENV_MODE, "").strip().lower()
    if mode == "portable":
        out |= PORTABLE
    elif mode not in ("", "auto"):
        raise InvalidArgument(f"{ENV_MODE}={mode!r}: use 'portable' (the fallbacks that work on "
                              "every OS and filesystem) or 'auto' (probe, the default)")
    return frozenset(out) | check_names(n for n in env.get(ENV_DISABLE, "").split(","))


def check_names(names: Iterable[str]) -> frozenset[str]:
    out = {n.strip().lower() for n in names if n.strip()}
    bad = sorted(out - set(FEATURES))
    if bad:
        raise InvalidArgument(f"{ENV_DISABLE}: unknown feature(s) {', '.join(bad)}; the local "
                              f"backend's features are {', '.join(FEATURES)}")
    return frozenset(out)


@attrs.frozen
class LocalFeatures:
    """The features in use for one store (False: its fallback is used)."""

    link: bool
    o_tmpfile: bool
    syncfs: bool
    o_nofollow: bool
    fullfsync: bool
    dir_fsync: bool
    #: False until ``probe`` ran (the write-only features are then not known yet)
    probed: bool = False
    disabled: frozenset[str] = frozenset()
    #: hard links work on the store's filesystem (probed whatever ``disabled`` says): then a
    #: writer of another process may be in link mode, and a filelock-mode create must be a
    #: ``link(2)`` too, never a rename over the name (issue 30)
    hard_links: bool = True

    @property
    def create_only_how(self) -> str:
        return LINK_HOW if self.link else LOCK_LINK_HOW if self.hard_links else LOCK_HOW

    @property
    def create_only_scope(self) -> str:
        return LINK_SCOPE if self.link else LOCK_SCOPE

    def describe(self) -> str:
        """One line for humans: the features in use and the fallbacks."""
        on = [f for f in FEATURES if getattr(self, f)]
        off = [f for f in FEATURES if not getattr(self, f)]
        return f"uses {', '.join(on) or 'no fast path'}; fallbacks for {', '.join(off) or 'none'}"


def static_features(disabled: frozenset[str]) -> LocalFeatures:
    """What is known without writing: which calls this OS and this Python have. The features
    that depend on the filesystem are assumed present until ``probe`` runs."""
    return LocalFeatures(
        link="link" not in disabled and hasattr(os, "link"),
        hard_links=hasattr(os, "link"),
        o_tmpfile="o_tmpfile" not in disabled and los.flag("TMPFILE") != 0,
        syncfs="syncfs" not in disabled and los.have_syncfs(),
        o_nofollow="o_nofollow" not in disabled and los.flag("NOFOLLOW") != 0,
        fullfsync="fullfsync" not in disabled and los.full_fsync_flag() is not None,
        dir_fsync="dir_fsync" not in disabled,
        disabled=disabled)


def probe(tmp_dir: str, disabled: frozenset[str]) -> LocalFeatures:
    """Try the filesystem-dependent features in ``tmp_dir`` (a real folder of the store) and
    leave nothing behind (a probe file a crash leaves is a temp file: gc removes it)."""
    f = static_features(disabled)
    name = os.path.join(tmp_dir, f"probe-{os.getpid()}-{secrets.token_hex(6)}")
    fd = os.open(name, los.write_flags(), 0o644)
    try:
        los.write_all(fd, b"p")
        fullfsync = f.fullfsync and _works(lambda: los.fsync_file(fd, True))
    finally:
        os.close(fd)
    try:  # tried even when link mode is off: see ``LocalFeatures.hard_links``
        hard_links = f.hard_links and _works(lambda: os.link(name, name + "-l"))
    finally:
        los.drop_temp(name + "-l")
        los.drop_temp(name)
    link = f.link and hard_links
    o_tmpfile = link and f.o_tmpfile and _tmpfile_works(tmp_dir)
    dir_fsync = f.dir_fsync and _works(lambda: los.fsync_dir(tmp_dir, False))
    return attrs.evolve(f, link=link, hard_links=hard_links, o_tmpfile=o_tmpfile,
                        fullfsync=fullfsync, dir_fsync=dir_fsync, probed=True)


def _works(fn: object) -> bool:
    try:
        fn()  # type: ignore[operator]
    except (OSError, NotImplementedError):
        return False
    return True


def _tmpfile_works(tmp_dir: str) -> bool:
    """An unnamed temp file can be made and given a name (tmpfs, ext4, xfs, btrfs: yes; some
    FUSE and network filesystems: EOPNOTSUPP/EISDIR)."""
    try:
        src, fd = los.open_tmpfile(tmp_dir)
    except OSError:
        return False
    dst = os.path.join(tmp_dir, f"probe-{os.getpid()}-{secrets.token_hex(6)}-t")
    try:
        los.write_all(fd, b"p")
        los.link(src, dst)
    except OSError as e:
        return e.errno == errno.EEXIST  # pragma: no cover - a random name taken
    finally:
        os.close(fd)
        los.drop_temp(dst)
    return True
