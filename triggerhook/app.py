"""The library API: :class:`TriggerHook`."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from triggerhook.domain.task import CancelResult, Task, TaskInfo, make_task, validate_id
from triggerhook.domain.timeparse import due_from
from triggerhook.engine.engine import Engine, PublisherFactory
from triggerhook.engine.groupcommit import Done, GroupCommitter, Item, Result, Ticket
from triggerhook.errors import (
    ConflictError,
    NotRunningError,
    Overloaded,
    TriggerHookError,
    ValidationError,
)
from triggerhook.interfaces import (
    Clock,
    InsertOutcome,
    MetricsSink,
    Move,
    Moved,
    NewRow,
    TaskStore,
)
from triggerhook.logs import redact
from triggerhook.metrics.collector import Collector
from triggerhook.metrics.reporter import MetricsReporter
from triggerhook.runtime.counters import RequestStats
from triggerhook.runtime.points import Field
from triggerhook.settings import Settings

log = logging.getLogger(__name__)

Due = datetime | int | float | str


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """What a caller asks for. Exactly one of ``at``, ``at_ms`` and ``delay_ms``.

    ``at``: a datetime (naive = UTC), epoch seconds, or an ISO-8601 string.
    """

    id: str | None = None
    at: Due | None = None
    at_ms: int | None = None
    delay_ms: int | None = None
    routing_key: str | None = None
    payload: bytes | str | None = None


@dataclass(frozen=True, slots=True)
class Scheduled:
    task: Task
    created: bool  # False: the same task existed already (a safe retry)


def _scheduled(task: Task, outcome: InsertOutcome) -> Scheduled:
    if outcome is InsertOutcome.CONFLICT:
        raise ConflictError(task.id)
    return Scheduled(task, outcome is InsertOutcome.CREATED)


class TriggerHook:
    """Schedule, cancel and look up tasks; with :meth:`start`, also fire them.

    Without ``start()`` the object is a client of the database only (tasks are
    fired by whichever engine instance runs). All methods are thread-safe.
    """

    def __init__(
        self,
        settings: Settings,
        store: TaskStore,
        clock: Clock,
        publisher_factory: PublisherFactory,
        metrics_sink: MetricsSink | None = None,
    ) -> None:
        self.settings = settings
        self.instance_id = settings.resolved_instance_id()
        self._store = store
        self._clock = clock
        self._metrics_sink = metrics_sink
        self.metrics: MetricsReporter | None = None  # while started
        self._engine = Engine(
            settings,
            store,
            clock,
            self.instance_id,
            publisher_factory,
            self._write_batch,
            self._write_moves,
        )

    @property
    def engine(self) -> Engine:
        return self._engine

    # -- scheduling -----------------------------------------------------------

    def task_from(self, spec: TaskSpec, now_ms: float | None = None, field: str = "") -> Task:
        """Validate a spec into a task; errors name ``field``-prefixed fields."""
        try:
            now = self._clock.now_ms() if now_ms is None else now_ms
            due_ms = due_from(spec.at, spec.at_ms, spec.delay_ms, now)
            return make_task(
                task_id=spec.id,
                due_ms=due_ms,
                routing_key=(
                    self.settings.default_routing_key
                    if spec.routing_key is None
                    else spec.routing_key
                ),
                payload=spec.payload,
                max_payload_bytes=self.settings.max_payload_bytes,
            )
        except ValidationError as exc:
            if not field:
                raise
            raise ValidationError(f"{field}.{exc.field}", exc.message) from None

    def schedule(
        self,
        id: str | None = None,
        *,
        at: Due | None = None,
        at_ms: int | None = None,
        delay_ms: int | None = None,
        routing_key: str | None = None,
        payload: bytes | str | None = None,
        timeout_s: float = 30.0,
    ) -> Scheduled:
        """Store one task; returns once its row is committed.

        Raises :class:`ValidationError` (bad input, nothing written),
        :class:`ConflictError` (same id, other content), or a
        :class:`~triggerhook.errors.TransientError` (retry: it is idempotent):
        ``StoreUnavailable``, or ``Overloaded`` when too many calls wait.
        """
        task = self.task_from(TaskSpec(id, at, at_ms, delay_ms, routing_key, payload))
        outcome = None
        if self._engine.running:
            rows = self._engine.plan([task], self._clock.now_ms())
            try:
                outcome = self._engine.committer.submit(rows[0], timeout_s)
            except NotRunningError:  # stopping: refused before queuing
                self._engine.unplan(rows)
            except Overloaded:  # refused before queuing; not going around the bound
                self._engine.unplan(rows)
                raise
        if outcome is None:
            outcome = self._write_batch([NewRow(task)])[0]
        return _scheduled(task, outcome)

    # -- non-blocking calls, for event loops --------------------------------------

    def schedule_nowait(self, task: Task, done: Done[Scheduled]) -> Ticket:
        """Queue a validated task (see :meth:`task_from`) for the next group
        commit; ``done`` is called on a writer thread once it committed or
        failed, unless the returned ticket abandons it first. Raises (nothing queued)
        :class:`NotRunningError` unless the engine is running, and
        :class:`Overloaded` when too many calls wait."""
        rows = self._engine.plan([task], self._clock.now_ms())

        def finish(outcome: InsertOutcome | None, error: TriggerHookError | None) -> None:
            if error is not None or outcome is None:
                done(None, error)
                return
            try:
                result = _scheduled(task, outcome)
            except ConflictError as exc:
                done(None, exc)
                return
            done(result, None)

        return self._enqueue(self._engine.committer, rows[0], finish, rows)

    def cancel_nowait(self, task_id: str, done: Done[CancelResult]) -> Ticket:
        """Like :meth:`cancel`, without blocking; see :meth:`schedule_nowait`."""
        return self._enqueue(self._engine.canceller, validate_id(task_id), done)

    def reschedule_nowait(
        self,
        task_id: str,
        done: Done[Moved],
        *,
        at_ms: int | None = None,
        delay_ms: int | None = None,
    ) -> Ticket:
        """Like :meth:`reschedule`, without blocking; see :meth:`schedule_nowait`."""
        moves = self._plan_move(task_id, None, at_ms, delay_ms)
        return self._enqueue(self._engine.rescheduler, moves[0], done, moves)

    def _enqueue(
        self,
        committer: GroupCommitter[Item, Result],
        item: Item,
        done: Done[Result],
        planned: Sequence[NewRow | Move] = (),
    ) -> Ticket:
        """Queue ``item``; if refused, give back the room ``planned`` reserved
        (an abandoned call's room is given back by the committer's ``discard``)."""
        try:
            if not self._engine.running:
                raise NotRunningError("the engine is not running")
            return committer.enqueue(item, done)
        except (NotRunningError, Overloaded):
            self._engine.unplan(planned)
            raise

    def schedule_many(self, specs: Iterable[TaskSpec]) -> list[Scheduled]:
        """Store many tasks in one transaction: all of them or, on any error, none.

        A validation error names the index: ``tasks[3].routing_key``.
        """
        now_ms = self._clock.now_ms()
        tasks = [self.task_from(s, now_ms, f"tasks[{i}]") for i, s in enumerate(specs)]
        if not tasks:
            return []
        rows = self._engine.plan(tasks, now_ms)
        outcomes = self._insert(rows, atomic=True)
        return [
            Scheduled(row.task, outcome is InsertOutcome.CREATED)
            for row, outcome in zip(rows, outcomes, strict=True)
        ]

    def _write_batch(self, rows: Sequence[NewRow]) -> list[InsertOutcome]:
        return self._insert(rows, atomic=False)

    def _insert(self, rows: Sequence[NewRow], atomic: bool) -> list[InsertOutcome]:
        lease_until_ms = int(self._clock.now_ms()) + self.settings.claim_lease_ms
        try:
            outcomes = self._store.insert(rows, self.instance_id, lease_until_ms, atomic)
        except BaseException:
            self._engine.unplan(rows)
            raise
        self._engine.adopt(rows, outcomes)
        return outcomes

    def reschedule(
        self,
        task_id: str,
        *,
        at: Due | None = None,
        at_ms: int | None = None,
        delay_ms: int | None = None,
        timeout_s: float = 30.0,
    ) -> Moved:
        """Move a task that has not started firing to a new due time.

        RESCHEDULED (``task`` as now stored: it fires at the new time and never
        at the old one), NOT_FOUND, or TOO_LATE (being published at its old time).
        """
        moves = self._plan_move(task_id, at, at_ms, delay_ms)
        if self._engine.running:
            try:
                return self._engine.rescheduler.submit(moves[0], timeout_s)
            except NotRunningError:  # stopping: refused before queuing; go direct
                self._engine.unplan(moves)
                moves = [Move(moves[0].task_id, moves[0].due_ms)]
            except Overloaded:  # refused before queuing; not going around the bound
                self._engine.unplan(moves)
                raise
        return self._write_moves(moves)[0]

    def _plan_move(
        self, task_id: str, at: Due | None, at_ms: int | None, delay_ms: int | None
    ) -> list[Move]:
        validate_id(task_id)
        now_ms = self._clock.now_ms()
        due_ms = due_from(at, at_ms, delay_ms, now_ms)
        return self._engine.plan_moves([(task_id, due_ms)], now_ms)

    def _write_moves(self, moves: Sequence[Move]) -> list[Moved]:
        lease_until_ms = int(self._clock.now_ms()) + self.settings.claim_lease_ms
        try:
            outcomes = self._store.reschedule(moves, self.instance_id, lease_until_ms)
        except BaseException:
            self._engine.unplan(moves)
            raise
        self._engine.adopt_moves(moves, outcomes)
        return outcomes

    # -- lookups --------------------------------------------------------------

    def cancel(self, task_id: str, timeout_s: float = 30.0) -> CancelResult:
        """CANCELLED (it will never fire, whichever instance holds it), NOT_FOUND
        (unknown, or fired and deleted), or TOO_LATE (being published)."""
        validate_id(task_id)
        if self._engine.running:
            try:
                return self._engine.canceller.submit(task_id, timeout_s)
            except NotRunningError:  # stopping: refused before queuing; go direct
                pass
        return self._engine.write_cancels([task_id])[0]

    def get(self, task_id: str) -> TaskInfo | None:
        return self._store.get(validate_id(task_id))

    # -- lifecycle ------------------------------------------------------------

    def check_store(self) -> None:
        """Raise unless the database is reachable and its schema is current."""
        self._store.check_schema()

    def start(self) -> None:
        """Start firing tasks (the engine threads) and collecting metrics."""
        self._store.check_schema()
        self._engine.start()
        now_ms = int(self._clock.now_ms())
        tags = {"instance": self.instance_id, "host": socket.gethostname()}
        collector = Collector(
            self._engine, self._store, tags, self.settings.metrics_recount_s * 1000, now_ms
        )
        self.metrics = MetricsReporter(
            self._clock,
            collector,
            self._metrics_sink,
            self.settings.metrics_interval_ms,
            self.settings.metrics_buffer_points,
        )
        self.metrics.start()
        if self._metrics_sink is not None:
            log.info(
                "metrics: writing to %s every %d ms",
                redact(self.settings.metrics_url),
                self.settings.metrics_interval_ms,
            )

    def observe_http(self, stats: RequestStats) -> None:
        """Report the HTTP API's answers with the metrics (call after :meth:`start`)."""
        if self.metrics is not None:
            self.metrics.collector.http = stats

    def latest_figures(self) -> dict[str, dict[str, Field]]:
        """Measurement -> the fields of the last metrics period ({} before the first)."""
        return self.metrics.collector.latest if self.metrics is not None else {}

    def stop(self, timeout_s: float | None = None) -> bool:
        """Graceful stop; True when everything due was published and confirmed."""
        clean = self._engine.stop(timeout_s)
        if self.metrics is not None:  # last: its final point shows the drained engine
            self.metrics.stop()
            self.metrics.join(self.settings.metrics_timeout_ms / 1000 + 1.0)
            self.metrics = None
        return clean

    def close(self) -> None:
        self.stop()
        self._store.close()

    def __enter__(self) -> TriggerHook:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()
