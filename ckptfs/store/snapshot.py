"""A committed snapshot as readers see it: its id and the manifest it names."""

from __future__ import annotations

import attrs

from ckptfs.format.digest import Digest
from ckptfs.format.models import Manifest, Schema


@attrs.frozen
class Snapshot:
    """A committed snapshot: its id and the manifest it names."""

    digest: Digest
    manifest: Manifest = attrs.field(repr=False)

    @property
    def id(self) -> str:
        return self.digest.text

    @property
    def run(self) -> str:
        return self.manifest.run

    @property
    def seq(self) -> int:
        return self.manifest.seq

    @property
    def parent(self) -> str | None:
        return self.manifest.parent.text if self.manifest.parent else None

    @property
    def resumed_from(self) -> str | None:
        return self.manifest.resumed_from.text if self.manifest.resumed_from else None

    @property
    def attempt(self) -> int:
        return self.manifest.attempt

    @property
    def boundary(self) -> str:
        return self.manifest.boundary

    @property
    def created(self) -> int:
        return self.manifest.created

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.manifest.labels)

    @property
    def expires(self) -> int | None:
        return self.manifest.expires

    @property
    def migrated_from(self) -> Schema | None:
        """The state schema this snapshot's run was migrated from, if its first commit after a
        migration (optional manifest field ``migrated_from``; a malformed one is ignored)."""
        m = self.manifest.extra.get("migrated_from")
        if (isinstance(m, dict) and type(m.get("name")) is str
                and type(m.get("version")) is int and m["version"] >= 0):
            return Schema(m["name"], m["version"])
        return None
