"""Google ADK keeps its sessions in a ckptfs store (``pip install 'ckptfs[google-adk]'``).

``CkptfsSessionService(store)`` is ADK's ``BaseSessionService`` (``service``): pass it to a
``Runner`` as ``session_service=``. ``OnceTool(func, service)`` (``effects``) is a
``FunctionTool`` that runs its function at most once per ADK function call id through the
ckptfs effect ledger. The layout in the store: ``names`` and ``log``.
"""

from ckptfs.integrations.google_adk.effects import OnceTool
from ckptfs.integrations.google_adk.service import CkptfsSessionService, SessionConflict

__all__ = ["CkptfsSessionService", "OnceTool", "SessionConflict"]
