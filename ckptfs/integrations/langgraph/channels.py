"""The entries of a checkpoint's channels for ``CkptfsSaver.put``: one per channel value,
reusing the parent's entry for a channel LangGraph did not bump, packing only the new items of
a list that visibly grew (``appends.py``)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from langgraph.checkpoint.base import ChannelVersions, Checkpoint

from ckptfs.format.models import Captured, Entry
from ckptfs.integrations.langgraph.appends import pack_list
from ckptfs.integrations.langgraph.layout import (
    L_CHANNEL,
    L_VERSION,
    _Chunks,
    _RunIndex,
    channel_entry,
)
from ckptfs.store.repository import Snapshot

if TYPE_CHECKING:
    from ckptfs.integrations.langgraph.saver import CkptfsSaver


def channel_entries(saver: CkptfsSaver, idx: _RunIndex, checkpoint: Checkpoint,
                    new_versions: ChannelVersions, parent: Snapshot | None,
                    chunks: _Chunks) -> tuple[dict[str, Entry], bool]:
    """One entry per channel value; a channel not bumped since the parent reuses its entry.
    Also: whether a new entry holds typed values."""
    values, versions = checkpoint["channel_values"], checkpoint["channel_versions"]
    old_entries = parent.manifest.entries if parent else {}
    entries: dict[str, Entry] = {}
    typed = False
    for ch in dict.fromkeys([*values, *versions]):
        name = channel_entry(ch)
        if name in entries:
            raise ValueError(f"channels {ch!r} and another map to entry {name!r}; rename one")
        version = json.dumps(versions.get(ch))
        old = old_entries.get(name)
        if (ch in versions and ch not in new_versions and isinstance(old, Captured)
                and old.labels.get(L_CHANNEL) == ch and old.labels.get(L_VERSION) == version):
            entries[name] = old
        elif ch in values:
            grown = saver._appends is not False and type(values[ch]) is list
            if grown:
                packed, t = pack_list(idx.lists, name, values[ch], saver._packer,
                                      saver._appends != "identity")
            else:
                idx.lists.pop(name, None)
                packed, t = saver._packer.pack_channel(values[ch])
            typed = typed or t
            entries[name] = saver._encode(idx, name, packed,
                                          {L_CHANNEL: ch, L_VERSION: version}, chunks, grown)
    return entries, typed
