"""The files format v2 keeps beside its containers (spec/v2.md): a run's head hint
(``runs/<run>/head``, advisory: never trusted alone) and a forward (``moved/<container path>``,
where maintenance moved the live bodies of a container it deleted). Pure, like
``ckptfs.format.containers``, which re-exports both."""

from __future__ import annotations

from collections.abc import Mapping

import attrs
import blake3

from ckptfs.errors import FormatError
from ckptfs.format import cbor
from ckptfs.format.containers import (
    HINT_CHECK,
    MAX_FORWARD_SIZE,
    MAX_STORED_SIZE,
    Location,
    container_ref,
)
from ckptfs.format.digest import DIGEST_SIZE, Digest


# -- head hint ------------------------------------------------------------------------------------
@attrs.frozen
class HeadHint:
    """``runs/<run>/head``: an advisory pointer near the run's head; never trusted alone."""

    run: str
    seq: int
    snapshot: Digest
    written: int

    def to_bytes(self) -> bytes:
        body = cbor.encode({"run": self.run, "seq": self.seq, "snapshot": self.snapshot.raw,
                            "written": self.written})
        return body + blake3.blake3(body).digest()[:HINT_CHECK]

    @classmethod
    def parse(cls, data: bytes, run: str) -> HeadHint | None:
        """The hint, or None when it is damaged, torn or names another run (not an error:
        readers then search from seq 0)."""
        if not HINT_CHECK < len(data) <= 4096:
            return None
        body, check = data[:-HINT_CHECK], data[-HINT_CHECK:]
        if blake3.blake3(body).digest()[:HINT_CHECK] != check:
            return None
        try:
            m = cbor.decode(body, what="head hint")
        except FormatError:
            return None
        if (not isinstance(m, dict) or m.get("run") != run or type(m.get("seq")) is not int
                or m["seq"] < 1 or type(m.get("snapshot")) is not bytes
                or len(m["snapshot"]) != DIGEST_SIZE or type(m.get("written")) is not int):
            return None
        return cls(run, m["seq"], Digest(m["snapshot"]), m["written"])


# -- forwards -------------------------------------------------------------------------------------
@attrs.frozen
class Forward:
    """``moved/<container path>``: where maintenance moved the live bodies of a container it
    deleted, so that locators naming the old container still lead to the bodies."""

    bodies: Mapping[Digest, Location]

    def to_bytes(self) -> bytes:
        return cbor.encode({"bodies": [[d.raw, loc.container.to_cbor(), loc.start, loc.stored]
                                       for d, loc in sorted(self.bodies.items())]})

    @classmethod
    def from_bytes(cls, data: bytes, *, what: str) -> Forward:
        if len(data) > MAX_FORWARD_SIZE:
            raise FormatError(f"{what}: too large ({len(data)} bytes)")
        m = cbor.decode(data, what=what)
        rows = m.get("bodies") if isinstance(m, dict) else None
        if not isinstance(rows, list):
            raise FormatError(f"{what}: must be a map with 'bodies'")
        out = {}
        for i, r in enumerate(rows):
            if not (isinstance(r, list) and len(r) == 4 and type(r[0]) is bytes
                    and len(r[0]) == DIGEST_SIZE and type(r[2]) is int and type(r[3]) is int
                    and r[2] >= 0 and 2 <= r[3] <= MAX_STORED_SIZE):
                raise FormatError(f"{what} row {i}: must be [digest, container, start, stored]")
            out[Digest(r[0])] = Location(container_ref(r[1], f"{what} row {i}"), r[2], r[3])
        return cls(out)
