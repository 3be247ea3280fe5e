"""Vectors for the object-store commit path (spec 8.1 ``nonce``, 9.2 "Lost answers").

A run record MAY carry a ``nonce`` (16 random bytes, so that two writers never create
byte-identical records and a writer that lost the answer to its create can recognise its own
record). Readers ignore it entirely: a record with a nonce, a malformed one or none reads the
same. Writers of the reference profile draw nonces from ``reproducible_nonces`` so that the
generated stores are byte-identical on every generation; exact writer comparison ignores the
nonce (it is the writer's choice, like framing).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING

from ckptfs.format.digest import Digest
from ckptfs.format.models import NONCE_SIZE

if TYPE_CHECKING:
    from ckptfs_conformance.generate import Gen


def reproducible_nonces(seed: str = "ckptfs-conformance") -> Callable[[], bytes]:
    """Distinct record nonces that are the same on every run (real writers draw them at
    random; see ckptfs.store.repository.random_nonce)."""
    counter = itertools.count()
    return lambda: Digest.of(f"{seed}:{next(counter)}".encode()).raw[:NONCE_SIZE]


