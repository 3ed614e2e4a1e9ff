"""Which threads are waiting for the database, and since when.

The watchdog (``triggerhook/service.py``) pings systemd only while every
engine thread makes progress (:meth:`~triggerhook.runtime.worker.Worker.stalled`).
A thread inside one database call is waiting on the network, not wedged: the
drivers bound every call (a free connection 30 s, connecting 5 s, a ping or a
statement's read 30 s each), and during an outage a call may take the sum of
those. So the connection pool marks each call here (:func:`call_begins`,
:func:`call_ends`), and a thread silent inside one is excused for
:data:`DATABASE_CALL_MAX_S`; past that it is wedged too.

Any thread writes its own entry; the watchdog reads (dict operations on
distinct keys, atomic under the GIL).
"""

from __future__ import annotations

import threading
import time

# Longer than any one database call the drivers' timeouts allow (see above:
# 30 + 5 + 30 + 30 s in the worst outage), and short enough that a call that
# never returns still stops the watchdog within a few minutes.
DATABASE_CALL_MAX_S = 120.0

_since_s: dict[int, float] = {}  # thread ident -> time.monotonic() its call began


def call_begins() -> float | None:
    """The calling thread begins a database call; pass the result to
    :func:`call_ends`. (A call inside another keeps the outer one's start.)"""
    ident = threading.get_ident()
    outer = _since_s.get(ident)
    if outer is None:
        _since_s[ident] = time.monotonic()
    return outer


def call_ends(outer: float | None) -> None:
    """The call :func:`call_begins` returned ``outer`` for has ended."""
    if outer is None:
        _since_s.pop(threading.get_ident(), None)


def waiting_since(ident: int | None) -> float | None:
    """When (``time.monotonic``) the thread ``ident`` began the database call
    it is in; None: it is in none."""
    return None if ident is None else _since_s.get(ident)
