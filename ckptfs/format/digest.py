"""Content digests: BLAKE3-256 of uncompressed canonical bytes, and their text form."""

from __future__ import annotations

import re
from typing import Any

import attrs
import blake3

from ckptfs.errors import FormatError, InvalidName

ALGORITHM = "blake3"
DIGEST_SIZE = 32
_TEXT = re.compile(r"^blake3:([0-9a-f]{64})\Z")


@attrs.frozen(slots=True, order=True)
class Digest:
    """A BLAKE3-256 digest. ``text`` is ``blake3:<64 lowercase hex>``; ``raw`` the 32 bytes."""

    raw: bytes = attrs.field()

    @raw.validator
    def _check(self, _attr: Any, value: bytes) -> None:
        if type(value) is not bytes or len(value) != DIGEST_SIZE:
            raise FormatError(f"a digest is {DIGEST_SIZE} bytes, got {value!r:.80}")

    @property
    def hex(self) -> str:
        return self.raw.hex()

    @property
    def text(self) -> str:
        return f"{ALGORITHM}:{self.raw.hex()}"

    @property
    def short(self) -> str:
        """The first 12 hex digits, for humans."""
        return self.raw.hex()[:12]

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"Digest({self.text!r})"

    @classmethod
    def parse(cls, text: str) -> Digest:
        """Parse ``blake3:<hex>``; a bare 64-hex string is accepted too. Text that is neither is
        a name the caller got wrong: ``InvalidName`` (category ``path``, spec/format.md 3.3)."""
        m = _TEXT.match(text) or re.match(r"^([0-9a-f]{64})\Z", text)
        if not m:
            raise InvalidName(
                f"not a digest: {text!r:.100}; expected 'blake3:' followed by 64 lowercase hex digits"
            )
        return cls(bytes.fromhex(m.group(1)))

    @classmethod
    def of(cls, data: bytes | bytearray | memoryview) -> Digest:
        return cls(blake3.blake3(data).digest())


def hasher() -> Any:
    """A fresh incremental BLAKE3 hasher (``update``/``digest``/``copy``)."""
    return blake3.blake3()
