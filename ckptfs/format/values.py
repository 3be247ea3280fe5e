"""The values a caller puts in a state besides plain data: ``Blob`` and ``Ref``.

They only describe data; reading files or checking references happens in the layers below the
runtime, never here.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterator
from typing import IO, Any

import attrs

from ckptfs.errors import ReferenceChanged
from ckptfs.format.digest import Digest, hasher
from ckptfs.format.when import epoch_seconds


def _to_digest(v: Digest | str | None) -> Digest | None:
    if v is None or isinstance(v, Digest):
        return v
    return Digest.parse(v)


@attrs.frozen(eq=False)
class Blob:
    """Raw bytes or a file of any size, stored as-is (streamed, never loaded whole).

    ``Blob(b"...")``, ``Blob("/path/to/file")``, ``Blob(pathlib.Path(...))`` or ``Blob(fileobj)``
    (a binary file object, read from its current position to its end).
    """

    source: bytes | str | os.PathLike[str] | IO[bytes]
    type: str = "application/octet-stream"
    labels: dict[str, str] = attrs.field(factory=dict)

    def __attrs_post_init__(self) -> None:
        s = self.source
        if isinstance(s, (bytearray, memoryview)):
            object.__setattr__(self, "source", bytes(s))
        elif not isinstance(s, (bytes, str, os.PathLike)) and not hasattr(s, "read"):
            raise TypeError(f"Blob takes bytes, a path or a binary file object, not {type(s).__name__}")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (Blob, StoredBlob)):
            return self.read() == other.read()
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def read(self) -> bytes:
        """All the bytes (for small blobs and tests)."""
        s = self.source
        if isinstance(s, bytes):
            return s
        if isinstance(s, (str, os.PathLike)):
            with open(s, "rb") as f:
                return f.read()
        raise TypeError("a Blob over a file object can only be read once, by a checkpoint")


@attrs.frozen(eq=False)
class StoredBlob:
    """A blob entry of a restored snapshot: read lazily from the store, verified as it streams."""

    size: int
    digest: Digest
    type: str
    labels: dict[str, str]
    _opener: Callable[[], Iterator[bytes]] = attrs.field(repr=False)
    #: the entry's chunk list, so a restored blob can be checkpointed again without copying
    chunks: tuple[Any, ...] = attrs.field(default=(), repr=False)

    def iter_bytes(self) -> Iterator[bytes]:
        """The content in pieces of whole chunks (one chunk each from a format v2 store, up to
        a 16 MiB read window each from version 1 loose chunk files), every
        chunk verified against its digest before its piece is handed out; the whole-content
        digest is checked before the iteration ends normally."""
        return self._opener()

    def read(self) -> bytes:
        return b"".join(self._opener())

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the content to ``path`` without holding it all in memory."""
        with open(path, "wb") as f:
            for piece in self._opener():
                f.write(piece)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (Blob, StoredBlob)):
            if isinstance(other, StoredBlob):
                return self.digest == other.digest and self.size == other.size
            return self.read() == other.read()
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]


def _absolute(uri: object) -> str:
    """A local path relative to the working directory made absolute, now: the store outlives
    the directory the Ref was made in, and a relative path would be resolved against whatever
    directory a later restore runs in. Joined, not normalised (``..`` stays visible to the
    reference checks, which refuse it). URLs and absolute paths are kept as they are."""
    if not isinstance(uri, str):
        raise TypeError(f"Ref takes a URI or path as str, not {type(uri).__name__}")
    scheme, sep, _ = uri.partition("://")
    if sep and len(scheme) > 1:
        return uri
    path = uri[5:] if uri.startswith("file:") else uri
    if not path or path.startswith("/"):
        return uri
    return os.path.join(os.getcwd(), path)


@attrs.frozen
class Ref:
    """A reference to external data, not captured: checked on restore, fails closed.

    ``digest`` (``blake3:<hex>``) and ``size`` are verified when given (``Ref.of(path)``
    computes both); ``expires_at`` is when
    the reference is treated as gone: what ``checkpoint(expires_at=)`` takes (seconds since the
    epoch, an aware datetime, or a timedelta counted from when the Ref is made), kept as
    seconds (float); epoch milliseconds and other implausible values are refused.
    ``capture=True`` stores the bytes now (as a Blob) for data that will not outlive the run.
    A relative local path is made absolute when the Ref is made (``_absolute``).
    ``open()``/``read()`` give the data, verified against ``digest`` and ``size``.
    """

    uri: str = attrs.field(converter=_absolute)
    digest: Digest | None = attrs.field(default=None, converter=_to_digest)
    size: int | None = None
    expires_at: float | None = attrs.field(default=None, converter=epoch_seconds)
    labels: dict[str, str] = attrs.field(factory=dict)
    capture: bool = False
    storage_options: dict[str, Any] = attrs.field(factory=dict, eq=False, repr=False)
    #: set on restore with lenient_refs=True: why the reference could not be verified
    missing: str | None = attrs.field(default=None, eq=False)
    #: how a restored Ref opens its target (the restore's reference policy applies); None
    #: for a Ref the caller made: its URI is the caller's own choice
    opener: Callable[[], IO[bytes]] | None = attrs.field(default=None, eq=False, repr=False)

    @classmethod
    def of(cls, path_or_uri: str | os.PathLike[str], *,
           storage_options: dict[str, Any] | None = None, **kwargs: Any) -> Ref:
        """A Ref whose ``digest`` and ``size`` are those of the data now (read once,
        streamed): a restore then verifies that the data did not change, not only that it
        exists. ``path_or_uri``: a local path (made absolute) or any fsspec URL
        (``storage_options`` for its filesystem); ``kwargs``: ``expires_at``, ``labels``."""
        ref = cls(os.fspath(path_or_uri), storage_options=dict(storage_options or {}),
                  **kwargs)
        h = hasher()
        size = 0
        with ref._open_target() as f:
            while piece := f.read(1 << 20):
                h.update(piece)
                size += len(piece)
        return attrs.evolve(ref, digest=Digest(h.digest()), size=size)

    def _open_target(self) -> IO[bytes]:
        if self.opener is not None:
            return self.opener()
        scheme, sep, _ = self.uri.partition("://")
        if not (sep and len(scheme) > 1):
            return open(self.uri[5:] if self.uri.startswith("file:") else self.uri, "rb")
        import fsspec  # a network reference: only when asked for

        f: IO[bytes] = fsspec.open(self.uri, "rb", **self.storage_options).open()
        return f

    def open(self) -> IO[bytes]:
        """The referenced data as a binary file object, read as a stream and verified: reading
        it to its end raises ReferenceChanged when its size or digest is not the recorded one
        (a Ref without a digest is not verified). A restored Ref opens only what the
        restore's reference policy allows (``ref_policy=``), as its checks do."""
        f = self._open_target()
        if self.digest is None and self.size is None:
            return f
        return io.BufferedReader(VerifiedReader(f, self.uri, self.digest, self.size))

    def read(self) -> bytes:
        """All the referenced bytes, verified (``open``)."""
        with self.open() as f:
            return f.read()


class VerifiedReader(io.RawIOBase):
    """Reads a reference's data and checks its size and digest as the bytes pass: no byte
    past the declared size is handed out, and the end of the data raises ReferenceChanged
    when it is not what was recorded."""

    def __init__(self, f: IO[bytes], uri: str, digest: Digest | None,
                 size: int | None) -> None:
        super().__init__()
        self._f, self._uri, self._digest, self._size = f, uri, digest, size
        self._h = hasher()
        self._got = 0
        self._done = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._done:
            return 0
        want = len(buffer)
        if self._size is not None:
            want = min(want, self._size - self._got + 1)  # one more: a longer target shows
        piece = self._f.read(want) if want else b""
        if not piece:
            self._finish()
            return 0
        self._got += len(piece)
        if self._size is not None and self._got > self._size:
            self._fail(f"is longer than the recorded {self._size} bytes")
        self._h.update(piece)
        buffer[:len(piece)] = piece
        return len(piece)

    def _finish(self) -> None:
        self._done = True
        if self._size is not None and self._got != self._size:
            self._fail(f"is {self._got} bytes, expected {self._size}")
        if self._digest is not None and Digest(self._h.digest()) != self._digest:
            self._fail(f"has changed (digest differs from {self._digest})")

    def _fail(self, why: str) -> None:
        self._done = True
        shown = self._uri if len(self._uri) <= 200 else self._uri[:200] + "..."
        raise ReferenceChanged(shown, why)

    def close(self) -> None:
        try:
            self._f.close()
        finally:
            super().close()
