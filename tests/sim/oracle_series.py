"""The oracle's explanations of a series' pause, resume and catch-up
(domain/series.py): each row a pause, a resume or an advance changed, by
the answers it gave (tests/sim/oracle.py holds the rest)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from sim.views import Diff, RowView, Table, Violation, nothing_else
from triggerhook.domain.recurrence import DEFAULT_CATCH_UP_MAX
from triggerhook.domain.series import PARKED_MS
from triggerhook.domain.task import SeriesResult

if TYPE_CHECKING:
    from sim.oracle import Oracle


def parked_at_advance(
    task_id: str, old: RowView, new: RowView | None, copies: Sequence[tuple[str, int]]
) -> None:
    """R5s of a series paused while its occurrence was armed: that one fired,
    the next is parked (not scheduled), resuming at the occurrence after the
    one fired; or the series ended (stopped, or past its until)."""
    if copies:
        raise Violation(f"paused series {task_id} advanced with copies {copies}")
    if new is None:
        if old.stopped or old.until_ms is None or old.every_ms is None:
            return  # stopped, or an until the oracle does not compute (cron)
        if old.due_ms + old.every_ms <= old.until_ms:
            raise Violation(
                f"paused series {task_id} deleted at an advance, though its next occurrence"
                f" ({old.due_ms + old.every_ms}) is before its until ({old.until_ms})"
            )
        return
    resume_ms = new.resume_ms
    if (
        (new.due_ms, new.fire_ms) != (PARKED_MS, PARKED_MS)
        or not new.paused
        or resume_ms is None
        or resume_ms <= old.due_ms
        or (old.every_ms is not None and resume_ms != old.due_ms + old.every_ms)
    ):
        raise Violation(
            f"series {task_id}, paused while occurrence {old.occurrence} (due {old.due_ms})"
            f" was armed, advanced to {new}: not parked at the occurrence after it"
        )


def copies_made(appeared: Sequence[str], series: set[str]) -> dict[str, list[tuple[str, int]]]:
    """The rows that appeared named as copies (``<series id>:<due ms>``) of
    ``series``, by series, with their due times (domain/series.copy_id)."""
    found: dict[str, list[tuple[str, int]]] = {}
    for copy_id in appeared:
        head, _, due = copy_id.rpartition(":")
        if head in series and due.isdigit():
            found.setdefault(head, []).append((copy_id, int(due)))
    return found


def check_caught_up(
    name: str,
    task_id: str,
    old: RowView,
    from_ms: int,
    now_ms: float,
    copies: Mapping[str, Sequence[tuple[str, int]]],
    a: Table,
) -> None:
    """The copies a series' catch-up wrote: only under "all" (not stopped),
    each an occurrence in ``[from_ms, now_ms]``, at most ``catch_up_max``;
    for an ``every`` series exactly the first ``catch_up_max`` of its
    occurrences there, from ``from_ms`` (a copy written before stays)."""
    made = copies.get(task_id, [])
    if old.catch_up != "all" or old.stopped:
        if made:
            raise Violation(f"{name} of {task_id} (catch-up {old.catch_up}) wrote copies {made}")
        return
    most = old.catch_up_max or DEFAULT_CATCH_UP_MAX
    wrong = [due for _, due in made if not from_ms <= due <= now_ms]
    if wrong or len(made) > most:
        raise Violation(
            f"{name} of {task_id} (due {old.due_ms}, at {now_ms:.3f}) wrote copies due"
            f" {sorted(due for _, due in made)}: not the occurrences missed in [{from_ms},"
            f" {now_ms:.3f}], at most {most}"
        )
    if old.every_ms is None or (old.until_ms is not None and from_ms > old.until_ms):
        return
    phase = (old.resume_ms if old.parked else old.due_ms) or 0
    due = phase + -(-(from_ms - phase) // old.every_ms) * old.every_ms  # the first at or after
    missed: list[int] = []
    while due <= now_ms and len(missed) < most and (old.until_ms is None or due <= old.until_ms):
        missed.append(due)
        due += old.every_ms
    present = [due for due in missed if f"{task_id}:{due}" in a]
    if present != missed or len(made) != len({due for _, due in made} & set(missed)):
        raise Violation(
            f"{name} of {task_id} (every {old.every_ms} from {phase}, at {now_ms:.3f}):"
            f" copies {sorted(due for _, due in made)} written, missed {missed}"
        )


def track_copies(
    o: Oracle, copies: Mapping[str, Sequence[tuple[str, int]]], b: Table, a: Table
) -> None:
    """Each copy a one-off task due at its id's time, with its series' payload;
    then judged as any created task (never early, nothing lost), its lateness
    counted from its write: it is due in the past by design."""
    for series_id, made in sorted(copies.items()):
        life = o.lives.get((series_id, b[series_id].rev))
        for copy_id, due in made:
            row = a[copy_id]
            if row.occurrence is not None or (row.due_ms, row.fire_ms) != (due, due):
                raise Violation(f"copy {copy_id} of series {series_id} written as {row}")
            o._created(copy_id, row, None if life is None else life.payload, late=True)


def _answers(
    name: str, args: tuple[object, ...], result: object, b: Table
) -> dict[str, SeriesResult]:
    """A pause's or resume's answers by id, each checked against the row it found."""
    ids: Sequence[str] = args[0]  # type: ignore[assignment]
    answers = dict(zip(ids, result, strict=True))  # type: ignore[call-overload]
    for task_id, answer in answers.items():
        row = b.get(task_id)
        found = (
            SeriesResult.NOT_FOUND
            if row is None
            else SeriesResult.NOT_A_SERIES
            if row.occurrence is None
            else None
        )
        if (answer in (SeriesResult.NOT_FOUND, SeriesResult.NOT_A_SERIES) or found) and (
            answer is not found
        ):
            raise Violation(f"{name} answered {answer.value} for {task_id}, stored as {row}")
    return answers


def explain_pause(
    o: Oracle, args: tuple[object, ...], result: object, b: Table, a: Table, d: Diff
) -> None:
    """PAUSED: an unarmed row parked (an R6 move: due PARKED_MS, new revision,
    resuming at its due time), or it was paused already (nothing written);
    PAUSED_AFTER_THIS: an armed row only marked (its occurrence fires)."""
    answers = _answers("pause", args, result, b)
    parked = {t for t, r in answers.items() if r is SeriesResult.PAUSED and not b[t].paused}
    marked = {t for t, r in answers.items() if r is SeriesResult.PAUSED_AFTER_THIS}
    nothing_else("pause", d, (set(), set(), parked | marked))
    for task_id in sorted(parked):
        old, new = b[task_id], a.get(task_id)
        if (
            new is None
            or new.rev == old.rev
            or (new.due_ms, new.fire_ms) != (PARKED_MS, PARKED_MS)
            or not new.parked
            or new.resume_ms != old.due_ms
            or new.occurrence != old.occurrence
        ):
            raise Violation(f"pause answered PAUSED for {task_id}: {old} -> {new}")
        o._moved(task_id, old, new, "pause")
    for task_id in sorted(marked):
        old, new = b[task_id], a.get(task_id)
        if (
            old.paused
            or new is None
            or (new.rev, new.due_ms, new.fire_ms, new.occurrence)
            != (old.rev, old.due_ms, old.fire_ms, old.occurrence)
            or not new.paused
            or new.resume_ms is not None
        ):
            raise Violation(f"pause answered PAUSED_AFTER_THIS for {task_id}: {old} -> {new}")


def explain_resume(
    o: Oracle, args: tuple[object, ...], result: object, b: Table, a: Table, d: Diff
) -> None:
    """RESUMED: a parked row moved (new revision) to its resume point, or by
    its catch-up policy when that passed; a row paused while armed only
    unmarked; or it was not paused (nothing written). ENDED: a parked row
    whose catch-up left no occurrence, deleted. Copies under "all"."""
    now_ms: float = args[1]  # type: ignore[assignment]
    answers = _answers("resume", args, result, b)
    resumed = {t for t, r in answers.items() if r is SeriesResult.RESUMED and b[t].paused}
    ended = {t for t, r in answers.items() if r is SeriesResult.ENDED}
    copies = copies_made(d[0], resumed | ended)
    nothing_else("resume", d, ({c for made in copies.values() for c, _ in made}, ended, resumed))
    for task_id in sorted(resumed | ended):
        old, new = b[task_id], a.get(task_id)
        resume_ms = old.resume_ms
        if new is not None and new.rev == old.rev:
            # Only unmarked: paused while armed, or a parked row a client moved, armed now.
            if (
                (new.due_ms, new.fire_ms, new.occurrence)
                != (old.due_ms, old.fire_ms, old.occurrence)
                or new.paused
                or new.resume_ms is not None
                or (resume_ms is not None and old.due_ms == PARKED_MS)
                or copies.get(task_id)
            ):
                raise Violation(f"resume of {task_id}: {old} -> {new}")
            continue
        if resume_ms is None or not old.paused:
            raise Violation(f"resume moved {task_id}, which was not parked: {old} -> {new}")
        late = resume_ms < now_ms
        check_caught_up("resume", task_id, old, resume_ms, now_ms if late else -math.inf, copies, a)
        if new is None:
            if task_id not in ended:
                raise Violation(f"resume answered RESUMED for {task_id}, which is gone")
            _ended_at_resume(task_id, old, resume_ms, now_ms)
            o._died(task_id, old, "resume")
            continue
        if task_id in ended:
            raise Violation(f"resume answered ENDED for {task_id}, which is {new}")
        _resumed_at(task_id, old, new, resume_ms, now_ms)
        if new.due_ms != resume_ms:  # occurrence n stands for a later time now
            o.occurrences.get(task_id, {}).pop(new.occurrence or 0, None)
        o._moved(task_id, old, new, "resume", late=True)
    track_copies(o, copies, b, a)


def _resumed_at(task_id: str, old: RowView, new: RowView, resume_ms: int, now_ms: float) -> None:
    """A parked series back at its resume point; when that passed, by its
    catch-up policy: "one" that same occurrence (it fires now, late),
    "skip" and "all" the first occurrence after the resume."""
    due = new.due_ms
    if resume_ms >= now_ms or old.catch_up == "one":
        right = due == resume_ms
    else:
        right = due > now_ms and due > resume_ms
        if right and old.every_ms is not None:
            right = (due - resume_ms) % old.every_ms == 0 and due - old.every_ms <= now_ms
    if (
        not right
        or new.fire_ms != due
        or new.paused
        or new.resume_ms is not None
        or new.occurrence != old.occurrence
    ):
        raise Violation(
            f"series {task_id} resumed at {now_ms:.3f} (catch-up {old.catch_up}, paused at"
            f" {resume_ms}): {old} -> {new}"
        )


def _ended_at_resume(task_id: str, old: RowView, resume_ms: int, now_ms: float) -> None:
    """A resume that deleted the series: its resume point passed and either
    it was stopped, or its catch-up policy ("skip", "all") goes to the first
    occurrence after the resume, which is past its until."""
    if resume_ms < now_ms and old.stopped:
        return
    if resume_ms >= now_ms or old.catch_up == "one" or old.until_ms is None:
        raise Violation(
            f"resume ended series {task_id} (catch-up {old.catch_up}, paused at {resume_ms},"
            f" until {old.until_ms}) at {now_ms:.3f}"
        )
    if old.every_ms is not None:
        after = max(resume_ms, math.floor(now_ms))
        upcoming = resume_ms + ((after - resume_ms) // old.every_ms + 1) * old.every_ms
        if upcoming <= old.until_ms:
            raise Violation(
                f"resume ended series {task_id}, though its next occurrence ({upcoming}) is"
                f" before its until ({old.until_ms})"
            )
