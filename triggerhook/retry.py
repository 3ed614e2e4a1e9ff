"""The one retry policy: capped exponential back-off with equal jitter.

Defined in :mod:`triggerhook_client.backoff` (the client retries its calls
with it too; the daemon depends on the client distribution, not the other
way round). Threads use :class:`Backoff` between attempts and wait on their
stop event for the returned delay, so a stop request interrupts the wait.
Where a retry delay must be deterministic (an event's next attempt, see
:mod:`triggerhook.domain.delivery`), the ceiling itself
(:func:`capped_exponential`) is the delay.
"""

from __future__ import annotations

from triggerhook_client.backoff import Backoff, capped_exponential

__all__ = ["Backoff", "capped_exponential"]
