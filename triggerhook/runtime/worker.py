"""Base class of every background thread (the engine's stages, the publisher,
the metrics reporter): start/stop/join, back-off and failure reporting."""

from __future__ import annotations

import ctypes
import logging
import math
import threading
import time
from collections.abc import Callable

from triggerhook.errors import TransientError
from triggerhook.retry import Backoff

log = logging.getLogger(__name__)

FailureHandler = Callable[[str, BaseException], None]

_PR_SET_NAME = 15


def name_os_thread(name: str) -> None:
    """Give the calling thread ``name`` in the kernel too (first 15 bytes), so
    ``top -H``, ``ps -L`` and /proc show which stage burns the CPU; best effort
    (Linux only; Python 3.11's threading does not do it)."""
    try:
        libc = ctypes.CDLL(None)  # the process's own symbols: libc's prctl
        libc.prctl(_PR_SET_NAME, name.encode()[:15], 0, 0, 0)
    except (OSError, AttributeError):
        pass


class Worker:
    """A named daemon thread running :meth:`run` until :meth:`stop`.

    An exception escaping :meth:`run` is a bug or an unrecoverable state: it is
    logged and reported to ``on_failure``, which makes the engine unhealthy.
    """

    def __init__(self, name: str, on_failure: FailureHandler) -> None:
        self.name = name
        self._on_failure = on_failure
        self._stopping = threading.Event()
        self._interrupt = threading.Event()  # cuts a back-off wait short
        self._deadline_s = math.inf  # time.monotonic() by which to give up when stopping
        self._thread: threading.Thread | None = None
        self._backoff = Backoff()
        self.transient_errors = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, deadline_s: float | None = None) -> None:
        """Ask the thread to end: at once, or by ``deadline_s`` (``time.monotonic``)
        for threads that finish their work first (retrying until then)."""
        self._deadline_s = time.monotonic() if deadline_s is None else deadline_s
        self._stopping.set()
        if deadline_s is None:
            self._interrupt.set()
        self.wake()

    def wake(self) -> None:
        """Interrupt the thread's wait; subclasses waiting on a condition override."""

    def join(self, timeout_s: float | None = None) -> bool:
        if self._thread is not None:
            self._thread.join(timeout_s)
            return not self._thread.is_alive()
        return True

    def is_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def past_deadline(self) -> bool:
        return self.stopping and time.monotonic() >= self._deadline_s

    def run(self) -> None:
        raise NotImplementedError

    def _main(self) -> None:
        name_os_thread(self.name)
        try:
            self.run()
        except BaseException as exc:
            log.critical("thread %s failed: %r", self.name, exc, exc_info=exc)
            self._on_failure(self.name, exc)

    def back_off(self, exc: TransientError, what: str) -> None:
        """Log a transient failure and wait (interruptibly) before the retry."""
        self.transient_errors += 1
        delay_s = min(self._backoff.next_delay_s(), max(0.0, self._deadline_s - time.monotonic()))
        log.warning(
            "%s failed (attempt %d), retrying in %.2fs: %s",
            what,
            self._backoff.attempt,
            delay_s,
            exc,
            extra={"thread_name": self.name, "attempt": self._backoff.attempt},
        )
        self._interrupt.wait(delay_s)

    def succeeded(self, what: str) -> None:
        if self._backoff.attempt:
            log.info("%s recovered after %d failed attempts", what, self._backoff.attempt)
            self._backoff.reset()
