"""The namespaces' quotas in one process (:mod:`triggerhook.domain.quotas`):
the decisions, under a lock, and the counts of stored tasks they ask for.

One :class:`QuotaKeeper` per API process, shared by the HTTP API, the AMQP
command channel and gRPC (built in :mod:`triggerhook.wiring`), so that a
namespace's creates a second are one bucket whichever way they come.

Threads: :meth:`QuotaKeeper.admit` is called from any (the HTTP API's event
loop, the command workers): it never waits on the database. A count runs
on the keeper's own thread (made at the first count), one at a time; until
it comes back, the estimate of the namespace's pending tasks stands.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from triggerhook.app import TriggerHook
from triggerhook.domain.listing import TaskFilter
from triggerhook.domain.namespaces import Namespace
from triggerhook.domain.quotas import Quotas
from triggerhook.errors import OverQuota
from triggerhook.ratelimit import RateLimitedLog

log = logging.getLogger(__name__)

# How many of a namespace's tasks are stored: ``where`` and ``up_to`` as
# :meth:`triggerhook.app.TriggerHook.count` takes them.
Count = Callable[[TaskFilter, int], int]
_LOG_EVERY_S = 60.0


def _monotonic_ms() -> float:
    return time.monotonic() * 1000


def keeper_of(hook: TriggerHook, share: float = 1.0) -> QuotaKeeper:
    """A keeper counting through ``hook``; ``share``: 1 / the API processes."""
    return QuotaKeeper(lambda where, up_to: hook.count(where, up_to=up_to), share)


class QuotaKeeper:
    """Admits a namespace's creates or raises OverQuota / ValidationError."""

    def __init__(
        self,
        count: Count,
        share: float = 1.0,
        monotonic_ms: Callable[[], float] = _monotonic_ms,
    ) -> None:
        """``share``: this process's part of each create_rate (1 / API processes)."""
        self._count = count
        self._monotonic_ms = monotonic_ms
        self._quotas = Quotas(share)
        self._lock = threading.Lock()
        self._counter: ThreadPoolExecutor | None = None
        self._closed = False
        self._failures = RateLimitedLog(log, _LOG_EVERY_S)
        self._refusals = RateLimitedLog(log, _LOG_EVERY_S)  # a line per namespace a minute
        self.counts = 0  # counts made (tests and the log)
        self.refused = 0  # creates refused over_quota (read by the metrics, any thread)

    def admit(self, space: Namespace, creates: int) -> None:
        quota = space.quota
        if not quota:
            return
        now_ms = self._monotonic_ms()
        with self._lock:
            due = self._quotas.count_due(space.name, quota, creates, now_ms)
            try:
                self._quotas.admit(space.name, quota, creates, now_ms)
            except OverQuota as exc:
                self.refused += 1
                self._refusals.warning(space.name, "create refused: %s", exc)
                raise
            finally:
                if due:
                    self._start_count(space)

    def _start_count(self, space: Namespace) -> None:
        """Under the lock."""
        if self._closed:
            self._quotas.count_failed(space.name, self._monotonic_ms())
            return
        if self._counter is None:
            self._counter = ThreadPoolExecutor(1, thread_name_prefix="quota-count")
        self._counter.submit(self._count_now, space)

    def _count_now(self, space: Namespace) -> None:
        """On the counter's thread."""
        most = space.quota.max_pending
        assert most is not None  # count_due asks for none otherwise
        try:
            pending = self._count(TaskFilter(prefix=space.id_prefix), most + 1)
        except Exception as exc:  # the database down, a read over its bounds: the estimate stands
            self._failures.warning(
                space.name,
                "could not count namespace %r's tasks for its max_pending (tried again"
                " within a second of the next create): %s",
                space.name,
                exc,
            )
            with self._lock:
                self._quotas.count_failed(space.name, self._monotonic_ms())
            return
        with self._lock:
            self._quotas.counted(space.name, pending, self._monotonic_ms())
            self.counts += 1

    def close(self) -> None:
        """A count in flight is let finish on its own (bounded by the
        database's time limit for reads); none starts after."""
        with self._lock:
            self._closed = True
            counter, self._counter = self._counter, None
        if counter is not None:
            counter.shutdown(wait=False, cancel_futures=True)
