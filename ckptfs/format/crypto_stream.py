"""Segmented sealing (spec/encryption.md 5.1, layout 2): a sealed object is a sequence of
AES-256-GCM segments, so a range of it opens from the segments that hold the range only.

A reader of one 4 KiB chunk body in a 16 MiB pack opens one or two 64 KiB segments, not the
pack. The construction is STREAM (Hoang, Reyhanitabar, Rogaway, Vizár 2015) as age and Tink's
streaming AEAD use it: a fresh per-object key (HKDF-SHA256 of the scope's content key with a
random 12-byte salt), a nonce per segment made of its index and a final-segment flag, so that
dropping, reordering or truncating segments fails to authenticate. Every primitive comes from
``cryptography``. Pure: no I/O.

Layout (``HEADER_SIZE`` = 32 bytes, the size of layout 1's header, so one-segment objects of
both layouts are 48 bytes longer than their plaintext)::

    "CKE" 0x02 | scope id (16) | salt (12) | segment 0 | segment 1 | ... | segment n-1
    segment i  = AES-256-GCM(object key, nonce_i, plaintext[i*S:(i+1)*S], AD)   (S = 65536)
    nonce_i    = i as 11-byte big-endian | 0x01 if i == n-1 else 0x00
    object key = HKDF-SHA256(content key, salt = salt, info = "ckptfs-enc-2 object", 32)
    AD         = canonical CBOR ["ckptfs-enc", 2, store id, scope id, kind, path]

An empty plaintext is one (final) empty segment. Every segment but the last holds exactly S
plaintext bytes.
"""

from __future__ import annotations

import secrets

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from ckptfs.format import cbor
from ckptfs.format.crypto import (
    CONTENT,
    MAGIC,
    SCOPE_ID_SIZE,
    TAG_SIZE,
    DecryptionError,
    derive,
    kind_of,
    open_sealed as open_layout1,
    sealed_scope,
)

#: first bytes of a segmented sealed object
MAGIC2 = b"CKE\x02"
SALT_SIZE = 12
HEADER_SIZE = len(MAGIC2) + SCOPE_ID_SIZE + SALT_SIZE
#: plaintext bytes per segment (the last may hold fewer)
SEGMENT = 1 << 16
#: stored bytes of a full segment
SEALED_SEGMENT = SEGMENT + TAG_SIZE
OBJECT_KEY = b"ckptfs-enc-2 object"
_LAST = b"\x01"
_MORE = b"\x00"

assert HEADER_SIZE == len(MAGIC) + SCOPE_ID_SIZE + 12  # both layouts share the header size


def associated_data(store_id: bytes, scope_id: bytes, kind: str, path: str) -> bytes:
    """What every segment of a layout-2 object is bound to: canonical CBOR of
    ``["ckptfs-enc", 2, store id, scope id, kind, path]``."""
    return cbor.encode(["ckptfs-enc", 2, store_id, scope_id, kind, path])


def object_key(scope_key: bytes, salt: bytes) -> bytes:
    """The per-object key: HKDF-SHA256(content key, salt, "ckptfs-enc-2 object")."""
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=salt,
                info=OBJECT_KEY).derive(derive(scope_key, CONTENT))


def nonce(index: int, last: bool) -> bytes:
    return index.to_bytes(11, "big") + (_LAST if last else _MORE)


def segments(plain_size: int) -> int:
    """How many segments a plaintext of ``plain_size`` bytes is sealed in (at least one)."""
    return max(1, -(-plain_size // SEGMENT))


def sealed_size(plain_size: int) -> int:
    return HEADER_SIZE + plain_size + TAG_SIZE * segments(plain_size)


def plain_size(stored_size: int) -> int:
    """The plaintext size of a layout-2 object of ``stored_size`` bytes (exact for layout-1
    objects of one segment too: both add 48 bytes)."""
    body = stored_size - HEADER_SIZE
    if body < TAG_SIZE:
        return 0
    return body - TAG_SIZE * (-(-body // SEALED_SEGMENT))


def seal(scope_key: bytes, *, store_id: bytes, scope_id: bytes, path: str,
         plaintext: bytes | memoryview, salt: bytes | None = None) -> bytes:
    """The layout-2 sealed object of ``plaintext``. ``salt`` is for test vectors only; writers
    leave it None (fresh random bytes: a fresh object key per object)."""
    salt = secrets.token_bytes(SALT_SIZE) if salt is None else salt
    if len(scope_id) != SCOPE_ID_SIZE or len(salt) != SALT_SIZE:
        raise ValueError("scope id is 16 bytes, salt 12")
    aead = AESGCM(object_key(scope_key, salt))
    ad = associated_data(store_id, scope_id, kind_of(path), path)
    src = memoryview(plaintext).cast("B")
    n = segments(len(src))
    out = bytearray(HEADER_SIZE + len(src) + TAG_SIZE * n)
    out[:HEADER_SIZE] = MAGIC2 + scope_id + salt
    view = memoryview(out)
    at = HEADER_SIZE
    for i in range(n):
        piece = src[i * SEGMENT:(i + 1) * SEGMENT]
        end = at + len(piece) + TAG_SIZE
        aead.encrypt_into(nonce(i, i == n - 1), piece, ad, view[at:end])
        at = end
    return bytes(out)


def _named(where: str | None) -> str:
    return "a sealed object" if where is None else f"object {where!r}"


def _refused(where: str | None) -> DecryptionError:
    return DecryptionError(
        f"{_named(where)} does not authenticate under its scope key: it was altered, "
        "truncated, moved from another path or store, or sealed under another key. Nothing "
        "of it is used; restore it from a copy, or check that this is the store's own keyring")


class Opener:
    """What opens the segments of one layout-2 object (its key and AD), made once from its
    header and kept while ranges of the object are read."""

    def __init__(self, scope_key: bytes, header: bytes, *, store_id: bytes, path: str,
                 where: str | None = None) -> None:
        if len(header) < HEADER_SIZE or header[:len(MAGIC2)] != MAGIC2:
            raise DecryptionError(f"{_named(where)} is not a sealed object of an encrypted "
                                  "store (planted, damaged or truncated); nothing of it is "
                                  "used. Run 'ckptfs verify' and restore it from a copy")
        self.scope_id = header[len(MAGIC2):len(MAGIC2) + SCOPE_ID_SIZE]
        salt = header[len(MAGIC2) + SCOPE_ID_SIZE:HEADER_SIZE]
        self._aead = AESGCM(object_key(scope_key, salt))
        self._ad = associated_data(store_id, self.scope_id, kind_of(path), path)
        self.where = where

    def open_all(self, data: bytes | memoryview) -> bytes:
        """The plaintext of the whole object ``data`` (header included): every segment but
        the last full and not final, the last final."""
        out = bytearray(plain_size(len(data)))
        self.open_all_into(data, memoryview(out))
        return bytes(out)

    def open_all_into(self, data: bytes | memoryview, out: memoryview) -> int:
        """``open_all`` into ``out`` (at least ``plain_size(len(data))`` bytes): the segments
        decrypt straight into it, with no copy. Returns the plaintext size. On a refusal the
        bytes written are zeroed before DecryptionError is raised (a segment that fails its
        tag may have left unauthenticated plaintext there)."""
        body = memoryview(data)[HEADER_SIZE:]
        n = max(1, -(-len(body) // SEALED_SEGMENT))
        if len(body) < TAG_SIZE or len(body) - (n - 1) * SEALED_SEGMENT < TAG_SIZE:
            raise _refused(self.where)
        size = len(body) - TAG_SIZE * n
        if len(out) < size:
            raise ValueError(f"a buffer of {len(out)} bytes for {size} bytes of plaintext")
        aead, ad = self._aead, self._ad
        try:
            for i in range(n):
                piece = body[i * SEALED_SEGMENT:(i + 1) * SEALED_SEGMENT]
                aead.decrypt_into(nonce(i, i == n - 1), piece, ad,
                                  out[i * SEGMENT:i * SEGMENT + len(piece) - TAG_SIZE])
        except InvalidTag:
            out[:size] = bytes(size)
            raise _refused(self.where) from None
        return size

    def open_range(self, first: int, data: bytes | memoryview, start: int, end: int) -> bytes:
        """Plaintext ``[start, end)`` from ``data``: the stored bytes of segments ``first``
        on (what ``span`` named; fewer when the object ends first). A segment is final when
        it is short or when it authenticates only as final; a range that reaches past the
        final segment ends there (as ``read_range`` of a plaintext object does); a segment
        that authenticates neither way, or a short one that is not final, is refused."""
        body = memoryview(data)
        out: list[bytes] = []
        i, at = first, 0
        while at < len(body):
            piece = body[at:at + SEALED_SEGMENT]
            if len(piece) < TAG_SIZE:
                raise _refused(self.where)
            plain, last = self._segment(i, piece, short=len(piece) < SEALED_SEGMENT)
            out.append(plain)
            if last:
                break
            i, at = i + 1, at + SEALED_SEGMENT
        if not out:
            if first > 0:
                return b""  # the range starts past the object's end
            raise _refused(self.where)  # no segment at all: truncated to its header
        joined = b"".join(out)
        base = first * SEGMENT
        return joined[max(0, start - base):max(0, end - base)]

    def open_into(self, first: int, data: bytes | memoryview, start: int,
                  buf: memoryview) -> int:
        """``open_range`` into ``buf`` (plaintext from ``start``, at most ``len(buf)`` bytes):
        whole segments decrypt straight into ``buf``, the partial ones at either end through a
        copy. Returns how many bytes (fewer when the object ends first). On a refusal the
        bytes written are zeroed before DecryptionError is raised."""
        body = memoryview(data)
        stop = start + len(buf)
        i, at, wrote = first, 0, 0
        try:
            while at < len(body):
                piece = body[at:at + SEALED_SEGMENT]
                if len(piece) < TAG_SIZE:
                    raise _refused(self.where)
                lo = i * SEGMENT
                hi = lo + len(piece) - TAG_SIZE
                short = len(piece) < SEALED_SEGMENT
                if start <= lo and hi <= stop:
                    last = self._segment_into(i, piece, buf[lo - start:hi - start], short=short)
                    wrote = hi - start
                else:
                    plain, last = self._segment(i, piece, short=short)
                    a, b = max(lo, start), min(hi, stop)
                    if b > a:
                        buf[a - start:b - start] = plain[a - lo:b - lo]
                        wrote = b - start
                if last or hi >= stop:
                    break
                i, at = i + 1, at + SEALED_SEGMENT
        except DecryptionError:
            buf[:] = bytes(len(buf))
            raise
        if at == 0 and len(body) == 0 and first == 0:
            raise _refused(self.where)
        return max(0, wrote)

    def _segment_into(self, i: int, piece: memoryview, out: memoryview, *, short: bool) -> bool:
        """Segment ``i`` decrypted into ``out``; whether it is the final one."""
        if not short:
            try:
                self._aead.decrypt_into(nonce(i, False), piece, self._ad, out)
                return False
            except InvalidTag:
                pass
        try:
            self._aead.decrypt_into(nonce(i, True), piece, self._ad, out)
            return True
        except InvalidTag:
            raise _refused(self.where) from None

    def _segment(self, i: int, piece: memoryview, *, short: bool) -> tuple[bytes, bool]:
        if not short:
            try:
                return self._aead.decrypt(nonce(i, False), piece, self._ad), False
            except InvalidTag:
                pass
        try:
            return self._aead.decrypt(nonce(i, True), piece, self._ad), True
        except InvalidTag:
            raise _refused(self.where) from None


def span(start: int, end: int) -> tuple[int, int, int]:
    """For plaintext ``[start, end)``: the first segment, and the stored byte range
    ``[a, b)`` of the segments that hold it."""
    first = start // SEGMENT
    last = max(first, (max(end, start + 1) - 1) // SEGMENT)
    return first, HEADER_SIZE + first * SEALED_SEGMENT, HEADER_SIZE + (last + 1) * SEALED_SEGMENT


def layout(data: bytes | memoryview, *, where: str | None = None) -> int:
    """1 or 2: the layout of the sealed object whose first bytes are ``data``;
    DecryptionError when it is no sealed object."""
    head = bytes(data[:len(MAGIC2)])
    if head == MAGIC2:
        return 2
    sealed_scope(bytes(data[:HEADER_SIZE]) + bytes(TAG_SIZE), where=where)  # raises if not 1
    return 1


def scope_of(data: bytes | memoryview, *, where: str | None = None) -> bytes:
    """The scope id in the header of a sealed object of either layout (unauthenticated until
    opened); DecryptionError when ``data`` is no sealed object."""
    layout(data, where=where)
    return bytes(data[len(MAGIC2):len(MAGIC2) + SCOPE_ID_SIZE])


def open_sealed(scope_key: bytes, data: bytes, *, store_id: bytes, path: str,
                where: str | None = None) -> bytes:
    """The plaintext of a sealed object of either layout, authenticated; DecryptionError
    otherwise (naming the object by ``where``, its stored path, only)."""
    if layout(data, where=where) == 1:
        return open_layout1(scope_key, data, store_id=store_id, path=path, where=where)
    return Opener(scope_key, data, store_id=store_id, path=path, where=where).open_all(data)


__all__ = ["MAGIC2", "SEGMENT", "HEADER_SIZE", "Opener", "seal", "open_sealed", "span",
           "scope_of", "layout", "sealed_size", "plain_size", "associated_data"]
