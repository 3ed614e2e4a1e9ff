"""The oracle: what the engine promised, judged from the store's effects and
the events that reached the broker — never a copy of the engine's logic.

It sees (1) every write that took effect, as the table looked before and
after it (:meth:`Oracle.wrote`), whatever the caller was then told (a lost
answer is still an effect); (2) every event that reached a queue, with the
database's true time of its publish (:meth:`Oracle.delivered`), and every
confirm. From those it checks, as each happens and at the end, the
invariants of ``docs/design/ownership.md``:

* **never early** (I5): an event is published at or after its due time by
  the database's clock, and its ``x-fired-ms`` is not after it either;
* **every change explained** (I2, and I1's premise): a row appears only by a
  CREATED insert, changes revision only by a RESCHEDULED move, a REPLACED
  insert (R6r), a DEFERRED write-back or a series' advance, and leaves only
  by a CANCELLED cancel or a delete/advance of a revision whose event the
  broker confirmed; an insert answered otherwise (EXISTS, KEPT, CONFLICT,
  TOO_LATE) changes nothing;
* **a cancelled task never fires** (I1): a one-shot incarnation whose cancel
  took effect has no event at all; a series' only its occurrences published
  before the cancel, and after it only duplicates of those (I1s); no event of
  a revision after a reschedule, a replace or a write-back replaced it;
* **the content written** is the content published: an event carries the
  payload its revision was created or replaced with (R6r);
* **a series** steps forward: each occurrence due after the one before it and
  after the time it was asked to start; the store's advance writes a later
  time, one occurrence up;
* **one owner per shard per epoch** (I3);
* **nothing lost** (I4, at the end): after the faults stop, every task fires
  within ``bound_ms`` of its due time (or of the faults' end), and no row is
  left in the store whose time is more than ``bound_ms`` past.

A violation is a string; the world stops at the first and prints its trace.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from sim.broker import Published
from triggerhook.domain.task import CancelResult, InsertOutcome, RescheduleResult, Task
from triggerhook.interfaces import Acquired, DeferOutcome, Deferral, Inserted, Move, NewRow


@dataclass(frozen=True, slots=True)
class RowView:
    """What the oracle reads of a stored row."""

    rev: int
    due_ms: int
    fire_ms: int
    occurrence: int | None  # a series' occurrence number; None: one-shot
    stopped: bool = False
    every_ms: int | None = None  # a series' schedule, as far as the oracle checks it
    until_ms: int | None = None


Table = Mapping[str, RowView]


@dataclass(slots=True)
class Life:
    """One revision of a task, from the write that made it to the one that ended it."""

    due_ms: int
    series: bool
    born_ms: float
    payload: bytes | None  # as created or replaced (kept by moves); None: not known
    died_ms: float | None = None
    died_by: str | None = None  # cancel, reschedule, defer, delete, advance
    published_ms: list[float] = field(default_factory=list)


class Violation(AssertionError):
    """A promise broken: the message says which and how."""


class Oracle:
    def __init__(self, now_ms: Callable[[], float], bound_ms: int) -> None:
        self._now_ms = now_ms
        self.bound_ms = bound_ms
        self.lives: dict[tuple[str, int], Life] = {}
        self.confirmed: set[tuple[str, int]] = set()
        self.occurrences: dict[str, dict[int, int]] = {}  # series id -> occurrence -> due
        self.asked_ms: dict[str, int] = {}  # series id -> the start it was asked for
        self._asking: dict[str, int | None] = {}  # id -> the start its last create asked
        # (series id, occurrence) a client moved: its time is the client's, not the schedule's
        self.moved: set[tuple[str, int]] = set()
        self.epochs: dict[tuple[int, int], str] = {}  # (shard, epoch) -> owner
        self.faults_end_ms: float | None = None
        self.delivered_count = 0
        self.first_lateness_ms: list[float] = []  # after the faults: publish - due, first events

    # -- what the clients asked -------------------------------------------------------

    def asked(self, task: Task, start_ms: int | None) -> None:
        """A create about to be tried; a series to start no earlier than
        ``start_ms`` (None: not checked), from when its incarnation is written."""
        self._asking[task.id] = start_ms if task.meta.recur is not None else None

    # -- the store's effects --------------------------------------------------------------

    def wrote(
        self,
        name: str,
        args: tuple[object, ...],
        result: object,
        before: Table,
        after: Table,
    ) -> None:
        appeared = sorted(after.keys() - before.keys())
        vanished = sorted(before.keys() - after.keys())
        changed = sorted(t for t in before.keys() & after.keys() if before[t] != after[t])
        explain = _EXPLAIN.get(name)
        if explain is None:
            if appeared or vanished or changed:
                raise Violation(
                    f"{name} changed rows it must not touch: appeared {appeared},"
                    f" vanished {vanished}, changed {changed}"
                )
            return
        explain(self, args, result, before, after, (appeared, vanished, changed))

    def _born(self, task_id: str, row: RowView, payload: bytes | None = None) -> None:
        self.lives[(task_id, row.rev)] = Life(
            row.due_ms, row.occurrence is not None, self._now_ms(), payload
        )

    def _moved(self, task_id: str, old: RowView, new: RowView, how: str) -> None:
        """A revision replaced by the next of the same content (a move, a
        write-back, a series' advance)."""
        life = self.lives.get((task_id, old.rev))
        self._died(task_id, old, how)
        self._born(task_id, new, None if life is None else life.payload)

    def _created(self, task_id: str, new: RowView, payload: bytes) -> None:
        """A new incarnation of the id (R6; R6r in another's place): a series
        starts over, from the start its create asked for."""
        self._born(task_id, new, payload)
        self.occurrences.pop(task_id, None)
        self.moved = {key for key in self.moved if key[0] != task_id}
        start_ms = self._asking.pop(task_id, None)
        if start_ms is None:
            self.asked_ms.pop(task_id, None)
        else:
            self.asked_ms[task_id] = start_ms

    def _died(self, task_id: str, row: RowView, how: str) -> None:
        life = self.lives.get((task_id, row.rev))
        if life is None:
            raise Violation(f"{task_id} rev {row.rev} {how}: a revision never written")
        life.died_ms, life.died_by = self._now_ms(), how

    def acquired(self, instance: str, acquired: Sequence[Acquired]) -> None:
        for one in acquired:
            key = (one.lease.shard, one.lease.epoch)
            holder = self.epochs.setdefault(key, instance)
            if holder != instance:
                raise Violation(f"shard {key[0]} epoch {key[1]} given to {holder} and {instance}")

    # -- the broker ---------------------------------------------------------------------------

    def delivered(self, event: Published) -> None:
        task = event.task
        key = (task.id, task.rev)
        self.delivered_count += 1
        if event.db_ms < task.due_ms:
            raise Violation(
                f"{task.id} published {task.due_ms - event.db_ms:.3f} ms early by the"
                f" database's clock (due {task.due_ms}, published at {event.db_ms:.3f},"
                f" by {event.instance})"
            )
        if event.fired_ms < task.due_ms or event.fired_ms > event.db_ms:
            raise Violation(
                f"{task.id}: x-fired-ms {event.fired_ms} outside [due {task.due_ms},"
                f" true time {event.db_ms:.3f}]"
            )
        life = self.lives.get(key)
        if life is None:
            raise Violation(f"{task.id} rev {task.rev} published: a revision never written")
        if life.due_ms != task.due_ms:
            raise Violation(
                f"{task.id} rev {task.rev} published due {task.due_ms}, stored {life.due_ms}"
            )
        if life.payload is not None and task.payload != life.payload:
            raise Violation(
                f"{task.id} rev {task.rev} published payload {task.payload!r}, written with"
                f" {life.payload!r}"
            )
        self._after_death(task, life, event)
        if task.meta.recur is not None:
            self._occurrence(task)
        if not life.published_ms and self.faults_end_ms is not None:
            self.first_lateness_ms.append(event.db_ms - max(task.due_ms, self.faults_end_ms))
        life.published_ms.append(event.db_ms)

    def _after_death(self, task: Task, life: Life, event: Published) -> None:
        """I1/I1s: an event of a revision whose life ended by a cancel, a move
        or a write-back."""
        if life.died_by not in ("cancel", "reschedule", "replace", "defer") or life.died_ms is None:
            return
        earlier = [p for p in life.published_ms if p <= life.died_ms]
        if life.died_by == "cancel" and not life.series:
            raise Violation(
                f"{task.id} rev {task.rev} published at {event.db_ms:.3f} by {event.instance}:"
                f" its cancel answered CANCELLED at {life.died_ms:.3f}"
            )
        if event.db_ms > life.died_ms and not (life.died_by == "cancel" and earlier):
            raise Violation(
                f"{task.id} rev {task.rev} published at {event.db_ms:.3f} by {event.instance},"
                f" after its {life.died_by} at {life.died_ms:.3f}"
            )

    def _occurrence(self, task: Task) -> None:
        assert task.meta.recur is not None
        number, due = task.meta.recur.occurrence, task.due_ms
        seen = self.occurrences.setdefault(task.id, {})
        if (task.id, number) in self.moved:  # its time is the client's
            seen[number] = due
            return
        if seen.get(number, due) != due:
            raise Violation(f"series {task.id} occurrence {number} due {due} and {seen[number]}")
        for other, other_due in seen.items():
            if (task.id, other) in self.moved:
                continue
            if (other < number and other_due >= due) or (other > number and other_due <= due):
                raise Violation(
                    f"series {task.id}: occurrence {number} due {due},"
                    f" occurrence {other} due {other_due}"
                )
        asked = self.asked_ms.get(task.id)
        if number == 1 and asked is not None and due < asked:
            raise Violation(
                f"series {task.id}: first occurrence due {due}, {asked - due} ms before the"
                f" start asked for ({asked})"
            )
        seen[number] = due

    def confirmed_event(self, event: Published) -> None:
        self.confirmed.add((event.task.id, event.task.rev))

    # -- the end ------------------------------------------------------------------------------

    def finish(self, table: Table, end_ms: float) -> None:
        """Nothing lost: no row left whose time is more than the bound past,
        and every first event after the faults within the bound."""
        for task_id, row in sorted(table.items()):
            if min(row.fire_ms, row.due_ms) <= end_ms - self.bound_ms:
                life = self.lives.get((task_id, row.rev))
                published = life.published_ms if life else []
                raise Violation(
                    f"{task_id} rev {row.rev} still stored {end_ms - row.fire_ms:.0f} ms after"
                    f" its fire time (due {row.due_ms}, fire {row.fire_ms}, published at"
                    f" {published}): stranded"
                )
        late = [ms for ms in self.first_lateness_ms if ms > self.bound_ms]
        if late:
            raise Violation(
                f"{len(late)} events fired more than {self.bound_ms} ms after their due time"
                f" (or the faults' end): worst {max(late):.0f} ms"
            )


# -- explaining each write's changes --------------------------------------------------------

Diff = tuple[list[str], list[str], list[str]]


def _nothing_else(name: str, diff: Diff, allowed: tuple[set[str], set[str], set[str]]) -> None:
    for kind, ids, ok in zip(("appeared", "vanished", "changed"), diff, allowed, strict=True):
        wrong = [t for t in ids if t not in ok]
        if wrong:
            raise Violation(f"{name}: rows {kind} without cause: {wrong}")


def _insert(
    o: Oracle, args: tuple[object, ...], result: object, b: Table, a: Table, d: Diff
) -> None:
    rows: Sequence[NewRow] = args[0]  # type: ignore[assignment]
    answers: Sequence[Inserted] = result  # type: ignore[assignment]
    last: dict[str, tuple[NewRow, InsertOutcome]] = {}  # per id: the last row that wrote
    for row, answer in zip(rows, answers, strict=True):
        if answer.outcome in (InsertOutcome.CREATED, InsertOutcome.REPLACED):
            last[row.task.id] = (row, answer.outcome)
    # A row the batch created and then replaced appears once, as the last one.
    appeared = {t for t in last if t not in b}
    _nothing_else("insert", d, (appeared, set(), set(last) - appeared))
    for task_id, (row, outcome) in sorted(last.items()):
        new = a.get(task_id)
        if new is None or new.rev != row.rev or new.due_ms != row.task.due_ms:
            raise Violation(f"insert answered {outcome} for {task_id} but wrote {new}")
        if task_id in appeared:
            o._created(task_id, new, row.task.payload)
        elif outcome is InsertOutcome.REPLACED:
            o._died(task_id, b[task_id], "replace")
            o._created(task_id, new, row.task.payload)
        else:
            raise Violation(
                f"insert answered CREATED for {task_id}, which was stored: {b[task_id]}"
            )


def _cancel(
    o: Oracle, args: tuple[object, ...], result: object, b: Table, a: Table, d: Diff
) -> None:
    ids: Sequence[str] = args[0]  # type: ignore[assignment]
    results: Sequence[CancelResult] = result  # type: ignore[assignment]
    cancelled = {t for t, r in zip(ids, results, strict=True) if r is CancelResult.CANCELLED}
    too_late = {t for t, r in zip(ids, results, strict=True) if r is CancelResult.TOO_LATE}
    _nothing_else("cancel", d, (set(), cancelled, too_late))
    for task_id in sorted(cancelled):
        if task_id not in d[1]:
            raise Violation(f"cancel answered CANCELLED for {task_id}, which is still stored")
        o._died(task_id, b[task_id], "cancel")
    for task_id in d[2]:  # a series too late to cancel: only its stop mark changes
        old, new = b[task_id], a[task_id]
        if (old.rev, old.due_ms, old.fire_ms) != (
            new.rev,
            new.due_ms,
            new.fire_ms,
        ) or not new.stopped:
            raise Violation(f"cancel (too late) changed {task_id} from {old} to {new}")


def _reschedule(
    o: Oracle, args: tuple[object, ...], result: object, b: Table, a: Table, d: Diff
) -> None:
    moves: Sequence[Move] = args[0]  # type: ignore[assignment]
    outcomes = list(result)  # type: ignore[call-overload]
    last = {m.task_id: m for m in moves}
    moved = {
        m.task_id
        for m, out in zip(moves, outcomes, strict=True)
        if out.result is RescheduleResult.RESCHEDULED
    }
    _nothing_else("reschedule", d, (set(), set(), moved))
    for task_id in sorted(moved):
        move, new = last[task_id], a.get(task_id)
        if new is None or new.rev != move.rev or new.due_ms != move.due_ms:
            raise Violation(f"reschedule answered RESCHEDULED for {task_id} but it is {new}")
        o._moved(task_id, b[task_id], new, "reschedule")
        if new.occurrence is not None:
            o.moved.add((task_id, new.occurrence))


def _defer(
    o: Oracle, args: tuple[object, ...], result: object, b: Table, a: Table, d: Diff
) -> None:
    deferrals: Sequence[Deferral] = args[1]  # type: ignore[assignment]
    outcomes: Sequence[DeferOutcome] = result  # type: ignore[assignment]
    deferred = {
        x.task.id: x
        for x, out in zip(deferrals, outcomes, strict=True)
        if out is DeferOutcome.DEFERRED
    }
    _nothing_else("defer", d, (set(), set(), set(deferred)))
    for task_id, x in sorted(deferred.items()):
        old, new = b.get(task_id), a.get(task_id)
        if old is None or new is None or old.rev != x.task.rev or new.rev != x.new_rev:
            raise Violation(f"defer answered DEFERRED for {task_id}: {old} -> {new}")
        if new.fire_ms != x.not_before_ms:
            raise Violation(f"defer of {task_id} wrote fire {new.fire_ms}, asked {x.not_before_ms}")
        o._moved(task_id, old, new, "defer")


def _delete(
    o: Oracle, args: tuple[object, ...], result: object, b: Table, a: Table, d: Diff
) -> None:
    fired: Sequence[tuple[str, int]] = args[0]  # type: ignore[assignment]
    asked = {(t, r) for t, r in fired}
    _nothing_else("delete_fired", d, (set(), {t for t, _ in asked}, set()))
    for task_id in d[1]:
        key = (task_id, b[task_id].rev)
        if key not in asked:
            raise Violation(f"delete_fired removed {task_id} rev {key[1]}, not asked for")
        if key not in o.confirmed:
            raise Violation(f"{task_id} rev {key[1]} deleted, but no event of it was confirmed")
        o._died(task_id, b[task_id], "delete")


def _advance(
    o: Oracle, args: tuple[object, ...], result: object, b: Table, a: Table, d: Diff
) -> None:
    fired: Sequence[Task] = args[0]  # type: ignore[assignment]
    asked = {(t.id, t.rev) for t in fired}
    ids = {t for t, _ in asked}
    _nothing_else("advance", d, (set(), ids, ids))
    for task_id in d[1] + d[2]:
        old, new = b[task_id], a.get(task_id)
        key = (task_id, old.rev)
        if key not in asked or key not in o.confirmed:
            raise Violation(f"series {task_id} rev {old.rev} advanced without a confirmed event")
        if new is None:
            o._died(task_id, old, "advance")
            _ended(task_id, old, args[1])  # type: ignore[arg-type]
            continue
        if new.occurrence != (old.occurrence or 0) + 1 or new.due_ms <= old.due_ms:
            raise Violation(
                f"series {task_id} advanced from occurrence {old.occurrence} due {old.due_ms}"
                f" to occurrence {new.occurrence} due {new.due_ms}"
            )
        o._moved(task_id, old, new, "advance")


def _ended(task_id: str, old: RowView, now_ms: float) -> None:
    """A series' row left at an advance: it must have ended — stopped by a
    cancel, or its next occurrence (the first after both the one fired and
    now) past ``until``. A cron series is judged by its stop or an until only."""
    if old.stopped:
        return
    if old.until_ms is None:
        raise Violation(f"series {task_id} (no until, not stopped) deleted at an advance")
    if old.every_ms is not None:
        after = max(old.due_ms, math.floor(now_ms))
        upcoming = old.due_ms + ((after - old.due_ms) // old.every_ms + 1) * old.every_ms
        if upcoming <= old.until_ms:
            raise Violation(
                f"series {task_id} deleted at an advance, though its next occurrence"
                f" ({upcoming}) is before its until ({old.until_ms})"
            )


_EXPLAIN: dict[str, Callable[[Oracle, tuple[object, ...], object, Table, Table, Diff], None]] = {
    "insert": _insert,
    "cancel": _cancel,
    "reschedule": _reschedule,
    "defer": _defer,
    "delete_fired": _delete,
    "advance": _advance,
}
