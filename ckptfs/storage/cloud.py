"""What the GCS backend (gcsfs) needs beyond fsspec's interface, kept out of objects.py."""

from __future__ import annotations

from typing import Any

from fsspec.asyn import sync


def gcs_list_after(fs: Any, folder: str, after: str) -> list[str]:
    """Names below ``folder`` ("bucket/key/prefix/") that sort after ``after``, ascending:
    GCS objects.list with ``prefix`` and ``startOffset`` (inclusive, so the name ``after``
    itself is dropped), 1,000 names a page, never cached by gcsfs."""
    bucket, _, key_prefix = folder.partition("/")
    start = key_prefix + after
    names: list[str] = []
    token: str | None = None
    while True:
        kw: dict[str, Any] = {"prefix": key_prefix, "startOffset": start, "maxResults": 1000}
        if token:
            kw["pageToken"] = token
        page = sync(fs.loop, fs._call, "GET", "b/{}/o", bucket, json_out=True, **kw)
        names += [o["name"][len(key_prefix):] for o in page.get("items", [])
                  if o["name"] > start]
        token = page.get("nextPageToken")
        if not token:
            return sorted(names)
