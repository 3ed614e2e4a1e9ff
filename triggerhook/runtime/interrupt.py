"""Asking a long call to stop: :class:`Interrupt`.

A read of many tasks or a bulk cancel runs on a thread for as long as the
database takes; its caller (an HTTP request) may go away meanwhile, or the
daemon may stop. The caller's side :meth:`~Interrupt.set`\\ s the interrupt,
from any thread; the call checks it between its steps (:meth:`~Interrupt.check`,
:attr:`~Interrupt.stopping`) and, around a step that blocks (a database
statement), registers how to cut that step short (:meth:`~Interrupt.cutting`:
the MySQL store sends ``KILL QUERY``), so that the work ends within a round
trip rather than when the statement would have.

A deadline (monotonic seconds) stops a call between its steps only: it never
cuts a step short (each step has bounds of its own, such as the database's
time limit for listing reads).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

from triggerhook.errors import Interrupted

__all__ = ["Interrupt"]

DEADLINE = "its time limit passed"


class Interrupt:
    """Set once, by anyone; read by the call it interrupts. Thread-safe."""

    def __init__(
        self, deadline_s: float | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        """``deadline_s``: on ``clock`` (monotonic seconds), when the call
        should stop at its next step; None: never by itself."""
        self._deadline_s = deadline_s
        self._clock = clock
        # Held while a cut runs and while one is registered or removed: a cut
        # never outlives the step it was registered for.
        self._lock = threading.Lock()
        self._why: str | None = None
        self._cut: Callable[[], None] | None = None

    def set(self, why: str) -> None:
        """Stop the call (``why``: for its error message and log), cutting
        short the step it is in, if that step registered how (blocking: the
        cut runs on this thread). A second call does nothing."""
        with self._lock:
            if self._why is not None:
                return
            self._why = why
            if self._cut is not None:
                self._cut()

    @property
    def why(self) -> str | None:
        """Why the call should stop (None: it should not); a deadline that
        passed counts as :data:`DEADLINE`."""
        if self._why is not None:
            return self._why
        if self._deadline_s is not None and self._clock() >= self._deadline_s:
            return DEADLINE
        return None

    @property
    def stopping(self) -> bool:
        """Whether the call should stop: set, or past its deadline."""
        return self.why is not None

    @property
    def is_set(self) -> bool:
        """Whether :meth:`set` was called (the deadline aside)."""
        return self._why is not None

    def check(self) -> None:
        """Raise :class:`Interrupted` if the call should stop."""
        why = self.why
        if why is not None:
            raise Interrupted(f"stopped: {why}")

    @contextlib.contextmanager
    def cutting(self, cut: Callable[[], None]) -> Iterator[None]:
        """While the block runs, :meth:`set` calls ``cut`` (once) to end it
        early; raises :class:`Interrupted` at once if already set. ``cut``
        must not block for long: :meth:`set` holds a lock while it runs, and
        the block's end waits for that."""
        with self._lock:
            if self._why is not None:
                raise Interrupted(f"stopped: {self._why}")
            self._cut = cut
        try:
            yield
        finally:
            with self._lock:
                self._cut = None
