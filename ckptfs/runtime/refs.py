"""Checking external references on restore, and capturing them at checkpoint time.

A reference's URI comes from the store, and a store may come from anyone. Checking one means
a request or a file open of the store author's choosing, so a reader dereferences nothing its
caller did not allow (spec/format.md 6.2): ``RefPolicy`` names the schemes, hosts and local
folders that may be checked, and is empty by default. Whatever a policy says, ``::`` chains
and fsspec's caching and archive wrappers are never followed (they write cache files and open
other URLs), local targets are opened without following symbolic links, non-blocking, regular
files only, and no target is read further than its declared size.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import time
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import IO, Any

import attrs

from ckptfs.errors import InvalidName, MissingReference
from ckptfs.format.digest import Digest, hasher
from ckptfs.format.models import Reference
from ckptfs.format.values import Blob, Ref

#: fsspec protocols that wrap another URL, cache it on local disk or open archives: never
#: followed from a stored URI, and not accepted in a policy either
WRAPPERS = frozenset({"simplecache", "filecache", "blockcache", "cached", "dir", "reference",
                      "zip", "tar", "libarchive", "jlab", "jupyter", "arrow_hdfs", "dask"})
LOCAL = "file"
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*\Z")
_READ = 1 << 20
_HOW = ("allow it with ref_policy=ckptfs.RefPolicy.allow({spec!r}) on open_store, resume, "
        "fork or read, or --allow-refs {spec} on the command line")


@attrs.frozen
class RefRule:
    """One allowance: a scheme, a host (``*`` any; None for local files) and a path prefix
    matched segment by segment (``/`` matches every path)."""

    scheme: str
    host: str | None
    path: str

    @property
    def spec(self) -> str:
        if self.scheme == LOCAL:
            return self.path
        return f"{self.scheme}://{self.host}{'' if self.path == '/' else self.path}"

    def covers(self, target: _Target) -> bool:
        if target.scheme != self.scheme:
            return False
        if self.scheme != LOCAL and self.host != "*" and target.host != self.host:
            return False
        return _under(target.path, self.path)


@attrs.frozen
class _Target:
    """What a stored URI names, split for policy checks."""

    scheme: str
    host: str | None
    path: str

    def suggestion(self) -> str:
        if self.scheme == LOCAL:
            return os.path.dirname(self.path) or "/"
        return f"{self.scheme}://{self.host}"


@attrs.frozen
class RefPolicy:
    """Which references a reader may dereference to verify them; nothing by default.

    ``RefPolicy.allow("/data/refs", "https://files.example.com", "s3://bucket/prefix")``:
    local folders (or ``file:///folder``), ``SCHEME://HOST[:PORT][/PATH]`` for anything
    fsspec reaches (``SCHEME://*`` for any host: requests to wherever the store says).
    ``storage_options`` go to fsspec for network references, per scheme
    (``{"s3": {"anon": True}}``). ``timeout`` (seconds) bounds each HTTP(S) check, so that an
    allowed host that never answers cannot hang a restore. References the policy does not
    cover are reported "not checked": restore fails closed (MissingReference) unless lenient,
    which marks them.
    """

    rules: tuple[RefRule, ...] = ()
    storage_options: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)
    timeout: float = 30.0

    @classmethod
    def allow(cls, *specs: str, storage_options: Mapping[str, Mapping[str, Any]] | None = None,
              timeout: float = 30.0) -> RefPolicy:
        return cls(tuple(_rule(s) for s in specs), dict(storage_options or {}), timeout)

    def __add__(self, other: RefPolicy) -> RefPolicy:
        return RefPolicy(self.rules + other.rules,
                         {**self.storage_options, **other.storage_options},
                         min(self.timeout, other.timeout))

    def covering(self, target: _Target) -> RefRule | None:
        return next((r for r in self.rules if r.covers(target)), None)


#: the default: no reference is dereferenced
NO_REFS = RefPolicy()


def _rule(spec: object) -> RefRule:
    """A policy entry from its text; InvalidName when it is not one."""
    if not isinstance(spec, str) or not spec:
        raise InvalidName(f"reference policy entry {spec!r:.80}: give a folder or "
                          "SCHEME://HOST[/PATH]")
    if "://" not in spec:
        local = spec[5:] if spec.startswith("file:") else spec
        if "::" in local or any(seg in (".", "..") for seg in local.split("/")[1:]):
            raise InvalidName(f"reference policy entry {spec!r:.200}: a folder without "
                              "'::', '.' or '..' (a leading '.' for the working folder is fine)")
        return RefRule(LOCAL, None, _clean_local(os.path.abspath(local), spec))
    try:
        target = parse_uri(spec)
    except InvalidName as e:
        raise InvalidName(f"reference policy entry {spec!r:.200}: {e}") from None
    if target.scheme != LOCAL and not target.host:
        raise InvalidName(f"reference policy entry {spec!r:.200}: name the host "
                          "(SCHEME://HOST, or SCHEME://* for any host)")
    return RefRule(target.scheme, target.host, target.path or "/")


def _clean_local(path: str, shown: str) -> str:
    if not os.path.isabs(path) or any(seg in (".", "..") for seg in path.split("/")):
        raise InvalidName(f"{shown!r:.200}: a local path must be absolute, without '.' or '..'")
    return "/" + "/".join(seg for seg in path.split("/") if seg)


def parse_uri(uri: str) -> _Target:
    """Split a stored URI the way fsspec reads it, refusing (InvalidName) anything a policy
    cannot vouch for: ``::`` chains, wrapper protocols, credentials in the host, ``.`` or
    ``..`` segments (also percent-encoded), control characters."""
    if "::" in uri:
        raise InvalidName("a chained URL (fsspec '::'): chains are never followed from a "
                          "stored reference")
    if any(ord(c) < 0x20 or ord(c) == 0x7f for c in uri):
        raise InvalidName("control characters in the URI")
    scheme, sep, rest = uri.partition("://")
    if not sep or len(scheme) <= 1:  # fsspec: no protocol (a one-letter one is a drive)
        path = uri[5:] if uri.startswith("file:") else uri  # fsspec strips a bare "file:"
        if any(seg in (".", "..") for seg in path.split("/")):
            raise InvalidName("'.' or '..' in the path")
        return _Target(LOCAL, None, _clean_local(os.path.abspath(path), uri))
    scheme = scheme.lower()
    if not _SCHEME.match(scheme):
        raise InvalidName(f"{scheme!r:.40} is not a URL scheme")
    if scheme in WRAPPERS:
        raise InvalidName(f"'{scheme}' wraps, caches or unpacks other data: never followed "
                          "from a stored reference")
    if scheme in (LOCAL, "local"):
        host, slash, path = rest.partition("/")
        if host not in ("", "localhost"):
            raise InvalidName(f"file URL with host {host!r:.60}: only local files are read")
        return _Target(LOCAL, None, _clean_local("/" + path if slash else "", uri))
    try:
        parts = urllib.parse.urlsplit(f"{scheme}://{rest}")
    except ValueError as e:  # e.g. an unclosed IPv6 bracket
        raise InvalidName(f"not a URL ({e})") from None
    if "@" in parts.netloc:
        raise InvalidName("credentials in the URL's host part")
    segments = urllib.parse.unquote(parts.path).split("/")
    if any(seg in (".", "..") for seg in segments):
        raise InvalidName("'.' or '..' in the URL's path")
    return _Target(scheme, parts.netloc.lower(), parts.path or "/")


def _under(path: str, prefix: str) -> bool:
    if prefix == "/":
        return True
    return path == prefix or path.startswith(prefix.rstrip("/") + "/")


def to_ref(entry: Reference, missing: str | None = None,
           policy: RefPolicy | None = None) -> Ref:
    """The Ref a restore returns; ``open()``/``read()`` on it go through ``policy`` (the
    restore's reference policy): a store's URI is opened only where the reader allowed."""
    return Ref(uri=entry.uri, digest=entry.digest, size=entry.size,
               expires_at=None if entry.expires is None else entry.expires / 1000,
               labels=dict(entry.labels), missing=missing,
               opener=_Opener(entry.uri, policy or NO_REFS))


_OPEN_HOW = ("open it with a reference policy that allows it: ref_policy=ckptfs.RefPolicy."
             "allow({spec!r}) on open_store, resume, fork or read")


@attrs.frozen
class _Opener:
    """Opens a restored reference's target as its checks do (``check_reference``): only what
    the policy covers, local files without following links, network targets without
    redirects."""

    uri: str
    policy: RefPolicy

    def __call__(self) -> IO[bytes]:
        shown = self.uri if len(self.uri) <= 200 else self.uri[:200] + "..."
        try:
            target = parse_uri(self.uri)
        except InvalidName as e:
            raise MissingReference([(shown, f"not opened: {e}")],
                                   "A stored URI of this form is never opened.") from None
        rule = self.policy.covering(target)
        if rule is None:
            kind = "local file" if target.scheme == LOCAL else f"{target.scheme}://{target.host}"
            raise MissingReference(
                [(shown, f"not opened: {kind} is not allowed by the reference policy")],
                _OPEN_HOW.format(spec=target.suggestion()) + ".")
        if target.scheme == LOCAL:
            got = _open_local(target.path, rule.path, shown)
            if isinstance(got, str):
                raise MissingReference([(shown, got)], "Restore the referenced data.")
            return os.fdopen(got[0], "rb")
        import fsspec

        fs, path = fsspec.core.url_to_fs(self.uri, **_remote_options(target, self.policy))
        f: IO[bytes] = fs.open(path, "rb")
        return f


def check_reference(entry: Reference, *, policy: RefPolicy = NO_REFS,
                    now: float | None = None) -> str | None:
    """Why ``entry`` cannot be restored, or None if it is there and matches. Only what
    ``policy`` covers is opened or requested; the rest is "not checked"."""
    now = time.time() if now is None else now
    if entry.expires is not None and entry.expires / 1000 <= now:
        return f"expired at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(entry.expires / 1000))}"
    shown = entry.uri if len(entry.uri) <= 200 else entry.uri[:200] + "..."
    try:
        target = parse_uri(entry.uri)
    except InvalidName as e:
        return f"{shown} not checked: {e}"
    rule = policy.covering(target)
    if rule is None:
        kind = "local file" if target.scheme == LOCAL else f"{target.scheme}://{target.host}"
        return (f"{shown} not checked: {kind} is not allowed by the reference policy (a store "
                f"cannot make its reader open files or send requests); "
                + _HOW.format(spec=target.suggestion()))
    if target.scheme == LOCAL:
        return _check_local(entry, target.path, rule.path, shown)
    return _check_remote(entry, target, policy, shown)


def _check_local(entry: Reference, path: str, root: str, shown: str) -> str | None:
    """Verify a local target (``_open_local``): a regular file, read at most to its declared
    size."""
    got = _open_local(path, root, shown)
    if isinstance(got, str):
        return got
    fd, size = got
    try:
        with os.fdopen(fd, "rb", buffering=0) as f:
            return _verify(entry, size, f, shown)
    except OSError as e:
        return f"{shown} cannot be read ({e.strerror})"


def _open_local(path: str, root: str, shown: str) -> tuple[int, int] | str:  # noqa: C901
    """Open ``path`` below ``root`` one segment at a time with O_NOFOLLOW (no link anywhere
    below the allowed folder is followed), the last one O_NONBLOCK (a FIFO does not block);
    a regular file's descriptor and size, or why it cannot be had."""
    below = [seg for seg in path[len(root):].split("/") if seg] if root != "/" else \
        [seg for seg in path.split("/") if seg]
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError as e:
        return f"{shown}: the allowed folder {root} cannot be opened ({e.strerror})"
    try:
        for i, seg in enumerate(below):
            last = i == len(below) - 1
            flags = (os.O_RDONLY | nofollow | getattr(os, "O_NOCTTY", 0)
                     | getattr(os, "O_NONBLOCK" if last else "O_DIRECTORY", 0))
            try:
                nxt = os.open(seg, flags, dir_fd=fd)
            except OSError as e:
                if e.errno == errno.ENOENT:
                    return f"{shown} does not exist"
                if e.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                    return (f"{shown}: a symbolic link or non-folder on the way; links are "
                            "not followed")
                return f"{shown} cannot be opened ({e.strerror})"
            os.close(fd)
            fd = nxt
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return f"{shown} is not a regular file"
        out, fd = fd, -1
        return out, st.st_size
    except OSError as e:
        return f"{shown} cannot be read ({e.strerror})"
    finally:
        if fd >= 0:
            os.close(fd)


def _remote_options(target: _Target, policy: RefPolicy) -> dict[str, Any]:
    """fsspec options for a network reference: the policy's, no redirects, bounded time."""
    opts: dict[str, Any] = dict(policy.storage_options.get(target.scheme, {}))
    if target.scheme in ("http", "https"):
        import aiohttp

        opts.setdefault("allow_redirects", False)  # a redirect could name any host
        client = dict(opts.get("client_kwargs") or {})
        client.setdefault("timeout", aiohttp.ClientTimeout(total=policy.timeout))
        opts["client_kwargs"] = client
    return opts


def _check_remote(entry: Reference, target: _Target, policy: RefPolicy,
                  shown: str) -> str | None:
    opts = _remote_options(target, policy)
    try:
        import fsspec  # only for network references: not at import

        fs, path = fsspec.core.url_to_fs(entry.uri, **opts)
        info = fs.info(path)
        size = info.get("size") if isinstance(info, dict) else None
        if type(size) is not int:
            size = None
        if entry.size is not None and size is not None and size != entry.size:
            return f"{shown} is {size} bytes, expected {entry.size}"
        if entry.digest is None:
            return None
        with fs.open(path, "rb") as f:
            return _verify(entry, size, f, shown)
    except FileNotFoundError:
        return f"{shown} does not exist"
    except Exception as e:  # any backend failure means the data cannot be had
        return f"{shown} cannot be reached ({type(e).__name__}: {str(e)[:300]})"


def _verify(entry: Reference, size: int | None, f: IO[bytes], shown: str) -> str | None:
    """Size and digest of an open target, reading no more than the declared size (or the
    target's own size when none is declared) plus one byte."""
    if entry.size is not None and size is not None and size != entry.size:
        return f"{shown} is {size} bytes, expected {entry.size}"
    if entry.digest is None:
        return None
    bound = entry.size if entry.size is not None else size
    h = hasher()
    got = 0
    while bound is None or got < bound:
        piece = f.read(_READ if bound is None else min(_READ, bound - got))
        if not piece:
            break
        h.update(piece)
        got += len(piece)
    if bound is not None and (got < bound or f.read(1)):
        return f"{shown} changed size while read (expected {bound} bytes)"
    if Digest(h.digest()) != entry.digest:
        return f"{shown} has changed (digest differs from {entry.digest})"
    return None


def policy_of(specs: Iterable[str]) -> RefPolicy:
    """The policy of a command line's ``--allow-refs`` entries (InvalidName on a bad one)."""
    return RefPolicy.allow(*specs)


def capture(ref: Ref) -> Blob:
    """Open the referenced data for storing its bytes now (``Ref(..., capture=True)``): the
    caller wrote this Ref itself, so its URI is the caller's choice, not a store's."""
    import fsspec

    f = fsspec.open(ref.uri, "rb", **ref.storage_options).open()
    labels = dict(ref.labels)
    labels.setdefault("ckptfs.captured-from", ref.uri[:1024])
    return Blob(f, labels=labels)
