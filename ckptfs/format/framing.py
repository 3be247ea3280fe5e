"""Stored-object framing: one codec byte, then the payload.

Codec 0x00 is identity, 0x01 a single zstd frame. Identity of an object is always the digest of
its *uncompressed* bytes, and a reader never inflates past the size that names the object.
"""

from __future__ import annotations

import threading

import zstandard

from ckptfs.errors import CorruptObject

CODEC_RAW = 0x00
CODEC_ZSTD = 0x01
CODECS = {CODEC_RAW: "raw", CODEC_ZSTD: "zstd"}
ZSTD_LEVEL = 3
_MIN_GAIN = 0.95  # keep zstd only when it saves at least 5 %
_PROBE = 4096
_RAW = bytes([CODEC_RAW])

_local = threading.local()


def _compressor() -> zstandard.ZstdCompressor:
    """One compressor per thread: zstandard's compressor objects are not thread-safe (sharing
    one between threads crashes the interpreter)."""
    c: zstandard.ZstdCompressor | None = getattr(_local, "cctx", None)
    if c is None:
        c = _local.cctx = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_content_size=True)
    return c


def frame(data: bytes | memoryview, *, compress: bool = True) -> bytes:
    """Frame ``data`` for storage: zstd when it helps, raw otherwise. Deterministic."""
    codec, payload = frame_parts(data, compress=compress)
    return codec + payload  # one copy (bytes + a buffer is bytes), not two


_ZSTD = bytes([CODEC_ZSTD])


def frame_parts(data: bytes | memoryview, *, compress: bool = True
                ) -> tuple[bytes, bytes | memoryview]:
    """``frame`` as its two parts, the codec byte and the payload, not joined: a raw payload
    is ``data`` itself (no copy), for writers that write the parts with one ``writev``. The
    same choice as ``frame``, byte for byte."""
    if compress and len(data) >= 64 and not _incompressible(data):
        z = _compressor().compress(data)
        if len(z) < len(data) * _MIN_GAIN:
            return _ZSTD, z
    return _RAW, data


def _decompressor() -> zstandard.ZstdDecompressor:
    """One decompressor per thread, like the compressor."""
    d: zstandard.ZstdDecompressor | None = getattr(_local, "dctx", None)
    if d is None:
        d = _local.dctx = zstandard.ZstdDecompressor()
    return d


def _incompressible(data: bytes | memoryview) -> bool:
    """A cheap, deterministic guess for large pieces: if their first 4 KiB do not shrink by
    2 %, random or already-compressed bytes are likely and compressing them all is wasted."""
    if len(data) < _PROBE * 4:
        return False
    sample = bytes(data[:_PROBE])
    return len(_compressor().compress(sample)) >= _PROBE * 0.98


def unframe(stored: bytes | memoryview, size: int, *, what: str) -> bytes:
    """Return the payload of a framed object, which must be exactly ``size`` bytes."""
    if len(stored) < 1:
        raise CorruptObject(f"{what}: empty file (truncated); expected a codec byte")
    codec = stored[0]
    body = memoryview(stored)[1:]
    if codec == CODEC_RAW:
        out = bytes(body)
    elif codec == CODEC_ZSTD:
        out = _inflate(body, size, what)
    else:
        raise CorruptObject(f"{what}: unknown codec byte 0x{codec:02x} (known: 0x00 raw, 0x01 zstd)")
    if len(out) != size:
        raise CorruptObject(f"{what}: holds {len(out)} bytes, expected {size}")
    return out


def deflate(data: bytes | memoryview) -> bytes:
    """One zstd frame of ``data`` that declares its content size (the form a container's
    compressed header takes, spec/v2.md 3.1): no codec byte. Deterministic."""
    return _compressor().compress(data)


def deflate_with(data: bytes | memoryview, base: bytes) -> bytes:
    """One zstd frame of ``data`` compressed against ``base`` as a raw-content dictionary
    (RFC 8878 5: the dictionary is history the frame may copy from), declaring its content
    size, with a content checksum (a wrong dictionary is then found, not misread). The form a
    header by reference takes (spec/v2.md 3.1.2); deterministic."""
    d = zstandard.ZstdCompressionDict(base, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    c = zstandard.ZstdCompressor(level=ZSTD_LEVEL, dict_data=d, write_content_size=True,
                                 write_checksum=True, write_dict_id=False)
    return c.compress(data)


def inflate_declared(body: memoryview, limit: int, *, what: str,
                     base: bytes | None = None) -> bytes:
    """Inflate one zstd frame whose declared content size (required, 1 .. ``limit``) names
    its length: the bomb guard of ``unframe`` for bytes whose size nothing else states.
    ``base``: the raw-content dictionary the frame was compressed against (``deflate_with``)."""
    declared = _declared(body, what)
    if not 1 <= declared <= limit:
        raise CorruptObject(f"{what}: zstd frame declares {declared} bytes, outside 1 .. {limit}")
    out = _inflate(body, declared, what, base)
    if len(out) != declared:
        raise CorruptObject(f"{what}: inflates to {len(out)} bytes, its frame declares {declared}")
    return out


def _declared(body: memoryview, what: str) -> int:
    """The content size a zstd frame's header declares (the format requires one)."""
    try:
        declared: int = zstandard.frame_content_size(body)
    except zstandard.ZstdError as e:
        raise CorruptObject(f"{what}: zstd frame header is damaged ({e})") from e
    if declared < 0:
        raise CorruptObject(f"{what}: zstd frame does not declare its content size (the format "
                            "requires it); the object was not written by a conforming writer")
    return declared


def _inflate(body: memoryview, size: int, what: str, base: bytes | None = None) -> bytes:
    """Inflate a zstd frame, never producing more than ``size + 1`` bytes (bomb guard)."""
    declared = _declared(body, what)
    if declared != size:
        raise CorruptObject(f"{what}: zstd frame declares {declared} bytes, expected {size}")
    length = _frame_length(body, what)
    if length > len(body):
        raise CorruptObject(f"{what}: zstd frame is cut short")
    if length != len(body):
        raise CorruptObject(f"{what}: {len(body) - length} bytes after the zstd frame (the "
                            "payload is exactly one frame, spec/format.md 4)")
    try:
        # the frame declares exactly ``size`` bytes (checked above), so this allocates no more
        dec = _decompressor() if base is None else zstandard.ZstdDecompressor(
            dict_data=zstandard.ZstdCompressionDict(
                base, dict_type=zstandard.DICT_TYPE_RAWCONTENT))
        out: bytes = dec.decompress(body, max_output_size=size)
    except zstandard.ZstdError as e:
        raise CorruptObject(f"{what}: zstd data is damaged ({e})") from e
    return out


def _frame_length(body: memoryview, what: str) -> int:
    """The length of the zstd frame at the start of ``body`` (RFC 8878 3.1.1: its header, its
    blocks up to the last one, and the optional 4-byte checksum), from the block headers alone:
    no inflating. Bytes after it are not part of the object."""
    try:
        pos = zstandard.frame_header_size(body)
    except zstandard.ZstdError as e:
        raise CorruptObject(f"{what}: zstd frame header is damaged ({e})") from e
    checksum = 4 if len(body) > 4 and body[4] & 0x04 else 0  # Content_Checksum_flag
    while True:
        if pos + 3 > len(body):
            raise CorruptObject(f"{what}: zstd frame is cut short")
        header = int.from_bytes(body[pos:pos + 3], "little")
        kind, n = (header >> 1) & 3, header >> 3
        if kind == 3:
            raise CorruptObject(f"{what}: zstd frame has a reserved block type")
        pos += 3 + (1 if kind == 1 else n)  # an RLE block holds one byte
        if header & 1:  # Last_Block
            return pos + checksum
