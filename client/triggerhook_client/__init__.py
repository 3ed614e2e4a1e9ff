"""Python clients of the triggerhook daemon's HTTP API: :class:`Client`
(blocking) and :class:`AsyncClient` (asyncio), with the same methods.

A distribution of its own, ``triggerhook-client``, that needs only httpx: a
service that schedules tasks installs neither the daemon nor its drivers.

::

    with Client("http://127.0.0.1:8080", token="s3cret") as hook:
        hook.schedule(
            "invoice-42",
            delay_ms=30_000,
            routing_key="billing.charge",
            payload=b"{}",
            tags=["tenant:7", "invoices"],
            content_type="application/json",
            headers={"tenant": "7", "attempt": 1},
            late={"skip_after_ms": 60_000},  # over a minute late: dead-letter it instead
        )
        hook.reschedule("invoice-42", at="2026-12-01T09:00:00Z")  # or at_ms=1796115600000
        hook.get("invoice-42")  # TaskStatus(..., tags=("invoices", "tenant:7"), ...) or None
        for task in hook.list(tag="tenant:7", due_before="2027-01-01T00:00:00Z"):
            print(task.id, task.due_ms, task.state)
        hook.count(tag="tenant:7")  # 1
        hook.cancel("invoice-42")  # raises NotFound / TooLate
        hook.cancel_where(tag="tenant:7")  # BulkCancelled(cancelled=..., too_late=...)
        hook.schedule("digest-7", cron="0 9 * * 1-5", timezone="Europe/Berlin")  # a series
        hook.get("digest-7")  # TaskStatus(..., cron="0 9 * * 1-5", occurrence=1, ...)
        hook.pause("digest-7")  # SeriesChange("digest-7", "paused"); get shows paused=True
        hook.resume("digest-7")  # SeriesChange("digest-7", "resumed")
        hook.trigger("digest-7")  # Copies(..., "triggered", (Scheduled("digest-7:<now ms>", ...),))
        hook.backfill("digest-7", from_ms=..., to_ms=...)  # one copy per past occurrence
        hook.schedule("charge-7", delay_ms=0, dedup_window_ms=86_400_000)  # once a day at most:
        # after it fired, scheduling "charge-7" again that day raises AlreadyFired (.fired_ms)
        hook.schedule_batch([TaskRequest("a-1", at_ms=..., on_conflict="keep"), ...])
        # [BatchScheduled("a-1", created=False, outcome="kept"), ...]; schedule_many: the ids

Units: an instant is epoch milliseconds in an argument or field named
``*_ms`` (``at_ms``, ``until_ms``, ``due_ms``, ``{"deadline_ms": N}``) or a
datetime or RFC 3339 text in one without a suffix (``at``, ``until``,
``due_after``); a datetime or text without an offset is UTC, not local time.
A duration is milliseconds (``delay_ms``). Deprecated, still taken with a
:class:`DeprecationWarning`: ``delay_s`` (seconds), a number where an instant
is due (epoch seconds), and the results' ``at_ms`` (now ``due_ms``).

Both keep connections alive between calls (one httpx connection pool per
client object: ``httpx.Client`` and ``httpx.AsyncClient``; share the object,
it is safe across threads / tasks). They build every request and read every
answer with the same code (:mod:`triggerhook_client.calls`, no I/O there;
the methods of one call each, with their arguments and docstrings, are
written once in :mod:`triggerhook_client.methods`): they differ only in how
they send and wait.

Retries. Every write is made safe to send twice before the first attempt:
a delay becomes an absolute ``at_ms`` (rounded *up* to the millisecond) and
a missing task id becomes a new UUIDv4, both on the client,
so a retry carries byte-identical content and the daemon answers it as a safe
repeat (``created=False``) rather than a conflict. A call is retried only
after a transient failure: no connection, a timeout, a dropped connection, or
a 502/503/504 answer — up to ``retries`` times (default 3), waiting a capped
(2 s), jittered exponential back-off starting at ``backoff_s`` (default 0.1 s),
or the answer's ``Retry-After`` (capped at 5 s) when that is longer. Any other
answer, and every 4xx, is final. After a retry, the answer may reflect an
earlier attempt that did reach the daemon: ``schedule`` then says
``created=False`` (``schedule_batch``: ``exists``, for a task that attempt
created or replaced), ``cancel`` may raise :class:`NotFound` for a task that
the lost attempt cancelled, ``cancel_where`` counts only what the last
attempt cancelled, and ``backfill`` says ``exists`` for copies the lost
attempt wrote. ``trigger`` is the one write never retried: the daemon names
its copy by its own clock, so a retry would fire a second one. Reads
(``get``, ``list``, ``count``, ``timeline``) change nothing and are retried
the same way.

A series (``every`` or ``cron``) given no due time is sent with an
``at_ms`` as well: the instant the daemon would choose for it on
arrival — one ``every`` from now (rounded up to the millisecond), or for
``cron`` now itself, which the daemon moves to the first matching minute at
or after it, exactly as it does for an untimed series. A retry then names the
same first occurrence, where an untimed retry would make the daemon choose a
later one and answer a conflict. "Now" is this machine's clock, as for
``delay_ms``. One case remains a conflict: a retry that arrives after the
first occurrence (created by the attempt whose answer was lost) has fired
finds the series at its next occurrence and raises :class:`Conflict`,
although the series is the caller's; ``get`` then shows the same schedule
with ``occurrence`` above 1. This needs the first occurrence to fall before
the retry (a short ``every``, a cron minute seconds away, or attempts that
time out); where it matters, give the series an ``at`` later than the retries
can take (each attempt up to ``timeout_s``, each wait up to 5 s). Likewise a
task with a ``dedup_window_ms`` whose retry arrives after the attempt whose
answer was lost created it and it fired: the retry raises
:class:`AlreadyFired`, although the task was the caller's (its ``fired_ms``
is after the first attempt was sent).

Errors mirror the API's answers (``{"error": {"code", "message", "field"?}}``):
see :class:`ApiError` and its subclasses. Input the client can check itself
(two due times or none, a malformed or reserved task id in a
path, a value of the wrong type, an ``every`` that is no ISO 8601 duration
of at least 1 s, a bulk cancel naming no tasks) raises
:class:`InvalidRequest` with ``status=None`` without asking the daemon; the
rules of the values themselves (the tag characters, the headers' limits, a
page size over 1000) are the daemon's, and its error names the argument.
"""

from triggerhook_client.aio import AsyncClient
from triggerhook_client.errors import (
    AlreadyFired,
    ApiError,
    Conflict,
    Forbidden,
    InvalidRequest,
    NotASeries,
    NotFound,
    OverQuota,
    TooLate,
    TriggerHookError,
    Unauthorized,
    Unavailable,
)
from triggerhook_client.results import (
    At,
    BatchScheduled,
    BulkCancelled,
    Copies,
    HeaderValue,
    Health,
    Late,
    Scheduled,
    SeriesChange,
    TaskPage,
    TaskRequest,
    TaskStatus,
    TaskSummary,
    Timeline,
)
from triggerhook_client.rules import TaskState
from triggerhook_client.sync import Client

__all__ = [
    "AlreadyFired",
    "ApiError",
    "AsyncClient",
    "At",
    "BatchScheduled",
    "BulkCancelled",
    "Client",
    "Conflict",
    "Copies",
    "Forbidden",
    "HeaderValue",
    "Health",
    "InvalidRequest",
    "Late",
    "NotASeries",
    "NotFound",
    "OverQuota",
    "Scheduled",
    "SeriesChange",
    "TaskPage",
    "TaskRequest",
    "TaskState",
    "TaskStatus",
    "TaskSummary",
    "Timeline",
    "TooLate",
    "TriggerHookError",
    "Unauthorized",
    "Unavailable",
]
