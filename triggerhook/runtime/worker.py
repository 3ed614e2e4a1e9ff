"""Base class of every background thread (the engine's stages, the publisher,
the metrics reporter): start/stop/join, back-off and failure reporting, and
the beats that show progress to the watchdog (:meth:`Worker.stalled`)."""

from __future__ import annotations

import ctypes
import logging
import math
import threading
import time
from collections.abc import Callable

from triggerhook.errors import StoreReadOnly, TransientError
from triggerhook.retry import Backoff
from triggerhook.runtime import progress

log = logging.getLogger(__name__)

FailureHandler = Callable[[str, BaseException], None]

_PR_SET_NAME = 15
# A thread beats (:meth:`Worker.beat`) at least this often while it waits
# idle: the watchdog's sign that it is not wedged (:meth:`Worker.stalled`).
BEAT_S = 1.0


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
        # time.monotonic() of its last sign of progress (:meth:`beat`).
        self.beat_s = time.monotonic()
        # The database refusing this thread's writes (read-only, full), from
        # the failure that said so until the next success or another failure.
        self.refusal: StoreReadOnly | None = None

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

    # -- progress (the watchdog's) ----------------------------------------------

    def beat(self) -> None:
        """A sign of progress: the thread went round its loop, finished an
        idle wait, or began or ended a back-off before a retry."""
        self.beat_s = time.monotonic()

    def pause(self, event: threading.Event, timeout_s: float | None) -> bool:
        """Wait for ``event`` (not cleared here) up to ``timeout_s`` (None: no
        limit), beating every :data:`BEAT_S` meanwhile, so a thread idle for
        long still shows progress. True: the event was set."""
        deadline_s = time.monotonic() + (math.inf if timeout_s is None else timeout_s)
        while True:
            self.beat()
            left_s = deadline_s - time.monotonic()
            if left_s <= 0:
                return False
            if event.wait(min(left_s, BEAT_S)):
                return True

    def stalled(self, now_s: float, max_silence_s: float) -> bool:
        """The thread runs but made no progress (no :meth:`beat`) for over
        ``max_silence_s`` (``now_s``: ``time.monotonic()``): wedged. A thread
        inside one database call is waiting on the network instead, up to
        :data:`~triggerhook.runtime.progress.DATABASE_CALL_MAX_S` (the drivers'
        timeouts bound the call; an outage must not get the daemon killed)."""
        thread = self._thread
        if thread is None or not thread.is_alive() or now_s - self.beat_s <= max_silence_s:
            return False
        since_s = progress.waiting_since(thread.ident)
        return since_s is None or now_s - since_s > progress.DATABASE_CALL_MAX_S

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
        self.refusal = exc if isinstance(exc, StoreReadOnly) else None
        delay_s = min(self._backoff.next_delay_s(), max(0.0, self._deadline_s - time.monotonic()))
        log.warning(
            "%s failed (attempt %d), retrying in %.2fs: %s",
            what,
            self._backoff.attempt,
            delay_s,
            exc,
            extra={"thread_name": self.name, "attempt": self._backoff.attempt},
        )
        # Beating while it waits: retrying is progress, a long outage is
        # ridden out rather than taken for a wedge (see stalled).
        self.pause(self._interrupt, delay_s)
        self.beat()

    def succeeded(self, what: str) -> None:
        self.beat()  # a step done: progress, also for a thread busy without pause
        self.refusal = None
        if self._backoff.attempt:
            log.info("%s recovered after %d failed attempts", what, self._backoff.attempt)
            self._backoff.reset()
