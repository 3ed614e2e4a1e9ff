"""The range of due times, in epoch milliseconds (UTC): below every domain
module. Stated once, in :mod:`triggerhook_client.rules` (the client checks
them before sending)."""

from triggerhook_client.rules import MAX_DUE_MS, MIN_DUE_MS

__all__ = ["MAX_DUE_MS", "MIN_DUE_MS"]
