"""A fault-injecting Storage wrapper for crash-point enumeration (tests only).

Every primitive call is one numbered operation (each object of a batch counts alone). At
operation ``fail_at`` the wrapper simulates the death of the process, in one of three ways:
``before`` (the operation never happens), ``after`` (it happens but the caller never learns
it) and ``tear`` (local disk: a prefix of the bytes lands in a temp file of the store, as a
writer killed mid-write leaves it, then the process dies).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import TypeVar

from ckptfs.format.names import TMP
from ckptfs.storage.base import Listing, ObjectStat, Storage
from ckptfs.storage.local import LocalStorage

T = TypeVar("T")
MODES = ("before", "after", "tear")


class Crash(BaseException):
    """The simulated death of the process (a BaseException: no ``except Exception`` eats it)."""


class FaultyStorage(Storage):
    """Wraps a real backend; dies at operation number ``fail_at`` (None: never, only counts)."""

    def __init__(self, inner: Storage, fail_at: int | None = None, mode: str = "before",
                 before: Callable[[int, str, str], None] | None = None) -> None:
        assert mode in MODES
        self.inner = inner
        self.url = inner.url
        self.fail_at = fail_at
        self.mode = mode
        self.ops = 0
        self.crashed_in: str | None = None
        #: (operation name, carries data) of every operation so far, for planning crashes
        self.log: list[tuple[str, bool]] = []
        #: ``before(k, operation, path)`` runs before operation ``k`` (to interleave other work)
        self.before = before

    @property  # type: ignore[override]
    def capabilities(self):  # type: ignore[no-untyped-def]
        return self.inner.capabilities

    def _op(self, name: str, path: str, do: Callable[[], T], data: bytes | None = None) -> T:
        k = self.ops
        self.ops += 1
        if self.before is not None:
            self.before(k, name, path)
        self.log.append((name, data is not None))
        if k != self.fail_at:
            return do()
        self.crashed_in = f"{name} {path} ({self.mode})"
        if self.mode == "after":
            try:
                do()
            except Exception:  # the op ran; whatever it said, the process is gone
                pass
        elif self.mode == "tear" and data and isinstance(self.inner, LocalStorage):
            os.makedirs(os.path.join(self.inner.root, TMP), exist_ok=True)
            with open(os.path.join(self.inner.root, TMP, f"torn-{k}"), "wb") as f:
                f.write(data[: max(1, len(data) // 2)])
        raise Crash(self.crashed_in)

    def read(self, path: str) -> bytes:
        return self._op("read", path, lambda: self.inner.read(path))

    def read_many(self, paths: list[str]) -> list[bytes | None]:
        return [self._op("read", p, lambda p=p: self.inner.read_many([p])[0])  # type: ignore[misc]
                for p in paths]

    def write(self, path: str, data: bytes) -> None:
        self._op("write", path, lambda: self.inner.write(path, data), data)

    def write_many(self, items: Iterable[tuple[str, bytes]]) -> None:
        for path, data in items:
            self._op("write", path, lambda p=path, d=data: self.inner.write_many([(p, d)]), data)  # type: ignore[misc]

    def create(self, path: str, data: bytes) -> None:
        self._op("create", path, lambda: self.inner.create(path, data), data)

    def replace(self, path: str, data: bytes) -> None:
        self._op("replace", path, lambda: self.inner.replace(path, data), data)

    def list(self, prefix: str) -> list[str]:
        return self._op("list", prefix, lambda: self.inner.list(prefix))

    def listing(self, prefix: str) -> Listing:
        return self._op("list", prefix, lambda: self.inner.listing(prefix))

    def scan(self, prefix: str) -> dict[str, ObjectStat]:
        return self._op("scan", prefix, lambda: self.inner.scan(prefix))

    def delete(self, path: str) -> None:
        self._op("delete", path, lambda: self.inner.delete(path))

    def size(self, path: str) -> int | None:
        return self._op("size", path, lambda: self.inner.size(path))

    def mtime(self, path: str) -> float | None:
        return self._op("mtime", path, lambda: self.inner.mtime(path))

    # -- format v2 primitives (spec/v2.md): each request is one numbered operation ------------
    @property
    def lists_after(self) -> bool:  # type: ignore[override]
        return self.inner.lists_after

    def read_range(self, path: str, start: int, end: int) -> bytes:
        return self._op("read", path, lambda: self.inner.read_range(path, start, end))

    def read_ranges(self, items: list[tuple[str, int, int]]) -> list[bytes | None]:
        return [self._op("read", p, lambda p=p, a=a, b=b: self.inner.read_ranges([(p, a, b)])[0])  # type: ignore[misc]
                for p, a, b in items]

    def list_after(self, prefix: str, after: str) -> list[str] | None:
        return self._op("list", prefix, lambda: self.inner.list_after(prefix, after))

    def hint(self, path: str, data: bytes) -> None:
        self._op("hint", path, lambda: self.inner.hint(path, data), data)

    def delete_many(self, paths: Iterable[str]) -> None:
        for p in paths:
            self._op("delete", p, lambda p=p: self.inner.delete_many([p]))  # type: ignore[misc]
