"""The values a caller puts in a state besides plain data: ``Blob`` and ``Ref``.

They only describe data; reading files or checking references happens in the layers below the
runtime, never here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import IO, Any

import attrs

from ckptfs.format.digest import Digest
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


@attrs.frozen
class Ref:
    """A reference to external data, not captured: checked on restore, fails closed.

    ``digest`` (``blake3:<hex>``) and ``size`` are verified when given; ``expires_at`` is when
    the reference is treated as gone: what ``checkpoint(expires_at=)`` takes (seconds since the
    epoch, an aware datetime, or a timedelta counted from when the Ref is made), kept as
    seconds (float); epoch milliseconds and other implausible values are refused.
    ``capture=True`` stores the bytes now (as a Blob) for data that will not outlive the run.
    """

    uri: str
    digest: Digest | None = attrs.field(default=None, converter=_to_digest)
    size: int | None = None
    expires_at: float | None = attrs.field(default=None, converter=epoch_seconds)
    labels: dict[str, str] = attrs.field(factory=dict)
    capture: bool = False
    storage_options: dict[str, Any] = attrs.field(factory=dict, eq=False, repr=False)
    #: set on restore with lenient_refs=True: why the reference could not be verified
    missing: str | None = attrs.field(default=None, eq=False)
