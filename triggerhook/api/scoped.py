"""The library as one caller's token may use it (docs/design/shared-service.md,
section 1): the one place the interfaces' calls meet the namespace rules.

:class:`ScopedHook` has the library's calls the interfaces make, each
checked by the caller's :class:`~triggerhook.domain.namespaces.Principal`
before it runs: a refusal raises :class:`~triggerhook.errors.Forbidden` and
nothing is written or read. A token of every namespace (``api_token``, or
no authentication) passes every check and gets the library's answers as
they are.

A create in a namespace gets, when it names no id, one made in the
namespace (its prefix and a UUID); its routing key (the default one when it
names none) must be one the namespace publishes to, so the task is resolved
(validated) before the check, and again by the library as it is written.
Listing, counting, the timeline and bulk cancel see the namespace's ids
only: their filter's id prefix is narrowed to it.

A namespace's creates are held to its quotas (:mod:`triggerhook.domain.quotas`):
each task's payload as it is checked, then the creates a second and the
pending tasks, all of a batch at once, through the process's
:class:`~triggerhook.api.quotas.QuotaKeeper`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from triggerhook.api.quotas import QuotaKeeper
from triggerhook.app import Copied, Figures, Scheduled, Ticket, TriggerHook
from triggerhook.domain.listing import BulkCancelled, Page, TaskFilter, Timeline
from triggerhook.domain.namespaces import ADMIN, READ, WRITE, Principal
from triggerhook.domain.spec import Due, TaskSpec
from triggerhook.domain.task import (
    ID_PATTERN,
    CancelResult,
    SeriesResult,
    Task,
    TaskInfo,
    new_task_id,
)
from triggerhook.engine.groupcommit import Done
from triggerhook.errors import Forbidden
from triggerhook.interfaces import Moved
from triggerhook.runtime.interrupt import Interrupt


class ScopedHook:
    """``hook`` for ``principal``; made per request. ``quotas``: the
    process's (None: no quota is kept)."""

    __slots__ = ("_hook", "_quotas", "principal")

    def __init__(
        self, hook: TriggerHook, principal: Principal, quotas: QuotaKeeper | None = None
    ) -> None:
        self._hook = hook
        self.principal = principal
        self._quotas = quotas

    # -- creates -----------------------------------------------------------------

    def _in_scope(self, spec: TaskSpec, field: str = "") -> TaskSpec:
        """``spec`` checked for this caller (an id made in its namespace if it
        names none); Forbidden names the rule (and ``field``, in a batch), a
        payload over the namespace's quota is invalid."""
        who = self.principal
        space = who.namespace
        if space is None:
            who.need(WRITE)
            return spec
        if spec.id is None:
            spec = replace(spec, id=who.id_prefix + new_task_id())
        task = self._hook.resolve(spec)
        try:
            who.check_create(task.id, task.routing_key)
        except Forbidden as exc:
            raise (Forbidden(f"{field}: {exc}") if field else exc) from None
        where = f"{field}.payload" if field else "payload"
        space.quota.check_payload(space.name, len(task.payload), where)
        return spec

    def _admit(self, creates: int) -> None:
        """The namespace's creates a second and pending tasks: OverQuota, or
        ValidationError for a batch no wait lets through."""
        space = self.principal.namespace
        if space is not None and self._quotas is not None:
            self._quotas.admit(space, creates)

    def id_of_message(self, message_id: str | None) -> str | None:
        """The task id a create without one takes from its AMQP ``message_id``
        (so that a redelivery is applied once): the message id, in a namespace
        with its prefix unless it starts with it; None: no valid id so made."""
        if not message_id:
            return None
        prefix = self.principal.id_prefix
        named = message_id if message_id.startswith(prefix) else prefix + message_id
        return named if ID_PATTERN.fullmatch(named) else None

    def schedule_nowait(self, spec: TaskSpec, done: Done[Scheduled]) -> Ticket:
        checked = self._in_scope(spec)
        self._admit(1)
        return self._hook.schedule_nowait(checked, done)

    def schedule(self, spec: TaskSpec, timeout_s: float = 30.0) -> Scheduled:
        checked = self._in_scope(spec)
        self._admit(1)
        return self._hook.schedule(checked, timeout_s)

    def resolve(self, spec: TaskSpec) -> Task:
        """What :meth:`schedule` would store (nothing written, nothing checked)."""
        return self._hook.resolve(spec)

    def schedule_many(self, specs: Sequence[TaskSpec]) -> list[Scheduled]:
        """Every task checked before any is written: one out of scope refuses all."""
        checked = [self._in_scope(spec, f"tasks[{i}]") for i, spec in enumerate(specs)]
        self._admit(len(checked))
        return self._hook.schedule_many(checked)

    # -- by id -------------------------------------------------------------------

    def get(self, task_id: str) -> TaskInfo | None:
        self.principal.check_id(task_id, READ)
        return self._hook.get(task_id)

    def reschedule_nowait(
        self,
        task_id: str,
        done: Done[Moved],
        *,
        at: Due | None = None,
        at_ms: int | None = None,
        delay_ms: int | None = None,
    ) -> Ticket:
        self.principal.check_id(task_id, WRITE)
        return self._hook.reschedule_nowait(task_id, done, at=at, at_ms=at_ms, delay_ms=delay_ms)

    def reschedule(
        self, task_id: str, *, at_ms: int | None = None, delay_ms: int | None = None
    ) -> Moved:
        self.principal.check_id(task_id, WRITE)
        return self._hook.reschedule(task_id, at_ms=at_ms, delay_ms=delay_ms)

    def cancel_nowait(self, task_id: str, done: Done[CancelResult]) -> Ticket:
        self.principal.check_id(task_id, WRITE)
        return self._hook.cancel_nowait(task_id, done)

    def cancel(self, task_id: str, timeout_s: float = 30.0) -> CancelResult:
        self.principal.check_id(task_id, WRITE)
        return self._hook.cancel(task_id, timeout_s)

    def pause(self, task_id: str) -> SeriesResult:
        self.principal.check_id(task_id, WRITE)
        return self._hook.pause(task_id)

    def resume(self, task_id: str) -> SeriesResult:
        self.principal.check_id(task_id, WRITE)
        return self._hook.resume(task_id)

    def trigger(self, task_id: str) -> Copied:
        self.principal.check_id(task_id, WRITE)  # its copy's id starts with the series'
        return self._hook.trigger(task_id)

    def backfill(self, task_id: str, *, from_ms: int, to_ms: int) -> Copied:
        self.principal.check_id(task_id, WRITE)
        return self._hook.backfill(task_id, from_ms=from_ms, to_ms=to_ms)

    # -- many tasks ------------------------------------------------------------------

    def _within(self, where: TaskFilter) -> TaskFilter:
        narrowed = self.principal.narrow(where.prefix)
        return where if narrowed == where.prefix else replace(where, prefix=narrowed)

    def list_tasks(
        self,
        where: TaskFilter,
        *,
        limit: int | None = None,
        cursor: str | None = None,
        interrupt: Interrupt | None = None,
    ) -> Page:
        self.principal.need(READ)
        return self._hook.list_tasks(
            self._within(where), limit=limit, cursor=cursor, interrupt=interrupt
        )

    def count(
        self, where: TaskFilter, *, up_to: int | None = None, interrupt: Interrupt | None = None
    ) -> int:
        self.principal.need(READ)
        return self._hook.count(self._within(where), up_to=up_to, interrupt=interrupt)

    def timeline(
        self,
        where: TaskFilter,
        *,
        bucket_ms: int,
        buckets: int,
        start_ms: int | None = None,
        interrupt: Interrupt | None = None,
    ) -> Timeline:
        self.principal.need(READ)
        return self._hook.timeline(
            self._within(where),
            bucket_ms=bucket_ms,
            buckets=buckets,
            start_ms=start_ms,
            interrupt=interrupt,
        )

    def cancel_where(
        self, where: TaskFilter, *, cursor: str | None = None, interrupt: Interrupt | None = None
    ) -> BulkCancelled:
        self.principal.need(ADMIN)
        return self._hook.cancel_where(self._within(where), cursor=cursor, interrupt=interrupt)

    # -- the daemon ------------------------------------------------------------------

    def figures(self) -> Figures:
        self.principal.need(READ)
        return self._hook.figures()
