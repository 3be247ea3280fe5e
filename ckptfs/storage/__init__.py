"""Storage: the few primitives the commit protocol needs, one class per kind of backend.

Nothing above this package knows which backend it has; it asks ``Storage.capabilities``.
"""

from ckptfs.storage.base import Capabilities, Listing, ObjectStat, Storage
from ckptfs.storage.open import open_storage

__all__ = ["Capabilities", "Listing", "ObjectStat", "Storage", "open_storage"]
