"""The storage contract shared by every backend.

Paths are relative, '/'-separated, made only by ``ckptfs.format.names``; a backend still refuses
any path that is absolute, empty, or has '.', '..' or empty segments (defence in depth).
Missing objects raise ``FileNotFoundError``; a create-only write that finds the object present
raises ``FileExistsError``; every other failure raises ``ckptfs.errors.StorageError``.
"""

from __future__ import annotations

import builtins

import abc
from collections.abc import Callable, Iterable, Sequence

import attrs

from ckptfs.errors import InvalidName


@attrs.frozen
class Capabilities:
    """What a backend can promise, discovered (probed) when it is opened."""

    #: create-only writes are atomic and exclusive across processes and hosts.
    create_only: bool
    #: how create-only is achieved, for humans: "link(2)", "If-None-Match", "filelock", ...
    create_only_how: str
    #: data is on stable storage when a write returns.
    durable: bool
    writable: bool = True
    deletable: bool = True
    listable: bool = True
    #: who the create-only promise covers, for humans ("" when the backend does not say): local
    #: disk's link(2) mode holds across hosts, its filelock mode as far as the OS's locks reach
    create_only_scope: str = ""


@attrs.frozen
class RangeReader:
    """Byte ranges of one object (``Storage.open_ranges``): ``read_into(start, buf)`` reads
    from ``start`` into ``buf`` (at most ``len(buf)`` bytes) and returns how many (fewer when
    the object ends first); ``read(start, n)`` returns the (at most ``n``) bytes from
    ``start`` as a new bytes object; both are safe to call from several threads at once.
    ``close()`` releases it (a local file descriptor). ``per_call`` says a read costs a system
    call, not a request: a reader may then read many small ranges (a body each) instead of
    coalescing them."""

    read_into: Callable[[int, memoryview], int]
    read: Callable[[int, int], bytes]
    close: Callable[[], None]
    per_call: bool


@attrs.frozen
class ObjectStat:
    """What a listing tells about one object: its stored size and modification time."""

    size: int
    #: seconds since the epoch, or None when the backend does not say
    mtime: float | None
    #: the object store's entity tag from the same listing (S3: the MD5 of a single-part
    #: object's bytes), or None (local disk); maintenance uses it to tell an object it read
    #: from one rewritten since
    etag: str | None = None


@attrs.frozen
class Listing:
    """The immediate children of a folder, told apart: ``files`` (objects) and ``folders``
    (names that hold objects below them), each sorted. On an object store one name can be
    both (a key ``a`` and keys ``a/...``). Readers take a name where the format puts a folder
    (a run under ``runs/``) only from ``folders`` and one where it puts an object only from
    ``files``: the other kind there is a name that is not the store's, ignored (format.md 3.1)."""

    files: tuple[str, ...]
    folders: tuple[str, ...]

    @property
    def names(self) -> list[str]:
        """Every child, sorted (what ``Storage.list`` returns)."""
        return sorted({*self.files, *self.folders})


def check_path(path: str) -> str:
    """Refuse any path that could leave the store root."""
    if (not path or path.startswith("/") or "\\" in path or "\x00" in path
            or any(seg in ("", ".", "..") for seg in path.split("/"))):
        raise InvalidName(f"refusing store path {path!r:.200}: paths are relative, no '.' or '..'")
    return path


@attrs.frozen
class Staged:
    """An object whose bytes were handed to the backend (``Storage.stage_parts``): ``finish``
    makes it durable and visible, ``discard`` drops it (exactly one of them, once)."""

    finish: Callable[[], None]
    discard: Callable[[], None]


class Storage(abc.ABC):
    """Primitive operations on one store root."""

    url: str
    capabilities: Capabilities
    #: ``list_after`` answers from a key in one request per 1,000 names (S3)
    lists_after: bool = False
    #: a folder is a thing of its own (local disk) rather than the keys below a name (object
    #: stores): there a folder named like a record occupies the record's name (format.md 9.2)
    folders_are_real: bool = False
    #: how many staged objects (``stage_parts``) to finish at once, and to hold staged: local
    #: disk fsyncs one pack at a time while the writer stages the next ones in temp files;
    #: object stores upload several at once (each staged pack is held in memory until then)
    staged_workers: int = 4
    staged_max: int = 4

    @abc.abstractmethod
    def read(self, path: str) -> bytes:
        """The whole object at ``path``."""

    @abc.abstractmethod
    def write(self, path: str, data: bytes) -> None:
        """Store an immutable, content-named object. Writing the same bytes again is a no-op;
        a reader never sees a partial object."""

    def write_many(self, items: Iterable[tuple[str, bytes]]) -> None:
        """Write several objects; durable and visible when this returns. Backends overlap them."""
        for path, data in items:
            self.write(path, data)

    def read_many(self, paths: list[str]) -> list[bytes | None]:
        """Read several objects (None for a missing one). Backends overlap the requests."""
        out: list[bytes | None] = []
        for p in paths:
            try:
                out.append(self.read(p))
            except FileNotFoundError:
                out.append(None)
        return out

    @abc.abstractmethod
    def create(self, path: str, data: bytes) -> None:
        """Create ``path`` only if absent, atomically; raise FileExistsError if present.
        ``data`` must not be empty (ValueError): s3fs does not make an empty create exclusive.

        Object stores resolve a lost answer by reading the object back: if it already holds
        exactly ``data`` (an earlier attempt of this create landed), create returns normally;
        an unreadable object after a failed create is ``OutcomeUnknown``. Callers that race
        must make their bytes unique (run records carry a random nonce)."""

    def commit(self, objects: list[tuple[str, bytes]], path: str, data: bytes) -> None:
        """Write immutable ``objects`` durably, then create-only ``path`` (the commit point).

        If ``path`` exists, raise FileExistsError; the objects may then remain as garbage.
        Backends may overlap the work as long as ``path`` appears only after every object is
        durable."""
        self.write_many(objects)
        self.create(path, data)

    def read_range(self, path: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the object at ``path`` (fewer when it ends before ``end``);
        FileNotFoundError when absent. Format v2 reads chunk bodies out of containers this way:
        one ranged GET on an object store, one ``pread`` on local disk."""
        return self.read(path)[start:end]

    # -- blob streaming (w2b): parts written without a join, ranges read into a buffer ------
    def write_parts(self, path: str, parts: Sequence[bytes | memoryview]) -> None:
        """``write`` of the object whose bytes are ``parts`` in order: the same rules (immutable,
        content-named, never seen partial). Local disk writes the parts with ``writev`` (a
        pack's bodies are never joined); other backends join them here."""
        self.write(path, b"".join(parts))

    def stage_parts(self, path: str, parts: Sequence[bytes | memoryview]) -> Staged:
        """Start ``write_parts``: take the bytes now (``parts`` may be reused once this
        returns), make the object durable and visible at ``path`` when ``finish`` is called (or
        drop it with ``discard``). Local disk writes a temp file now and fsyncs and links it in
        ``finish``, so that a writer can hand the next bytes to the OS while this fsync runs;
        other backends hold the joined bytes until ``finish`` writes them."""
        data = b"".join(parts)
        return Staged(finish=lambda: self.write(path, data), discard=lambda: None)

    def read_range_into(self, path: str, start: int, buf: memoryview) -> int:
        """Bytes of ``path`` from ``start`` into ``buf`` (at most ``len(buf)``); returns how many
        (fewer when the object ends first); FileNotFoundError when absent. Local disk reads
        straight into ``buf`` (no bytes object per range)."""
        data = self.read_range(path, start, start + len(buf))
        buf[:len(data)] = data
        return len(data)

    def open_ranges(self, path: str) -> RangeReader:
        """A reader of byte ranges of the one object at ``path``, for reading many ranges of it
        (a blob's bodies in one pack) from any thread: local disk opens the file once (with the
        checks of ``read``) and reads each range with ``preadv`` into the caller's buffer;
        other backends read each range with ``read_range_into``. FileNotFoundError when the
        object is absent: here (local disk) or at the first read. ``close`` when done."""
        return RangeReader(read_into=lambda start, buf: self.read_range_into(path, start, buf),
                           read=lambda start, n: self.read_range(path, start, start + n),
                           close=lambda: None, per_call=False)

    def open_stream(self, path: str, expect: int) -> RangeReader:
        """``open_ranges`` for a reader that will read about ``expect`` bytes of ``path`` (a
        blob stream: the bytes of its chunks' bodies there). A backend may read the object
        whole when that is cheaper (an encrypted store: every segment opened once, not each
        one per range that touches it); here, ``open_ranges``."""
        return self.open_ranges(path)

    def read_ranges(self, items: list[tuple[str, int, int]]) -> list[bytes | None]:
        """Several ranges (None for a missing object). Backends overlap the requests."""
        out: list[bytes | None] = []
        for path, start, end in items:
            try:
                out.append(self.read_range(path, start, end))
            except FileNotFoundError:
                out.append(None)
        return out

    def list_after(self, prefix: str, after: str) -> list[str] | None:
        """Every object below folder ``prefix`` (any depth, relative names) whose relative name
        sorts after ``after``, ascending, in as few requests as the backend can (S3: one
        ListObjectsV2 with StartAfter per 1,000 keys). None when the backend cannot list from a
        key; callers then probe names instead (format v2 finds a run's head this way)."""
        return None

    def hard_linked(self) -> dict[str, int]:
        """The objects whose file has other names than the store's (hard links: local disk),
        by path: how many of those names are not the store's own temp files. Deleting such an
        object's name leaves its bytes under the others. Object stores have none."""
        return {}

    def hint(self, path: str, data: bytes) -> None:
        """Overwrite a small advisory object (a head hint) as cheaply as possible: no durability
        and no atomicity promised. Readers check the bytes (a torn hint is ignored)."""
        self.replace(path, data)

    @abc.abstractmethod
    def replace(self, path: str, data: bytes) -> None:
        """Write or overwrite a small mutable object atomically (leases, hints; never commits)."""

    @abc.abstractmethod
    def list(self, prefix: str) -> list[str]:
        """Names of the immediate children of folder ``prefix`` (empty if it does not exist)."""

    def listing(self, prefix: str) -> Listing:
        """The children of folder ``prefix`` (as ``list``), files told from folders. Backends
        answer from the one listing ``list`` makes (local disk: the directory entry's type;
        object stores: a delimited listing's common prefixes are the folders); this default
        asks ``size`` per name: None is a folder (or an object deleted since the listing,
        which then lists as an empty folder: nothing of the store)."""
        files: builtins.list[str] = []
        folders: builtins.list[str] = []
        for name in self.list(prefix):
            (files if self.size(f"{prefix}/{name}" if prefix else name) is not None
             else folders).append(name)
        return Listing(tuple(files), tuple(folders))

    def scan(self, prefix: str) -> dict[str, ObjectStat]:
        """Every object below folder ``prefix``, at any depth, by store path, with its size and
        modification time (empty if the folder does not exist). Backends answer in as few
        requests as they can (object stores: one paginated listing of 1000 keys a page; local:
        os.scandir); this default walks ``list`` and asks ``size`` and ``mtime`` per object."""
        out: dict[str, ObjectStat] = {}
        for name in self.list(prefix):
            path = f"{prefix}/{name}" if prefix else name
            size = self.size(path)
            if size is None:  # a folder (or an object deleted since the listing)
                out.update(self.scan(path))
            else:
                out[path] = ObjectStat(size, self.mtime(path))
        return out

    @abc.abstractmethod
    def delete(self, path: str) -> None:
        """Remove an object; absent is fine."""

    def delete_many(self, paths: Iterable[str]) -> None:
        """Remove several objects (absent is fine), in as few requests as the backend can (S3:
        DeleteObjects, 1,000 keys a request)."""
        for p in paths:
            self.delete(p)

    def delete_many_if(self, items: Iterable[tuple[str, str | None]]) -> builtins.list[str]:
        """Remove each path only while it still has the ETag it was judged by (absent is fine;
        None: no condition); the paths kept because they changed since. Backends that offer
        conditional deletes use them (S3: the ``ETag`` element of DeleteObjects, ``If-Match``
        on DeleteObject); this default deletes unconditionally and keeps none (local disk has
        no ETags: what protects the data there is the format, spec/v2.md 9.2)."""
        self.delete_many(p for p, _ in items)
        return []

    @abc.abstractmethod
    def size(self, path: str) -> int | None:
        """Stored size in bytes of ``path``, or None when it does not exist."""

    def exists(self, path: str) -> bool:
        return self.size(path) is not None

    def mtime(self, path: str) -> float | None:
        """Modification time (seconds since the epoch) of ``path``, or None."""
        return None

    def missing_container(self) -> str | None:
        """Why the place the store would live does not exist (an object store's bucket), or
        None when it does or this backend cannot tell. Asked only after the store's config
        was not found, so that "no store here" is not said of a bucket that is not there."""
        return None

    def close(self) -> None:
        """Release resources; the default has none."""
