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
  insert (R6r), a DEFERRED write-back, a series' advance, pause or resume,
  and leaves only by a CANCELLED cancel, a delete/advance of a revision
  whose event the broker confirmed or a resume answered ENDED; an insert
  answered otherwise (EXISTS, KEPT, CONFLICT, TOO_LATE) changes nothing; a
  one-off copy of a series' occurrence (``<series id>:<due ms>``) appears
  only at that series' advance or resume under catch-up ``all``, for an
  occurrence it missed;
* **a cancelled task never fires** (I1): a one-shot incarnation whose cancel
  took effect has no event at all; a series' only its occurrences published
  before the cancel, and after it only duplicates of those (I1s); no event of
  a revision after a reschedule, a replace, a write-back or a pause replaced it;
* **a paused series fires nothing** (flow-control.md section 4): a revision
  written while its series is paused with a resume point (parked) has no
  event; a pause of an armed occurrence (PAUSED_AFTER_THIS) lets that one
  fire, and its advance parks the series at the occurrence after it;
* **the content written** is the content published: an event carries the
  payload its revision was created or replaced with (R6r);
* **a series** steps forward: each occurrence due after the one before it and
  after the time it was asked to start; the store's advance writes a later
  time, one occurrence up; a resume, the occurrence it paused at, or by its
  catch-up policy the first after the resume (``skip``, ``all``);
* **a dedup window** (flow-control.md section 2): an id deleted after its
  confirm with a window leaves a record (R5d, fired at the deleting call's
  ``now_ms``); no create of the id takes effect before the record expires
  by the creating call's ``now_ms``, unless a sweep (by its own clock)
  deleted the record as expired first;
* **one owner per shard per epoch** (I3);
* **the rate limits** (flow-control.md section 3): no limited key published
  above its rate * (1 + one share) over any second (``sim.oracle_rate``, its
  bound and why);
* **nothing lost** (I4, at the end): after the faults stop, every task fires
  within ``bound_ms`` of its due time (or of the faults' end), and no row is
  left in the store whose time is more than ``bound_ms`` past. A revision
  due in the past by design (a resumed occurrence under catch-up ``one``, a
  catch-up copy) is measured from its write instead of its due time.

A violation is a string; the world stops at the first and prints its trace.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from sim.broker import Published
from sim.oracle_rate import RateCheck
from sim.oracle_series import (
    check_caught_up,
    copies_made,
    explain_pause,
    explain_resume,
    parked_at_advance,
    track_copies,
)
from sim.views import Diff, Life, RowView, Table, Violation, nothing_else
from triggerhook.domain.series import PARKED_MS
from triggerhook.domain.task import (
    CancelResult,
    InsertOutcome,
    RescheduleResult,
    Task,
)
from triggerhook.interfaces import Acquired, DeferOutcome, Deferral, Inserted, Move, NewRow

__all__ = ["Life", "Oracle", "RowView", "Table", "Violation"]


class Oracle:
    def __init__(
        self, now_ms: Callable[[], float], bound_ms: int, rate: RateCheck | None = None
    ) -> None:
        self._now_ms = now_ms
        self.bound_ms = bound_ms
        self.rate = rate  # the rate limits' check (None: no limit)
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
        self.fired_records: dict[str, tuple[int, int]] = {}  # id -> (fired_ms, expires_ms), R5d
        self.window_of: dict[str, int] = {}  # id -> its incarnation's dedup window (ms)

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
        if self.rate is not None:
            self.rate.wrote(name, args)
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

    def _born(
        self, task_id: str, row: RowView, payload: bytes | None = None, late: bool = False
    ) -> None:
        """``late``: due in the past by design, measured from now."""
        now_ms = self._now_ms()
        self.lives[(task_id, row.rev)] = Life(
            row.due_ms,
            row.occurrence is not None,
            now_ms,
            payload,
            parked=row.parked,
            since_ms=now_ms if late else None,
        )

    def _moved(
        self, task_id: str, old: RowView, new: RowView, how: str, late: bool = False
    ) -> None:
        """A revision replaced by the next of the same content (a move, a
        write-back, a series' advance, pause or resume)."""
        life = self.lives.get((task_id, old.rev))
        self._died(task_id, old, how)
        self._born(task_id, new, None if life is None else life.payload, late)
        if self.rate is not None:
            self.rate.moved(task_id, old.rev, new.rev)
        if how == "defer" and life is not None and life.since_ms is not None:
            # A write-back retries the same occurrence: late from the same write.
            self.lives[(task_id, new.rev)].since_ms = life.since_ms

    def _created(
        self, task_id: str, new: RowView, payload: bytes | None, late: bool = False
    ) -> None:
        """A new incarnation of the id (R6; R6r in another's place; a
        series' copy): a series starts over, from the start its create asked for."""
        self._born(task_id, new, payload, late)
        if self.rate is not None:
            self.rate.created(task_id, new.rev)
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

    def started(self, instance: str) -> None:
        """A process of the daemon starts as ``instance`` (a restart too)."""
        if self.rate is not None:
            self.rate.started(instance)

    def acquired(self, instance: str, acquired: Sequence[Acquired]) -> None:
        if self.rate is not None:
            self.rate.acquired(instance, acquired)
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
        life = self.lives.get(key)
        if life is not None and life.parked:  # before "early": a parked due is never reached
            raise Violation(
                f"{task.id} rev {task.rev} published at {event.db_ms:.3f} by {event.instance}:"
                f" a revision written (at {life.born_ms:.3f}) while its series was paused"
            )
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
            since_ms = max(task.due_ms, self.faults_end_ms, life.since_ms or -math.inf)
            self.first_lateness_ms.append(event.db_ms - since_ms)
        life.published_ms.append(event.db_ms)
        if self.rate is not None:
            self.rate.delivered(event)

    def _after_death(self, task: Task, life: Life, event: Published) -> None:
        """I1/I1s: an event of a revision whose life ended by a cancel, a move
        or a write-back."""
        ended = ("cancel", "reschedule", "replace", "defer", "pause", "resume")
        if life.died_by not in ended or life.died_ms is None:
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
            life = self.lives.get((task_id, row.rev))
            since_ms = -math.inf if life is None or life.since_ms is None else life.since_ms
            if max(min(row.fire_ms, row.due_ms), since_ms) <= end_ms - self.bound_ms:
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
    nothing_else("insert", d, (appeared, set(), set(last) - appeared))
    now_ms = args[2] if len(args) > 2 else None
    for task_id in sorted(appeared):
        _created_outside_window(o, task_id, now_ms)
    for task_id, (row, outcome) in sorted(last.items()):
        new = a.get(task_id)
        if new is None or new.rev != row.rev or new.due_ms != row.task.due_ms:
            raise Violation(f"insert answered {outcome} for {task_id} but wrote {new}")
        o.window_of[task_id] = row.task.meta.dedup_window_ms
        if task_id in appeared:
            o._created(task_id, new, row.task.payload)
        elif outcome is InsertOutcome.REPLACED:
            o._died(task_id, b[task_id], "replace")
            o._created(task_id, new, row.task.payload)
        else:
            raise Violation(
                f"insert answered CREATED for {task_id}, which was stored: {b[task_id]}"
            )


def _created_outside_window(o: Oracle, task_id: str, now_ms: object) -> None:
    """An id created again: not before its fired record expired (R6's check
    after its insert, against R5d's record)."""
    record = o.fired_records.get(task_id)
    if record is None:
        return
    fired_ms, expires_ms = record
    if not isinstance(now_ms, int | float) or now_ms < expires_ms:
        raise Violation(
            f"{task_id} created again at {now_ms} within its dedup window: it fired at"
            f" {fired_ms}, its record expires at {expires_ms}"
        )
    del o.fired_records[task_id]


def _cancel(
    o: Oracle, args: tuple[object, ...], result: object, b: Table, a: Table, d: Diff
) -> None:
    ids: Sequence[str] = args[0]  # type: ignore[assignment]
    results: Sequence[CancelResult] = result  # type: ignore[assignment]
    cancelled = {t for t, r in zip(ids, results, strict=True) if r is CancelResult.CANCELLED}
    too_late = {t for t, r in zip(ids, results, strict=True) if r is CancelResult.TOO_LATE}
    nothing_else("cancel", d, (set(), cancelled, too_late))
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
    nothing_else("reschedule", d, (set(), set(), moved))
    for task_id in sorted(moved):
        move, old, new = last[task_id], b[task_id], a.get(task_id)
        resume_ms: int | None
        if old.parked:  # a paused series stays parked: the move is where it resumes
            due, resume_ms = PARKED_MS, move.due_ms
        else:
            due, resume_ms = move.due_ms, old.resume_ms
        if (
            new is None
            or new.rev != move.rev
            or new.due_ms != due
            or (new.paused, new.resume_ms) != (old.paused, resume_ms)
        ):
            raise Violation(f"reschedule answered RESCHEDULED for {task_id} but it is {new}")
        o._moved(task_id, old, new, "reschedule")
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
    nothing_else("defer", d, (set(), set(), set(deferred)))
    for task_id, x in sorted(deferred.items()):
        old, new = b.get(task_id), a.get(task_id)
        if old is None or new is None or old.rev != x.task.rev or new.rev != x.new_rev:
            raise Violation(f"defer answered DEFERRED for {task_id}: {old} -> {new}")
        if new.fire_ms != x.not_before_ms:
            raise Violation(f"defer of {task_id} wrote fire {new.fire_ms}, asked {x.not_before_ms}")
        o._moved(task_id, old, new, "defer")


def _delete(
    o: Oracle,
    args: tuple[object, ...],
    result: object,
    b: Table,
    a: Table,
    d: Diff,
    recorded: bool = False,
) -> None:
    """R5 (``recorded``: R5d's delete, which writes the records)."""
    fired: Sequence[tuple[str, int]] = args[0]  # type: ignore[assignment]
    asked = {(t, r) for t, r in fired}
    nothing_else("delete_fired", d, (set(), {t for t, _ in asked}, set()))
    for task_id in d[1]:
        key = (task_id, b[task_id].rev)
        if key not in asked:
            raise Violation(f"delete_fired removed {task_id} rev {key[1]}, not asked for")
        if key not in o.confirmed:
            raise Violation(f"{task_id} rev {key[1]} deleted, but no event of it was confirmed")
        o._died(task_id, b[task_id], "delete")
        if o.window_of.pop(task_id, 0) and not recorded:
            raise Violation(
                f"{task_id} rev {key[1]} has a dedup window, deleted without its record"
            )


def _delete_recorded(
    o: Oracle, args: tuple[object, ...], result: object, b: Table, a: Table, d: Diff
) -> None:
    """R5d: R5's delete, and a record for each row deleted."""
    fired: Sequence[Task] = args[0]  # type: ignore[assignment]
    now_ms: float = args[1]  # type: ignore[assignment]
    _delete(o, ([(t.id, t.rev) for t in fired],), result, b, a, d, recorded=True)
    windows = {(t.id, t.rev): t.meta.dedup_window_ms for t in fired}
    for task_id in d[1]:
        window_ms = windows[(task_id, b[task_id].rev)]
        if window_ms:
            o.fired_records[task_id] = (int(now_ms), int(now_ms) + window_ms)


def _sweep(
    o: Oracle, args: tuple[object, ...], result: object, b: Table, a: Table, d: Diff
) -> None:
    """The records that expired by the sweeping call's clock may be gone
    (of its shards; the oracle forgets every such one: a laxer check)."""
    nothing_else("sweep_fired", d, (set(), set(), set()))
    now_ms: float = args[1]  # type: ignore[assignment]
    o.fired_records = {t: r for t, r in o.fired_records.items() if r[1] > now_ms}


def _advance(
    o: Oracle, args: tuple[object, ...], result: object, b: Table, a: Table, d: Diff
) -> None:
    fired: Sequence[Task] = args[0]  # type: ignore[assignment]
    now_ms: float = args[1]  # type: ignore[assignment]
    asked = {(t.id, t.rev) for t in fired}
    ids = {t for t, _ in asked}
    copies = copies_made(d[0], ids & {*d[1], *d[2]})
    nothing_else("advance", d, ({c for made in copies.values() for c, _ in made}, ids, ids))
    for task_id in d[1] + d[2]:
        old, new = b[task_id], a.get(task_id)
        key = (task_id, old.rev)
        if key not in asked or key not in o.confirmed:
            raise Violation(f"series {task_id} rev {old.rev} advanced without a confirmed event")
        if old.paused:  # paused while this occurrence was armed (PAUSED_AFTER_THIS)
            parked_at_advance(task_id, old, new, copies.get(task_id, []))
        else:
            # Catch-up "all": the occurrences after the one fired that now passed.
            check_caught_up("advance", task_id, old, old.due_ms + 1, now_ms, copies, a)
        if new is None:
            o._died(task_id, old, "advance")
            _ended(task_id, old, now_ms)
        else:
            if new.occurrence != (old.occurrence or 0) + 1 or new.due_ms <= old.due_ms:
                raise Violation(
                    f"series {task_id} advanced from occurrence {old.occurrence} due"
                    f" {old.due_ms} to occurrence {new.occurrence} due {new.due_ms}"
                )
            if new.paused and not old.paused:
                raise Violation(f"series {task_id} (not paused) advanced to a paused row {new}")
            o._moved(task_id, old, new, "advance")
    track_copies(o, copies, b, a)


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
    "delete_recorded": _delete_recorded,
    "sweep_fired": _sweep,
    "advance": _advance,
    "pause": explain_pause,
    "resume": explain_resume,
}
