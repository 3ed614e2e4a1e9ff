"""Rate limits per routing-key pattern (domain/ratelimits.py): the table a
configuration gives, AMQP topic matching, and the token buckets' promise —
a task held back goes at its token's instant, never before, once; no pattern
lets more go over any span than its burst and its rate allow."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from triggerhook.domain.ratelimits import (
    MAX_PATTERNS,
    RateLimit,
    Throttle,
    parse_rate,
    parse_rate_limits,
    parse_rate_list,
    topic_matches,
)
from triggerhook.domain.task import Task
from triggerhook.errors import ValidationError

_COUNTER = itertools.count()


def tasks(key: str, n: int) -> list[Task]:
    return [Task(f"t{next(_COUNTER)}", 0, key, rev=1) for _ in range(n)]


# -- the table --------------------------------------------------------------------------------


def test_rates_take_a_unit_and_an_optional_burst() -> None:
    limits = parse_rate_limits(
        {"billing.*": "200/s", "mail.#": "600/m burst 5", "#": "3600/h", "slow": "0.5/s"}
    )
    assert limits == (
        RateLimit("billing.*", 200.0, 200),
        RateLimit("mail.#", 10.0, 5),
        RateLimit("#", 1.0, 1),
        RateLimit("slow", 0.5, 1),  # one second's tokens, and at least one
    )


@pytest.mark.parametrize(
    ("table", "field", "message"),
    [
        ([], "rate_limits", "must be a table"),
        ({"a": "fast"}, "rate_limits.a", 'must be "N/s"'),
        ({"a": 200}, "rate_limits.a", 'must be "N/s"'),
        ({"a": "0/s"}, "rate_limits.a", "above 0"),
        ({"a": "5/s burst 0"}, "rate_limits.a", "at least 1"),
        ({"a b": "5/s"}, "rate_limits.a b", "the pattern"),
        ({"a..b": "5/s"}, "rate_limits.a..b", "the pattern"),
        ({"": "5/s"}, "rate_limits.", "the pattern"),
        ({f"k{i}": "1/s" for i in range(MAX_PATTERNS + 1)}, "rate_limits", "at most"),
    ],
)
def test_a_bad_table_names_its_entry(table: object, field: str, message: str) -> None:
    with pytest.raises(ValidationError) as raised:
        parse_rate_limits(table)
    assert raised.value.field == field
    assert message in raised.value.message


# -- AMQP topic matching ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "key", "expected"),
    [
        ("a.*", "a.b", True),
        ("a.*", "a", False),
        ("a.*", "a.b.c", False),
        ("a.#", "a", True),
        ("a.#", "a.b.c", True),
        ("#", "anything.at.all", True),
        ("#.b", "b", True),
        ("#.b", "a.b", True),
        ("#.b", "a.c", False),
        ("*.b.#", "x.b", True),
        ("*.b.#", "b", False),
        ("billing.charge", "billing.charge", True),
        ("billing.charge", "billing.charges", False),
    ],
)
def test_topic_patterns_match_as_rabbitmq_does(pattern: str, key: str, expected: bool) -> None:
    assert topic_matches(pattern, key) is expected


def _reference(words: list[str], keys: list[str]) -> bool:
    """AMQP's rule, by plain recursion (exponential: small inputs only)."""
    if not words:
        return not keys
    if words[0] == "#":
        return any(_reference(words[1:], keys[i:]) for i in range(len(keys) + 1))
    return bool(keys) and words[0] in ("*", keys[0]) and _reference(words[1:], keys[1:])


@given(
    st.lists(st.sampled_from(["a", "b", "*", "#"]), min_size=1, max_size=6),
    st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=7),
)
def test_topic_matching_agrees_with_the_rule(words: list[str], keys: list[str]) -> None:
    assert topic_matches(".".join(words), ".".join(keys)) is _reference(words, keys)


def test_matching_a_long_key_against_many_hashes_is_linear() -> None:
    # Memoized: (words times keys) steps, where plain recursion would never end.
    assert not topic_matches(".".join(["#"] * 40 + ["z"]), ".".join(["a"] * 200))


# -- the buckets ------------------------------------------------------------------------------


def test_the_first_pattern_that_matches_limits_a_key_and_others_go_free() -> None:
    throttle = Throttle(parse_rate_limits({"a.*": "1/s", "a.b": "100/s"}), lambda: 1.0)
    go, held = throttle.admit([*tasks("a.b", 2), *tasks("free", 3)], 0.0)
    assert [t.routing_key for t in go] == ["a.b", "free", "free", "free"]
    assert [(t.routing_key, at) for t, at in held] == [("a.b", 1000)]  # "a.*" came first


def test_a_backlog_drains_at_the_rate_each_task_held_once() -> None:
    throttle = Throttle(parse_rate_limits({"bulk": "5000/s"}), lambda: 1.0)
    go, held = throttle.admit(tasks("bulk", 100_000), 1_000.0)
    assert len(go) == 5000  # the burst: one second's tokens
    instants = [at for _, at in held]
    assert instants == sorted(instants)  # in the order they came
    assert instants[-1] == 1_000 + 19_000  # 95,000 more at 5 a ms
    # Back at its instant, each goes without another token.
    back, again = throttle.admit([held[0][0]], instants[0])
    assert (back, again) == ([held[0][0]], [])
    assert len(throttle) == len(held) - 1


def test_a_reservation_follows_the_id_to_a_new_revision() -> None:
    # R8p: a held task postponed to the database comes back re-armed at a
    # new revision, at its token's instant: it goes without another token.
    throttle = Throttle(parse_rate_limits({"k": "1/s burst 1"}), lambda: 1.0)
    first, postponed = tasks("k", 2)
    assert throttle.admit([first, postponed], 0.0)[1] == [(postponed, 1000)]
    rearmed = postponed.replace(rev=2)
    assert throttle.admit([rearmed], 999.0) == ([], [(rearmed, 1000)])  # not before
    assert throttle.admit([rearmed], 1000.0) == ([rearmed], [])
    assert len(throttle) == 0
    # Its token was the one it used: the next task waits a full period more.
    [late] = tasks("k", 1)
    assert throttle.admit([late], 1000.0)[1] == [(late, 2000)]


def test_a_reservation_whose_task_never_came_back_is_forgotten() -> None:
    # Postponed, then cancelled in the database: the reservation would stay.
    throttle = Throttle(parse_rate_limits({"k": "1/s burst 1"}), lambda: 1.0)
    throttle.admit(tasks("k", 3), 0.0)  # held until 1,000 and 2,000
    assert len(throttle) == 2
    throttle.admit(tasks("other", 1), 601_500.0)
    assert len(throttle) == 1  # 600 s past 1,000, not yet past 2,000
    throttle.admit(tasks("other", 1), 700_000.0)
    assert len(throttle) == 1  # looked for once every 600 s, not at every call
    throttle.admit(tasks("other", 1), 1_201_500.0)
    assert len(throttle) == 0


def test_an_instance_keeps_to_its_share_of_the_rate() -> None:
    share = 0.25  # it holds a quarter of the shards
    throttle = Throttle(parse_rate_limits({"k": "1000/s"}), lambda: share)
    go, held = throttle.admit(tasks("k", 10_250), 0.0)
    assert len(go) == 250  # a quarter of the burst
    assert held[-1][1] == 40_000  # 10,000 more at a quarter of 1,000/s


def test_with_no_share_nothing_limited_goes_and_no_token_is_kept() -> None:
    share = [0.0]
    throttle = Throttle(parse_rate_limits({"k": "1/s burst 1"}), lambda: share[0])
    waiting = tasks("k", 2)
    go, held = throttle.admit([*waiting, *tasks("free", 1)], 5.0)
    assert [t.routing_key for t in go] == ["free"]
    assert [at for _, at in held] == [1005] * 2
    assert len(throttle) == 0  # nothing reserved: they ask again
    share[0] = 1.0
    go, held = throttle.admit(waiting, 1005.0)  # back: now they take tokens
    assert go == waiting[:1] and [at for _, at in held] == [2005]


@given(
    per_s=st.sampled_from([1.0, 7.5, 100.0, 2000.0]),
    burst=st.integers(1, 50),
    arrivals=st.lists(
        st.tuples(st.floats(0, 5_000, allow_nan=False), st.integers(1, 40)), max_size=30
    ),
)
def test_no_span_lets_more_go_than_burst_and_rate_allow(
    per_s: float, burst: int, arrivals: list[tuple[float, int]]
) -> None:
    throttle = Throttle([RateLimit("k", per_s, burst)], lambda: 1.0)
    gone: list[float] = []  # the instant each task went
    # As the scheduler's heap gives them: each instant's returns and arrivals.
    pending = sorted(arrivals)
    returning: dict[float, list[Task]] = {}
    while pending or returning:
        now_ms = min([*returning, *(a for a, _ in pending[:1])])
        back = returning.pop(now_ms, [])
        batch = back + [t for a, n in pending if a == now_ms for t in tasks("k", n)]
        pending = [(a, n) for a, n in pending if a != now_ms]
        go, held = throttle.admit(batch, now_ms)
        assert all(task in go for task in back)  # back at its instant: it goes
        for task, at in held:
            assert at > now_ms  # never early: held until after now
            returning.setdefault(float(at), []).append(task)
        gone += [now_ms] * len(go)
    gone.sort()
    for first, start in enumerate(gone):
        end = start + 1000.0  # any one-second span from a departure
        within = sum(1 for g in gone[first:] if g < end)
        assert within <= burst + math.ceil(per_s) + 1, (start, within)


@given(
    per_s=st.sampled_from([1.0, 7.5, 100.0, 2000.0]),
    burst=st.integers(1, 50),
    arrivals=st.lists(
        st.tuples(st.integers(0, 5_000), st.integers(1, 40)), min_size=1, max_size=30
    ),
    stalls=st.lists(st.tuples(st.integers(0, 8_000), st.integers(1, 3_000)), max_size=4),
)
# Two counts alone let this one through: the first stall brings the queue
# back late, to wait for its second (release) tokens, one every 10 ms; the
# second stall passes all their instants, and they went together (103 in a
# second where 102 may): what the departures' count (depart) holds back.
@example(
    per_s=100.0,
    burst=1,
    arrivals=[(0, 1)] * 11 + [(0, 14), (0, 40), (950, 40)],
    stalls=[(1, 21), (31, 21)],
)
def test_a_stall_never_lets_a_queue_go_together(
    per_s: float, burst: int, arrivals: list[tuple[int, int]], stalls: list[tuple[int, int]]
) -> None:
    """The scheduler stalled (a pause, a step forward of the clock): what came
    due meanwhile comes back late, at the stall's end, and what it lets go
    leaves at once (depart). Still no span lets more leave than the burst and
    the rate allow; each goes at or after its first instant, and none is lost."""
    throttle = Throttle([RateLimit("k", per_s, burst)], lambda: 1.0)

    def delivered(at_ms: float) -> float:  # when a wake at at_ms happens
        for start, length in stalls:
            if start <= at_ms < start + length:
                at_ms = float(start + length)
        return at_ms

    gone: list[float] = []
    first_instant: dict[str, float] = {}
    pending: dict[float, list[Task]] = {}
    count = 0
    for at, n in arrivals:
        pending.setdefault(delivered(at), []).extend(tasks("k", n))
        count += n
    while pending:
        now_ms = min(pending)
        go, held = throttle.admit(pending.pop(now_ms), now_ms)
        left, again = throttle.depart(go, now_ms)
        gone += [now_ms] * len(left)
        for task, at in [*held, *again]:
            assert at > now_ms  # never early
            first_instant.setdefault(task.id, at)
            pending.setdefault(delivered(float(at)), []).append(task)
    assert len(gone) == count  # none lost
    assert len(throttle) == 0
    gone.sort()
    for first, start in enumerate(gone):
        within = sum(1 for g in gone[first:] if g < start + 1000.0)
        assert within <= burst + math.ceil(per_s) + 1, (start, within)


# -- the settings' text, and the catch-up ---------------------------------------------------


def test_a_setting_lists_patterns_in_order() -> None:
    assert parse_rate_list(" billing.*=200/s, mail.#=600/m burst 5 ,") == (
        RateLimit("billing.*", 200.0, 200),
        RateLimit("mail.#", 10.0, 5),
    )
    assert parse_rate_list("") == ()
    assert parse_rate("1000/s burst 10", "catch_up_rate") == RateLimit("#", 1000.0, 10)
    assert parse_rate(" ", "catch_up_rate") is None


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        ("billing.*", "rate_limits", "expected"),
        ("a=1/s, a=2/s", "rate_limits.a", "given twice"),
        ("a=fast", "rate_limits.a", 'must be "N/s"'),
    ],
)
def test_a_bad_setting_names_its_entry(text: str, field: str, message: str) -> None:
    with pytest.raises(ValidationError) as raised:
        parse_rate_list(text)
    assert (raised.value.field, message in raised.value.message) == (field, True)


def test_the_catch_up_limits_each_key_of_late_tasks_only() -> None:
    throttle = Throttle((), lambda: 1.0, RateLimit("#", 10.0, 10), catch_up_after_ms=1000)
    now = 100_000.0
    late = [Task(f"l{i}", 0, "a", rev=1) for i in range(30)]
    other = [Task(f"o{i}", 0, "b", rev=1) for i in range(30)]
    on_time = [Task(f"n{i}", 99_500, "a", rev=1) for i in range(30)]  # 500 ms late: on time
    go, held = throttle.admit([*late, *other, *on_time], now)
    assert [t.id[0] for t in go].count("l") == 10  # each key its own bucket
    assert [t.id[0] for t in go].count("o") == 10
    assert [t.id[0] for t in go].count("n") == 30  # not catching up: not limited
    assert max(at for _, at in held) == 100_000 + 2_000  # 20 more of a key at 10/s


# -- the figures per bucket (metrics) -------------------------------------------------------


def test_each_bucket_counts_what_it_held_the_wait_it_added_and_what_it_holds_now() -> None:
    throttle = Throttle(
        parse_rate_limits({"a": "1/s burst 1", "b": "2/s burst 1"}),
        lambda: 1.0,
        RateLimit("#", 1.0, 1),
        catch_up_after_ms=1000,
    )
    assert throttle.labels == ("a", "b", "(catch_up)")
    on_time = [Task(f"{key}{i}", 10_000, key, rev=1) for key in "aaabb" for i in range(1)]
    on_time = [t.replace(id=f"{t.id}-{n}") for n, t in enumerate(on_time)]
    held = throttle.admit(on_time, 10_000.0)[1]
    # a: 2 held, until 11,000 and 12,000; b: 1 until 10,500; "c" is late (due
    # at 0) and not a pattern's: the catch-up bucket holds its second.
    assert sorted(at for _, at in held) == [10_500, 11_000, 12_000]
    late = tasks("c", 2)
    assert [at for _, at in throttle.admit(late, 10_000.0)[1]] == [11_000]
    assert throttle.held_by == [2, 1, 1]
    assert throttle.wait_ms_by == [1_000 + 2_000, 500, 1_000]
    assert throttle.holding_by == [2, 1, 1]
    # Back at its instant: no longer held; back early: held as before, not again.
    b_task = next(t for t, _ in held if t.routing_key == "b")
    a_tasks = [t for t, _ in held if t.routing_key == "a"]
    throttle.admit([b_task, a_tasks[0]], 10_500.0)
    assert throttle.held_by == [2, 1, 1] and throttle.holding_by == [2, 0, 1]
    throttle.forget([a_tasks[1]])  # its shard lost
    assert throttle.holding_by == [1, 0, 1]
    assert sum(throttle.holding_by) == len(throttle)


def test_a_task_held_by_both_buckets_counts_under_the_later_token() -> None:
    throttle = Throttle(
        parse_rate_limits({"a": "10/s burst 1"}),
        lambda: 1.0,
        RateLimit("#", 1.0, 1),
        catch_up_after_ms=1000,
    )
    late = [Task(f"x{i}", 0, "a", rev=1) for i in range(2)]
    go, held = throttle.admit(late, 10_000.0)
    assert len(go) == 1 and [at for _, at in held] == [11_000]  # catch-up's 1/s, not a's 10/s
    assert throttle.held_by == [0, 1] and throttle.holding_by == [0, 1]


@given(
    steps=st.lists(
        st.tuples(st.sampled_from(["a", "b", "free"]), st.integers(0, 6), st.integers(0, 3000)),
        max_size=25,
    )
)
def test_the_tasks_held_now_per_bucket_add_up_to_the_reservations(
    steps: list[tuple[str, int, int]],
) -> None:
    throttle = Throttle(parse_rate_limits({"a": "2/s burst 1", "b": "5/s"}), lambda: 1.0)
    now_ms = 0.0
    waiting: list[Task] = []
    for key, count, advance_ms in steps:
        now_ms += advance_ms
        back = [t for t in waiting if t.id in throttle._reserved]
        go, held = throttle.admit([*back[:2], *tasks(key, count)], now_ms)
        throttle.forget(back[2:3])
        waiting = [t for t, _ in held] + [t for t in waiting if t not in go]
        assert sum(throttle.holding_by) == len(throttle)
        assert all(n >= 0 for n in throttle.holding_by)
    assert sum(throttle.held_by) == throttle.held
