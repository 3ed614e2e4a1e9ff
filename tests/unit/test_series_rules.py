"""A series' life (domain/series.py): catch-up, pause and resume, copies and
backfill, as properties over every-series (checked against arithmetic of
their own) and cron series (checked against the schedule's own next_ms)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from triggerhook.domain.delivery import DeliveryPolicy
from triggerhook.domain.meta import FIRE, Meta, make_meta
from triggerhook.domain.recurrence import MAX_CATCH_UP, Recurrence, from_record, make_recurrence
from triggerhook.domain.series import (
    MAX_BACKFILL,
    MAX_SERIES_ID_FOR_COPIES,
    PARKED_MS,
    after_fire,
    after_resume,
    backfill_dues,
    check_copyable,
    copy_of,
    overtaken,
    paused_meta,
)
from triggerhook.domain.spec import TaskRules, TaskSpec, resolve
from triggerhook.domain.task import ID_PATTERN, MAX_DUE_MS, Task
from triggerhook.errors import ValidationError

T0 = 1_780_000_000_000  # 2026-05-28, any instant
SECOND = 1000

every_ms = st.integers(1, 3600).map(lambda s: s * SECOND)
lateness_ms = st.integers(0, 50 * 3600 * SECOND)
policies = st.sampled_from([None, "one", "skip", "all"])


def every_series(step_ms: int, catch_up: str | None = None, limit: int | None = None) -> Recurrence:
    made = make_recurrence(every=step_ms, catch_up=catch_up, catch_up_max=limit)
    assert made is not None
    return made


def meta_of(recur: Recurrence) -> Meta:
    return make_meta(tags=["a"], recur=recur)


@given(every_ms, lateness_ms, policies, st.integers(1, MAX_CATCH_UP))
def test_after_a_late_fire_the_next_is_after_now_and_copies_fill_the_gap(
    step: int, late: int, policy: str | None, limit: int
) -> None:
    recur = every_series(step, policy, limit if policy == "all" else None)
    now = T0 + late
    upcoming = after_fire(meta_of(recur), T0, now)
    assert upcoming is not None and upcoming.due_ms is not None
    # The next is the first occurrence strictly after now, on the schedule's phase.
    assert upcoming.due_ms > now and upcoming.due_ms - step <= max(now, T0)
    assert (upcoming.due_ms - T0) % step == 0
    missed = [T0 + k * step for k in range(1, (now - T0) // step + 1)]
    expected = missed[:limit] if policy == "all" else []
    assert list(upcoming.missed_ms) == expected
    assert upcoming.meta.recur is not None and upcoming.meta.recur.occurrence == 2


def test_a_stopped_series_ends_and_copies_nothing() -> None:
    recur = every_series(SECOND, "all")
    stopped = make_meta(recur=Recurrence(every_ms=SECOND, stopped=True, catch_up="all"))
    assert recur.catch_up == "all"
    upcoming = after_fire(stopped, T0, T0 + 10 * SECOND)
    assert upcoming is not None and (upcoming.due_ms, upcoming.missed_ms) == (None, ())


@given(every_ms, lateness_ms)
def test_a_series_paused_while_armed_parks_at_the_occurrence_after_the_one_fired(
    step: int, late: int
) -> None:
    meta = paused_meta(meta_of(every_series(step)), None)
    upcoming = after_fire(meta, T0, T0 + late)
    assert upcoming is not None and upcoming.due_ms == PARKED_MS
    assert upcoming.meta.recur is not None
    assert (upcoming.meta.recur.paused, upcoming.meta.recur.resume_ms) == (True, T0 + step)
    assert upcoming.missed_ms == ()


@given(every_ms, st.integers(-50 * 3600 * SECOND, 50 * 3600 * SECOND), policies)
def test_resume_goes_back_to_its_occurrence_or_on_by_the_policy(
    step: int, offset: int, policy: str | None
) -> None:
    meta = paused_meta(meta_of(every_series(step, policy)), T0)
    now = T0 + offset
    upcoming = after_resume(meta, now)
    assert upcoming.meta.recur is not None and not upcoming.meta.recur.paused
    assert upcoming.meta.recur.resume_ms is None
    assert upcoming.due_ms is not None
    if now <= T0:
        assert (upcoming.due_ms, upcoming.missed_ms) == (T0, ())
    elif policy in (None, "one"):
        assert (upcoming.due_ms, upcoming.missed_ms) == (T0, ())  # fires now, once, late
    else:
        assert upcoming.due_ms > now and (upcoming.due_ms - T0) % step == 0
        missed = [T0 + k * step for k in range((now - T0) // step + 1)]
        assert list(upcoming.missed_ms) == (missed[:100] if policy == "all" else [])


@given(
    st.sampled_from(["*/7 * * * *", "30 2 * * *", "0 9-17 * * 1-5", "15,45 * * * *"]),
    st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"]),
    st.integers(0, 20 * 86_400 * SECOND),
)
def test_cron_copies_are_the_schedules_own_occurrences_in_order(
    cron: str, zone: str, late: int
) -> None:
    recur = make_recurrence(cron=cron, timezone=zone, catch_up="all", catch_up_max=50)
    assert recur is not None
    first = recur.aligned_ms(T0)
    now = first + late
    upcoming = after_fire(meta_of(recur), first, now)
    assert upcoming is not None and upcoming.due_ms is not None
    chain: list[int] = []
    due: int | None = first
    while len(chain) < 50 and due is not None:
        due = recur.next_ms(due, due)
        if due is None or due > now:
            break
        chain.append(due)
    assert list(upcoming.missed_ms) == chain
    assert upcoming.due_ms == recur.next_ms(first, now)


@given(every_ms, st.integers(0, 10**7), st.integers(1, 3 * 10**7), st.integers(-(10**8), 10**8))
def test_backfill_finds_exactly_the_occurrences_in_the_range(
    step: int, start: int, span: int, phase: int
) -> None:
    recur = every_series(step)
    anchor, from_ms, to_ms = T0 + phase, T0 + start, T0 + start + span
    expected = [d for d in range(anchor - (anchor - from_ms) // step * step - step, to_ms, step)]
    expected = [d for d in expected if from_ms <= d < to_ms]
    if len(expected) > MAX_BACKFILL:
        with pytest.raises(ValidationError) as refused:
            backfill_dues(recur, anchor, from_ms, to_ms)
        assert refused.value.field == "to_ms"
    else:
        assert backfill_dues(recur, anchor, from_ms, to_ms) == expected


def test_backfill_stops_at_the_series_end_and_refuses_an_empty_range() -> None:
    recur = make_recurrence(every=SECOND, until_ms=T0 + 2 * SECOND)
    assert recur is not None
    assert backfill_dues(recur, T0, T0 - 3 * SECOND, T0 + 60 * SECOND) == [
        T0 + k * SECOND for k in range(-3, 3)
    ]
    with pytest.raises(ValidationError) as refused:
        backfill_dues(recur, T0, T0, T0)
    assert refused.value.field == "to_ms"


@given(st.from_regex(r"[A-Za-z0-9._:-]{1,64}", fullmatch=True), st.integers(0, MAX_DUE_MS))
def test_a_copy_id_is_a_task_id_exactly_when_the_series_id_is_copyable(
    series_id: str, due_ms: int
) -> None:
    copyable = len(series_id) <= MAX_SERIES_ID_FOR_COPIES
    if copyable:
        check_copyable(series_id)
        task = Task(series_id, T0, "rk", b"p", meta=meta_of(every_series(SECOND)))
        copy = copy_of(task, due_ms)
        assert ID_PATTERN.fullmatch(copy.id)
        assert (copy.due_ms, copy.meta.recur, copy.meta.late) == (due_ms, None, FIRE)
    else:
        with pytest.raises(ValidationError) as refused:
            check_copyable(series_id)
        assert refused.value.field == "id"


@given(every_ms, st.integers(0, 10 * 3600 * SECOND))
def test_skip_sends_an_occurrence_overtaken_by_its_next_as_a_dead_letter(
    step: int, late: int
) -> None:
    recur = every_series(step, "skip")
    reason = overtaken(recur, T0, T0 + late)
    assert (reason is not None) == (late >= step)
    assert overtaken(every_series(step, "one"), T0, T0 + late) is None
    task = Task("s", T0, "rk", b"p", meta=meta_of(recur))
    screened = DeliveryPolicy(5, 0, 1000).screen(task, T0 + late, FIRE)
    assert (screened is not None) == (late >= step)
    if screened is not None:
        assert screened.cause == "late" and "catch_up skip" in screened.reason


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"catch_up": "all"}, "catch_up"),
        ({"every": SECOND, "catch_up": "sometimes"}, "catch_up"),
        ({"every": SECOND, "catch_up_max": 5}, "catch_up_max"),
        ({"every": SECOND, "catch_up": "one", "catch_up_max": 5}, "catch_up_max"),
        ({"every": SECOND, "catch_up": "all", "catch_up_max": 0}, "catch_up_max"),
        ({"every": SECOND, "catch_up": "all", "catch_up_max": MAX_CATCH_UP + 1}, "catch_up_max"),
        ({"every": SECOND, "catch_up": "all", "catch_up_max": True}, "catch_up_max"),
    ],
)
def test_a_bad_catch_up_is_refused_naming_its_field(fields: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as refused:
        make_recurrence(**fields)  # type: ignore[arg-type]
    assert refused.value.field == field


def test_the_policy_and_the_pause_survive_the_stored_record() -> None:
    made = make_recurrence(every=SECOND, catch_up="all", catch_up_max=7)
    assert made is not None
    paused = paused_meta(meta_of(made), T0).recur
    assert paused is not None
    assert from_record(paused.to_record()) == paused
    assert from_record(made.to_record()) == made
    assert "catch_up" not in every_series(SECOND).to_record()  # none given: stored as before


def test_a_series_id_too_long_for_its_copies_is_refused_with_catch_up_all() -> None:
    rules = TaskRules(default_routing_key="rk", max_payload_bytes=100)
    long_id = "s" * (MAX_SERIES_ID_FOR_COPIES + 1)
    with pytest.raises(ValidationError) as refused:
        resolve(TaskSpec(id=long_id, every="PT1S", catch_up="all"), T0, rules)
    assert refused.value.field == "id"
    assert resolve(TaskSpec(id=long_id, every="PT1S", catch_up="skip"), T0, rules).id == long_id
    fits = long_id[:-1]
    assert resolve(TaskSpec(id=fits, every="PT1S", catch_up="all"), T0, rules).id == fits


def test_a_stopped_series_found_parked_still_fires_its_last_occurrence_on_resume() -> None:
    """Cancelled too late (its occurrence was being published: its last), then
    written back unarmed (R8) and paused: on resume that occurrence fires,
    once, whatever the policy; it is not lost."""
    for policy in (None, "skip", "all"):
        stopped = Recurrence(every_ms=SECOND, stopped=True, catch_up=policy)
        meta = paused_meta(meta_of(stopped), T0)
        upcoming = after_resume(meta, T0 + 10 * SECOND)
        assert (upcoming.due_ms, upcoming.missed_ms) == (T0, ())
