"""Run Schemathesis' ``st`` command with one workaround and one hook (``python -m``
style: ``python -P tests/support/schemathesis_cli.py run URL ...``).

The workaround: on CPython 3.11.7, Hypothesis describing a lambda (for a
strategy's repr) re-parses the lambda's source file with ``ast.parse`` deep
inside a drawing stack, and that intermittently fails with ``SystemError: AST
constructor recursion depth mismatch`` — a crash inside the fuzzer, not an
answer of the API under test. Descriptions are only cosmetic, so they are
replaced by a fixed text before Schemathesis starts.

The hook (``map_case``, and ``before_call`` again: the stateful phase fills in
fields from earlier answers after ``map_case``) fills in, for positive cases
(ones every schema admits, so they must be accepted), what no schema can
state; negative cases keep what was drawn:

* a listing's ``cursor`` is opaque — valid only as a ``next_cursor`` the API
  gave out: a positive case gets a real cursor, made from the drawn one;
* a listing's, count's or timeline's pairs of parameters (``due_after`` and
  ``due_after_ms``, ``bucket`` and ``bucket_ms``, ...) are at most one of
  each: the document says so in words, as a parameter list cannot; a
  positive case keeps the ``*_ms`` one;
* a timeline's span (bucket length x buckets) is at most 372 days, which the
  document says in words: a positive case asks for no more buckets than fit;
* a bulk cancel's ``cursor`` is opaque, like a listing's: a positive case
  gets a real one;
* the coverage phase ignores ``dependentRequired`` and ``dependentSchemas``
  in a batch's tasks: the task is made to keep them (one of ``at``/``at_ms``/...,
  a timezone and a daylight-saving policy only with cron, an end and a
  catch-up policy only in a series, ``catch_up_max`` only with ``catch_up`` all,
  whose series' id has at most 48 characters);
* a backfill's range must be in the past (``to_ms`` not after now, which no
  schema can say), after ``from_ms``, and hold at most 1,000 occurrences: a
  positive case's range becomes at most 10 s ending at ``to_ms`` or now,
  whichever is earlier (an ``every`` is at least 1 s: at most 10 copies);
* a series' bounds depend on the current time and on its schedule (the
  document describes them): ``until`` (``until_ms``) must not come before the
  first occurrence, so it becomes the latest time; and a cron series' first
  occurrence (the first matching minute at or after ``at``/``at_ms``) must come by
  9999-12-31, so an ``at`` in the last 50 years before it (a valid expression
  matches within 40 years) moves 400 years earlier (the same calendar).

And a format: ``cron`` expressions are drawn from a grammar of their own (from
the document's exact pattern, Hypothesis takes ~10 times as long), then
filtered by that pattern; and only ones that match a date within 50 years
(the document describes that rule, which no pattern states): ``0 0 LW * */6``
(the last weekday of a month, on a weekend) is refused.
"""

from __future__ import annotations

import sys
import time
import zlib
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, NamedTuple

import schemathesis
from cronsim.cronsim import SYMBOLIC_DAYS, SYMBOLIC_MONTHS, CronSim, CronSimError
from hypothesis import strategies as st
from hypothesis.internal import lambda_sources
from schemathesis.cli import schemathesis as st_command
from schemathesis.generation.case import Case
from schemathesis.hooks import HookContext

from triggerhook.api.fields import DEFAULT_BUCKETS
from triggerhook.api.fields_task import CRON_ONLY, EXCLUSIVE, SERIES_DEPENDENT
from triggerhook.api.listing import DUE_RANGE_PAIRS, TIMELINE_PAIRS
from triggerhook.domain.listing import MAX_TIMELINE_SPAN_MS, encode_cursor
from triggerhook.domain.series import MAX_SERIES_ID_FOR_COPIES
from triggerhook.domain.task import MAX_DUE_MS

LATEST_S = MAX_DUE_MS / 1000  # 9999-12-31T23:59:59.999Z
LATEST = "9999-12-31T23:59:59.999Z"
LAST_YEAR_KEPT = 9949  # cron: an at in 9950 or later is moved
CYCLE_YEARS = 400  # the Gregorian calendar repeats (weekdays and leap days alike)
CYCLE_S = 146_097 * 86_400  # the days of 400 years
MOVED_FROM_S = datetime(LAST_YEAR_KEPT + 1, 1, 1, tzinfo=UTC).timestamp()


def _plain_description(_function: Callable[..., object]) -> str:
    return "lambda"


def cursor_like(drawn: str) -> str:
    """A cursor this API could have given out, derived from ``drawn``."""
    digest = zlib.crc32(drawn.encode("utf-8", "surrogatepass"))
    return encode_cursor((digest * 65_537 % (MAX_DUE_MS + 1), f"c-{digest:08x}"))


def real_cursor(query: object) -> None:
    """A real cursor in place of the drawn one (``GET /v1/tasks``)."""
    if isinstance(query, dict) and isinstance(query.get("cursor"), str):
        query["cursor"] = cursor_like(query["cursor"])


def _whole(value: object) -> int | None:
    """A drawn integer parameter (an int, or its digits as text), else None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return int(value) if isinstance(value, str) and value.isascii() and value.isdigit() else None


def span_within_bound(query: object) -> None:
    """A timeline's ``buckets`` cut to what fits in its longest span (given
    where the default number would not fit)."""
    if not isinstance(query, dict):
        return
    buckets, bucket_ms = _whole(query.get("buckets")), _whole(query.get("bucket_ms"))
    bucket_s = _whole(query.get("bucket"))
    if bucket_ms is None and bucket_s is not None:
        bucket_ms = bucket_s * 1000
    if not bucket_ms:
        return
    fitting = max(
        1, min(DEFAULT_BUCKETS if buckets is None else buckets, MAX_TIMELINE_SPAN_MS // bucket_ms)
    )
    if buckets is not None or fitting < DEFAULT_BUCKETS:
        query["buckets"] = fitting


def one_of_each_pair(query: object) -> None:
    """Of each pair of parameters given, only the ``*_ms`` one kept."""
    if isinstance(query, dict):
        for text, ms in (*DUE_RANGE_PAIRS, *TIMELINE_PAIRS):
            if ms in query:
                query.pop(text, None)


def series_in_time(body: object) -> None:
    """A create body's series bounds made to hold (see the module's docstring)."""
    if not isinstance(body, dict) or not ("every" in body or "cron" in body):
        return
    if "until" in body:
        body["until"] = LATEST if isinstance(body["until"], str) else LATEST_S
    if "until_ms" in body:
        body["until_ms"] = MAX_DUE_MS
    if "cron" in body and "at" in body:
        body["at"] = earlier_if_last(body["at"])
    if "cron" in body and "at_ms" in body:
        body["at_ms"] = earlier_if_last_ms(body["at_ms"])


def earlier_if_last(at: object) -> object:
    """``at`` 400 years earlier if it is in 9950 or later."""
    if isinstance(at, str) and at[:4].isdigit() and int(at[:4]) > LAST_YEAR_KEPT:
        return f"{int(at[:4]) - CYCLE_YEARS:04d}{at[4:]}"
    if isinstance(at, int | float) and not isinstance(at, bool) and at >= MOVED_FROM_S:
        return at - CYCLE_S
    return at


def earlier_if_last_ms(at_ms: object) -> object:
    """``at_ms`` 400 years earlier if it is in 9950 or later."""
    if isinstance(at_ms, int | float) and not isinstance(at_ms, bool):
        return at_ms - CYCLE_S * 1000 if at_ms >= MOVED_FROM_S * 1000 else at_ms
    return at_ms


def dependencies_kept(body: object) -> None:
    """A batch task's fields made to keep the document's dependencies, which
    the coverage phase ignores in an array's items (``dependentRequired``,
    ``dependentSchemas``), so a "positive" task of a batch may break them —
    and the server rightly refuses it: one field of each exclusive group
    (``at``/``at_ms``/..., cron before every), a timezone and a DST policy
    only with cron, an end and a catch-up policy only in a series (a
    ``catch_up_max`` only with ``catch_up`` all)."""
    if not isinstance(body, dict):
        return
    for group in EXCLUSIVE:
        present = sorted((name for name in group if name in body), key=lambda n: n != "cron")
        for name in present[1:]:
            del body[name]
    if "cron" not in body:
        for name in CRON_ONLY:
            body.pop(name, None)
    if "every" not in body and "cron" not in body:
        for name in SERIES_DEPENDENT:
            body.pop(name, None)
    if body.get("catch_up") != "all":
        body.pop("catch_up_max", None)
    elif isinstance(body.get("id"), str):  # copies' ids "<id>:<due ms>" must be ids too
        body["id"] = body["id"][:MAX_SERIES_ID_FOR_COPIES]


BACKFILL_SPAN_MS = 10_000


def backfill_in_the_past(body: object, now_ms: int) -> None:
    """A backfill's range made to hold (see the module's docstring)."""
    if not isinstance(body, dict):
        return
    to_ms, from_ms = body.get("to_ms"), body.get("from_ms")
    # JSON Schema's integers: 5.0 is one too.
    if not isinstance(to_ms, int | float) or not isinstance(from_ms, int | float):
        return
    to_ms = max(1, min(int(to_ms), now_ms))
    body["to_ms"] = to_ms
    body["from_ms"] = min(max(int(from_ms), to_ms - BACKFILL_SPAN_MS), to_ms - 1)


def create_bodies(case: Case[Any], path: str) -> list[object]:
    """The create bodies of a case of ``POST /v1/tasks`` or ``POST /v1/tasks/batch``."""
    body = case.body
    if path == "/v1/tasks":
        return [body]
    tasks = body.get("tasks") if isinstance(body, dict) else None
    return list(tasks) if isinstance(tasks, list) else []


def positive_case(context: HookContext, case: Case[Any]) -> Case[Any]:
    """``map_case``: what no schema states, filled in for positive cases."""
    operation = context.operation
    positive = case.meta is not None and case.meta.generation.mode.is_positive
    if operation is None or not positive:
        return case
    method, path = operation.method.upper(), operation.path
    if method == "GET" and path in ("/v1/tasks", "/v1/tasks/count", "/v1/tasks/timeline"):
        one_of_each_pair(case.query)
        real_cursor(case.query)
        span_within_bound(case.query)
    elif method == "POST" and path == "/v1/tasks/cancel":
        real_cursor(case.body)
    elif method == "POST" and path in ("/v1/tasks", "/v1/tasks/batch"):
        for body in create_bodies(case, path):
            dependencies_kept(body)
            series_in_time(body)
    elif method == "POST" and path == "/v1/tasks/{id}/backfill":
        # The daemon's clock, give or take: the machine's own, a little earlier.
        backfill_in_the_past(case.body, int(time.time() * 1000) - 1000)
    return case


# -- cron expressions: drawn by a grammar (from the document's pattern Hypothesis is slow) -------

_SPACE = st.sampled_from(sorted(c for c in map(chr, range(0x3001)) if c.isspace()))
_GAP = st.lists(st.just(" ") | _SPACE, min_size=1, max_size=2).map("".join)
_EDGE = st.lists(_SPACE, max_size=1).map("".join)
_SPELLINGS = 5  # a number, with a leading zero, and the name in three cases


class CronField(NamedTuple):
    lo: int
    hi: int
    names: tuple[str, ...] = ()
    first_name: int = 0

    def spell(self, value: int, how: int) -> str:
        """``value`` as a number (``how`` 0, or 1: a leading zero) or by name."""
        index = value - self.first_name
        if how < 2 or not 0 <= index < len(self.names):
            return f"{'0' * how}{value}" if how < 2 else str(value)
        return (str.upper, str.lower, str.title)[how - 2](self.names[index])

    def values(self) -> st.SearchStrategy[str]:
        return st.builds(self.spell, st.integers(self.lo, self.hi), st.integers(0, _SPELLINGS - 1))

    def ranges(self) -> st.SearchStrategy[str]:
        ends = st.tuples(st.integers(self.lo, self.hi), st.integers(self.lo, self.hi))
        hows = st.tuples(st.integers(0, _SPELLINGS - 1), st.integers(0, _SPELLINGS - 1))
        return st.builds(self.spell_range, ends, hows)

    def spell_range(self, ends: tuple[int, int], hows: tuple[int, int]) -> str:
        low, high = sorted(ends)
        return f"{self.spell(low, hows[0])}-{self.spell(high, hows[1])}"

    def terms(self) -> st.SearchStrategy[str]:
        """*, a value or an ascending range, with an optional /step."""
        base = st.just("*") | self.values() | self.ranges()
        step = st.just("") | st.integers(1, self.hi + 2).map("/{}".format)
        return st.builds(str.__add__, base, step)


_DAY = CronField(1, 31)
_WEEKDAY = CronField(0, 7, tuple(SYMBOLIC_DAYS), 0)


def _listed(term: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.lists(term, min_size=1, max_size=3).map(",".join)


def cron_expressions() -> st.SearchStrategy[str]:
    """Cron expressions as cronsim reads them (the document's pattern filters them)."""
    last = st.sampled_from(["L", "LW", "l", "lw", "L/2"])
    nth = st.builds("{}#{}".format, _WEEKDAY.values(), st.integers(1, 5))
    weekday_last = st.integers(0, 7).map("{}L".format)
    fields = (
        _listed(CronField(0, 59).terms()),
        _listed(CronField(0, 23).terms()),
        _listed(_DAY.terms() | last),
        _listed(CronField(1, 12, tuple(SYMBOLIC_MONTHS), 1).terms()),
        _listed(_WEEKDAY.terms() | nth | weekday_last),
    )
    return st.builds(_joined, st.tuples(_EDGE, _GAP, _GAP, _GAP, _GAP, _EDGE), st.tuples(*fields))


def _joined(spaces: tuple[str, ...], fields: tuple[str, ...]) -> str:
    """The fields with the spaces before, between and after them."""
    return "".join(s + f for s, f in zip(spaces, (*fields, ""), strict=True))


def matches_a_date(text: str) -> bool:
    """Whether cronsim finds a time for ``text`` from now (it looks 50 years ahead)."""
    try:
        next(iter(CronSim(" ".join(text.split()), datetime.now(UTC).replace(microsecond=0))))
    except (CronSimError, StopIteration):
        return False
    return True


def positive_case_as_sent(context: HookContext, case: Case[Any], kwargs: dict[str, Any]) -> None:
    """``before_call``: :func:`positive_case` again, on what is sent: the
    stateful phase fills fields from earlier answers after ``map_case`` (a
    listed series' past ``until_ms`` into a new series, say)."""
    positive_case(context, case)


def register_hooks() -> None:
    schemathesis.hook("map_case")(positive_case)
    schemathesis.hook("before_call")(positive_case_as_sent)
    schemathesis.openapi.format("cron", cron_expressions().filter(matches_a_date))


if __name__ == "__main__":
    lambda_sources.lambda_description = _plain_description
    register_hooks()
    sys.argv[0] = "st"
    sys.exit(st_command())
