"""The library API: :class:`TriggerHook`, the one façade every interface uses.

It takes what callers ask for (:class:`TaskSpec`, or a task id and a due
time), validates it once (:func:`~triggerhook.domain.spec.resolve`) and hands
it to the engine's write path (:mod:`triggerhook.engine.writes`). It answers
what the interfaces show: :meth:`TriggerHook.health` and :meth:`TriggerHook.figures`.
It builds nothing: :mod:`triggerhook.wiring` assembles it.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from triggerhook.clock import ClockSync
from triggerhook.domain.listing import (
    BulkCancelled,
    Page,
    TaskFilter,
    Timeline,
    count_cap,
    decode_cursor,
    next_cursor,
    page_limit,
    timeline_span,
)
from triggerhook.domain.series import backfill_dues, check_copyable, copy_of
from triggerhook.domain.spec import Due, TaskRules, TaskSpec, conflict_rule, resolve
from triggerhook.domain.task import (
    CancelResult,
    InsertOutcome,
    OnConflict,
    SeriesResult,
    Task,
    TaskInfo,
    validate_due_ms,
    validate_id,
)
from triggerhook.domain.timeparse import due_from
from triggerhook.engine.bulk import cancel_where
from triggerhook.engine.engine import Engine
from triggerhook.engine.groupcommit import Done, Ticket
from triggerhook.engine.writes import Create
from triggerhook.errors import (
    AlreadyFiredError,
    ConflictError,
    TooLateError,
    TransientError,
    TriggerHookError,
    ValidationError,
)
from triggerhook.interfaces import Clock, Inserted, Moved, TaskStore
from triggerhook.metrics.reporter import MetricsReporter
from triggerhook.runtime.counters import HistogramSnapshot, RequestStats
from triggerhook.runtime.interrupt import Interrupt
from triggerhook.runtime.points import Field

log = logging.getLogger(__name__)

ANY = TaskFilter()  # every task

__all__ = [
    "Copied",
    "Done",
    "Due",
    "Figures",
    "Health",
    "Scheduled",
    "TaskSpec",
    "Ticket",
    "TriggerHook",
]


@dataclass(frozen=True, slots=True)
class Scheduled:
    """A create's answer: CREATED, EXISTS (the same task was stored: a safe
    retry), REPLACED (``on_conflict="replace"``: the new task replaced the
    stored one) or KEPT (``on_conflict="keep"``: ``task`` is the stored one,
    which stays). A create refused because the id fired within its dedup
    window raises :class:`~triggerhook.errors.AlreadyFiredError` instead."""

    task: Task
    outcome: InsertOutcome = InsertOutcome.CREATED

    @property
    def created(self) -> bool:
        """A new task is stored (False: it existed; see ``outcome``)."""
        return self.outcome is InsertOutcome.CREATED


@dataclass(frozen=True, slots=True)
class Health:
    """The engine as readiness probes and supervisors see it (no database call)."""

    running: bool  # started, not stopped, and no thread failed
    alive: bool  # running, and every engine thread is alive
    failure: str | None  # "thread <name> failed: <error>" once one failed
    publisher_connected: bool
    clock_bounded: bool  # the database's time is known well enough to fire by
    # How the database refuses the engine's writes now ("read-only", "out of
    # space"), or None: it takes them (or they fail otherwise).
    store_refusal: str | None = None


@dataclass(frozen=True, slots=True)
class Figures:
    """What ``/v1/status`` and ``/metrics`` show."""

    instance: str
    running: bool
    totals: dict[str, int]  # since start
    latest: dict[str, dict[str, Field]]  # measurement -> the last period's fields
    # name -> counts since start (lateness, HTTP latency), as of the last period
    histograms: dict[str, HistogramSnapshot] = field(default_factory=dict)


def _scheduled(inserted: Inserted) -> Scheduled:
    """A create's answer; CONFLICT, TOO_LATE and ALREADY_FIRED raise."""
    outcome = inserted.outcome
    if outcome is InsertOutcome.CONFLICT:
        raise ConflictError(inserted.task.id)
    if outcome is InsertOutcome.TOO_LATE:
        raise TooLateError(inserted.task.id)
    if outcome is InsertOutcome.ALREADY_FIRED:
        raise AlreadyFiredError(inserted.task.id, inserted.fired_ms or 0)  # as store/rows.refused
    return Scheduled(inserted.task, outcome)


def _copy_answer(inserted: Inserted) -> Scheduled:
    """A backfill's copy: as a create's answer, but one that fired within
    the series' window is answered (ALREADY_FIRED), not raised."""
    if inserted.outcome is InsertOutcome.ALREADY_FIRED:
        return Scheduled(inserted.task, inserted.outcome)
    return _scheduled(inserted)


@dataclass(frozen=True, slots=True)
class Copied:
    """A trigger's or a backfill's answer: TRIGGERED or BACKFILLED with
    ``copies``, each copy of an occurrence written (CREATED), there already
    and still pending (EXISTS: a repeat) or, a backfill's, fired within the
    series' dedup window (ALREADY_FIRED: not written again); or NOT_FOUND,
    NOT_A_SERIES: nothing written."""

    result: SeriesResult
    copies: tuple[Scheduled, ...] = ()


class TriggerHook:
    """Schedule, cancel and look up tasks; with :meth:`start`, also fire them.

    Without ``start()`` the object is a client of the database only (tasks are
    fired by whichever engine instance runs). All methods are thread-safe.
    Built by :func:`triggerhook.build` (or :func:`triggerhook.wiring.assemble`).
    """

    def __init__(
        self,
        engine: Engine,
        store: TaskStore,
        clock: Clock,
        rules: TaskRules,
        metrics: Callable[[], MetricsReporter],
        clock_sync: ClockSync | None = None,
        database: str = "",
    ) -> None:
        self.instance_id = engine.instance
        self._engine = engine
        self._writes = engine.writes
        self._store = store
        self._clock = clock
        self._rules = rules
        self._new_metrics = metrics
        self._clock_sync = clock_sync
        self._database = database  # where the store is and which driver speaks to it (logs)
        self.metrics: MetricsReporter | None = None  # while started

    @property
    def engine(self) -> Engine:
        """The engine itself, for tests and benchmarks that look inside."""
        return self._engine

    # -- scheduling -----------------------------------------------------------

    def schedule(self, spec: TaskSpec, timeout_s: float = 30.0) -> Scheduled:
        """Store one task; returns once its row is committed.

        Raises :class:`ValidationError` (bad input, nothing written),
        :class:`ConflictError` (same id, other content, and ``on_conflict``
        error), :class:`TooLateError` (``on_conflict`` replace of a task being
        published), :class:`AlreadyFiredError` (the id fired within its dedup
        window, ``fired_ms`` says when: nothing written), or a
        :class:`~triggerhook.errors.TransientError` (retry: it is idempotent):
        ``StoreUnavailable``, or ``Overloaded`` when too many calls wait.
        """
        create = self._create(spec, self._clock.now_ms())
        return _scheduled(self._writes.inserts.call(create, timeout_s))

    def _create(self, spec: TaskSpec, now_ms: float, field: str = "") -> Create:
        """The validated task, and its conflict rule (nothing written)."""
        rule = conflict_rule(spec, field)
        return resolve(spec, now_ms, self._rules, field), rule

    def resolve(self, spec: TaskSpec) -> Task:
        """The task :meth:`schedule` would store for ``spec`` now (nothing written);
        raises :class:`ValidationError`."""
        return resolve(spec, self._clock.now_ms(), self._rules)

    def schedule_many(self, specs: Iterable[TaskSpec]) -> list[Scheduled]:
        """Store many tasks in one transaction: all of them or, on any error, none.

        The tasks apply in order, as if each came alone after those before it.
        A validation error names the index: ``tasks[3].routing_key``; a
        :class:`ConflictError` (or :class:`TooLateError`, or
        :class:`AlreadyFiredError` with its ``fired_ms``) has the ``index`` of
        the first task refused.
        """
        now_ms = self._clock.now_ms()
        creates = [self._create(s, now_ms, f"tasks[{i}]") for i, s in enumerate(specs)]
        if not creates:
            return []
        return [_scheduled(inserted) for inserted in self._writes.insert_many(creates)]

    def reschedule(
        self,
        task_id: str,
        *,
        at: Due | None = None,
        at_ms: int | None = None,
        delay_ms: int | None = None,
        timeout_s: float = 30.0,
    ) -> Moved:
        """Move a task that has not started firing to a new due time (given
        like a :class:`TaskSpec`'s: exactly one of ``at``, ``at_ms``, ``delay_ms``).

        RESCHEDULED (``task`` as now stored: it fires at the new time and never
        at the old one), NOT_FOUND, or TOO_LATE (being published at its old time).
        """
        move = self._move(task_id, at, at_ms, delay_ms)
        return self._writes.moves.call(move, timeout_s)

    def cancel(self, task_id: str, timeout_s: float = 30.0) -> CancelResult:
        """CANCELLED (it will never fire, whichever instance holds it), NOT_FOUND
        (unknown, or fired and deleted), or TOO_LATE (being published)."""
        return self._writes.cancels.call(validate_id(task_id), timeout_s)

    def get(self, task_id: str) -> TaskInfo | None:
        """The stored task and where it stands (:class:`TaskInfo`: its state,
        whether a rate limit holds it back in the database, when it fires if
        after its due time), or None: unknown, or fired."""
        return self._store.get(validate_id(task_id))

    # -- a series' life (domain/series.py) -------------------------------------------

    def pause(self, task_id: str) -> SeriesResult:
        """Pause a series: no occurrence fires until :meth:`resume`. PAUSED
        (also when it was paused), PAUSED_AFTER_THIS (its occurrence being
        published still fires; none after it), NOT_FOUND, NOT_A_SERIES."""
        return self._writes.pause([validate_id(task_id)])[0]

    def resume(self, task_id: str) -> SeriesResult:
        """Resume a paused series at the occurrence it would have fired next;
        one missed while it was paused goes by its ``catch_up`` policy.
        RESUMED (also when it was not paused), ENDED (no occurrence was left:
        it is deleted), NOT_FOUND, NOT_A_SERIES."""
        return self._writes.resume([validate_id(task_id)])[0]

    def trigger(self, task_id: str, timeout_s: float = 30.0) -> Copied:
        """Fire one extra occurrence of a series now, its schedule unchanged:
        a one-off copy ``<id>:<now ms>`` (cancel it by that id). TRIGGERED,
        NOT_FOUND, NOT_A_SERIES. The series read and the copy's write are two
        steps: a series cancelled between them still fires this copy."""
        series = self._series(task_id)
        if isinstance(series, SeriesResult):
            return Copied(series)
        copy = copy_of(series, math.ceil(self._clock.now_ms()))
        scheduled = _scheduled(self._writes.inserts.call((copy, OnConflict.ERROR), timeout_s))
        return Copied(SeriesResult.TRIGGERED, (scheduled,))

    def backfill(self, task_id: str, *, from_ms: int, to_ms: int) -> Copied:
        """Fire now the occurrences a series' schedule has in ``[from_ms,
        to_ms)`` (epoch ms; ``to_ms`` not after now), at most MAX_BACKFILL
        (else ValidationError, nothing written), as one-off copies
        ``<id>:<due ms>`` in one transaction: a repeated backfill finds those
        still pending (EXISTS), and those that fired within the series' dedup
        window (ALREADY_FIRED: not written again), but writes again, to fire
        again, those that fired before that (or without a window).
        BACKFILLED, NOT_FOUND, NOT_A_SERIES."""
        from_ms = int(validate_due_ms(from_ms, "from_ms"))
        to_ms = int(validate_due_ms(to_ms, "to_ms"))
        if to_ms > self._clock.now_ms():
            raise ValidationError("to_ms", "is after now: a backfill fires past occurrences")
        series = self._series(task_id)
        if isinstance(series, SeriesResult):
            return Copied(series)
        recur = series.meta.recur
        assert recur is not None
        anchor_ms = recur.resume_ms if recur.resume_ms is not None else series.due_ms
        copies = [copy_of(series, due) for due in backfill_dues(recur, anchor_ms, from_ms, to_ms)]
        if not copies:
            return Copied(SeriesResult.BACKFILLED)
        creates = [(copy, OnConflict.ERROR) for copy in copies]
        inserted = self._writes.insert_many(creates, fired_ok=True)
        return Copied(SeriesResult.BACKFILLED, tuple(map(_copy_answer, inserted)))

    def _series(self, task_id: str) -> Task | SeriesResult:
        """The stored series ``task_id``; NOT_FOUND or NOT_A_SERIES. A series
        whose copies' ids would break the id rule raises ValidationError."""
        info = self._store.get(validate_id(task_id))
        if info is None:
            return SeriesResult.NOT_FOUND
        if info.task.meta.recur is None:
            return SeriesResult.NOT_A_SERIES
        check_copyable(task_id)
        return info.task

    # -- finding tasks ------------------------------------------------------------

    # Each of these is bounded: a read the database stops at listing_timeout_ms
    # raises TooCostly; given an ``interrupt``, a call stops when it is set
    # (raising Interrupted; a bulk cancel answers what it did instead).

    def list_tasks(
        self,
        where: TaskFilter = ANY,
        *,
        limit: int | None = None,
        cursor: str | None = None,
        interrupt: Interrupt | None = None,
    ) -> Page:
        """A page of the tasks ``where`` matches, in due order (ties by id),
        from the start or after ``cursor`` (a previous page's). ``limit``:
        1-1000, default 100. Raises :class:`ValidationError` (limit, cursor)."""
        size = page_limit(limit)
        after = None if cursor is None else decode_cursor(cursor)
        tasks = self._store.list_tasks(where, after, size, interrupt)
        return Page(tasks, next_cursor(tasks, size))

    def count(
        self,
        where: TaskFilter = ANY,
        *,
        up_to: int | None = None,
        interrupt: Interrupt | None = None,
    ) -> int:
        """How many tasks ``where`` matches: exact (a read of every match), or
        with ``up_to`` at most that many (a read of no more: a count equal to
        ``up_to`` means at least that many)."""
        return self._store.count_where(where, count_cap(up_to), interrupt)

    def timeline(
        self,
        where: TaskFilter = ANY,
        *,
        bucket_ms: int = 60_000,
        buckets: int = 60,
        start_ms: int | None = None,
        interrupt: Interrupt | None = None,
    ) -> Timeline:
        """Tasks due per routing key in ``buckets`` spans of ``bucket_ms`` from
        ``start_ms`` (None: the start of the current span); at most
        MAX_TIMELINE_SPAN_MS in all, and MAX_TIMELINE_CELLS counts (else
        ValidationError, TooCostly: domain/listing.py)."""
        bucket_ms, buckets = timeline_span(bucket_ms, buckets)
        if start_ms is None:
            start_ms = int(self._clock.now_ms()) // bucket_ms * bucket_ms
        start_ms = validate_due_ms(start_ms)
        return self._store.timeline(where, start_ms, bucket_ms, buckets, interrupt)

    def cancel_where(
        self,
        where: TaskFilter,
        *,
        cursor: str | None = None,
        interrupt: Interrupt | None = None,
    ) -> BulkCancelled:
        """Cancel every task ``where`` matches (at least one of its id prefix,
        tag and routing key given), in bounded batches; each task exactly as
        :meth:`cancel` would; after ``cursor`` (where an earlier one stopped)
        if given. Blocks until done, or until ``interrupt`` stops it between
        batches: then the result's ``cursor`` says where to go on."""
        after = None if cursor is None else decode_cursor(cursor)
        return cancel_where(self._store, where, after=after, interrupt=interrupt)

    # -- non-blocking calls, for event loops --------------------------------------

    def schedule_nowait(self, spec: TaskSpec, done: Done[Scheduled]) -> Ticket:
        """Validate ``spec`` (raising :class:`ValidationError`, nothing queued)
        and queue it for the next group commit; ``done`` is called on a writer
        thread once it committed or failed, unless the returned ticket abandons
        it first. Raises (nothing queued) :class:`NotRunningError` unless the
        engine is running, and :class:`Overloaded` when too many calls wait."""
        create = self._create(spec, self._clock.now_ms())

        def finish(inserted: Inserted | None, error: TriggerHookError | None) -> None:
            if error is not None or inserted is None:
                done(None, error)
                return
            try:
                result = _scheduled(inserted)
            except ConflictError as exc:
                done(None, exc)
                return
            done(result, None)

        return self._writes.inserts.call_nowait(create, finish)

    def reschedule_nowait(
        self,
        task_id: str,
        done: Done[Moved],
        *,
        at: Due | None = None,
        at_ms: int | None = None,
        delay_ms: int | None = None,
    ) -> Ticket:
        """Like :meth:`reschedule`, without blocking; see :meth:`schedule_nowait`."""
        return self._writes.moves.call_nowait(self._move(task_id, at, at_ms, delay_ms), done)

    def cancel_nowait(self, task_id: str, done: Done[CancelResult]) -> Ticket:
        """Like :meth:`cancel`, without blocking; see :meth:`schedule_nowait`."""
        return self._writes.cancels.call_nowait(validate_id(task_id), done)

    def _move(
        self, task_id: str, at: Due | None, at_ms: int | None, delay_ms: int | None
    ) -> tuple[str, int]:
        validate_id(task_id)
        return task_id, due_from(at, at_ms, delay_ms, self._clock.now_ms())

    # -- what the interfaces show ----------------------------------------------------

    def health(self) -> Health:
        engine = self._engine
        return Health(
            running=engine.running,
            alive=engine.alive(),
            failure=engine.failure,
            publisher_connected=engine.publisher.is_connected(),
            clock_bounded=self._clock_bounded(),
            store_refusal=engine.write_refusal(),
        )

    def _clock_bounded(self) -> bool:
        try:
            return self._clock.bounded()
        except TransientError:  # never read yet, and the database is down
            return False

    def responsive(self, max_silence_s: float) -> bool:
        """Alive, and no engine thread, nor the database clock's sampler,
        without progress for ``max_silence_s`` (not wedged; see
        :meth:`Engine.responsive`)."""
        sync, now_s = self._clock_sync, time.monotonic()
        if sync is not None and (not sync.is_alive() or sync.stalled(now_s, max_silence_s)):
            log.error("no progress for over %.0f s: %s", max_silence_s, sync.name)
            return False
        return self._engine.responsive(max_silence_s)

    def figures(self) -> Figures:
        collector = self.metrics.collector if self.metrics is not None else None
        latest = collector.latest if collector is not None else {}
        histograms = collector.histograms if collector is not None else {}
        counters = self._engine.counters()
        return Figures(self.instance_id, self._engine.running, counters, latest, histograms)

    def observe_http(self, stats: RequestStats) -> None:
        """Report the HTTP API's answers with the metrics (call after :meth:`start`)."""
        if self.metrics is not None:
            self.metrics.collector.http = stats

    # -- lifecycle ------------------------------------------------------------

    def check_store(self) -> None:
        """Raise unless the database is reachable and its schema is current."""
        self._store.check_schema()

    def start(self) -> None:
        """Start firing tasks (the engine threads) and collecting metrics."""
        self._store.check_schema()
        if self._database:
            log.info("database: %s", self._database)
        self._clock.now_ms()  # the first read of a database clock, before any thread fires by it
        if self._clock_sync is not None:
            self._clock_sync.start()
        try:
            self._engine.start()
        except BaseException:  # e.g. the instance name is in use: leave nothing running
            if self._clock_sync is not None:
                self._clock_sync.stop()
            raise
        if self._engine.config.fires:  # an API process's figures go to the firing one's
            self.metrics = self._new_metrics()
            self.metrics.start()

    def stop(self, timeout_s: float | None = None) -> bool:
        """Graceful stop; True when everything due was published and confirmed."""
        clean = self._engine.stop(timeout_s)
        if self.metrics is not None:  # last: its final point shows the drained engine
            self.metrics.stop()
            self.metrics.join(self.metrics.join_timeout_s)
            self.metrics = None
        if self._clock_sync is not None:  # after the engine, which fires by it
            self._clock_sync.stop()
            self._clock_sync.join(1.0)
        return clean

    def close(self) -> None:
        self.stop()
        self._store.close()

    def __enter__(self) -> TriggerHook:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()
