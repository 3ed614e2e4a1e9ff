"""Helpers for integration tests of the in-process library API (``TriggerHook``).

* :func:`make_settings`: ``Settings`` for a test's database and exchange, with
  short knobs so every stage of the engine turns over in milliseconds.
* :func:`open_hook`: context manager that applies the schema, builds a
  ``TriggerHook`` with ``triggerhook.build``, optionally starts it and waits
  (with a deadline) until its publisher is connected, and always stops and
  closes it. :class:`HookFactory` (the ``hooks`` fixture) builds several per
  test and closes them all at its end.
* :func:`wait_until`: poll a condition until it holds or a deadline passes.
* :class:`RowReader`: reads ``th_tasks`` (and the shard and member rows) back
  over its own PyMySQL connection, independent of the engine's pool.
* :func:`wait_for_shards`: wait (with a deadline) until a started hook holds
  a given number of shard leases (all of them, by default).
* :func:`collect_until`: consume events until one with a given id arrived
  (the "sentinel" technique to prove that something never fired).
"""

from __future__ import annotations

import contextlib
import sys
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from support.amqp import EventConsumer, Received
from support.mysql import MARK_FIRING, connect
from support.waiting import wait_for
from triggerhook import Settings, TriggerHook, build
from triggerhook.amqp.publisher import AmqpPublisher
from triggerhook.store.mysql import init_schema

# Knobs that keep integration tests fast; a test overrides what it needs.
SHORT_KNOBS: dict[str, Any] = {
    "arm_ahead_ms": 200,
    "shard_lease_ms": 2000,
    "database_idle_transaction_timeout_s": 1,
    "shutdown_timeout_s": 5,
    "publish_retry_max_ms": 1000,
    "confirm_max_delay_ms": 10,
}
CONNECT_TIMEOUT_S = 20.0
# The shard count of a test database (init_schema's default).
SHARD_COUNT = 64


def make_settings(database_url: str, amqp_url: str, exchange: str, **overrides: Any) -> Settings:
    knobs = {**SHORT_KNOBS, "dead_letter_queue": f"{exchange}.dead", **overrides}
    return Settings(database_url=database_url, amqp_url=amqp_url, exchange=exchange, **knobs)


# The settings each hook of open_hook was built with (the library keeps none).
_SETTINGS: weakref.WeakKeyDictionary[TriggerHook, Settings] = weakref.WeakKeyDictionary()


def settings_of(hook: TriggerHook) -> Settings:
    """The settings ``hook`` was built with by :func:`open_hook`."""
    return _SETTINGS[hook]


def publisher_of(hook: TriggerHook) -> AmqpPublisher:
    """The engine's publisher as the concrete AMQP class (for its counters)."""
    publisher = hook.engine.publisher
    assert isinstance(publisher, AmqpPublisher)
    return publisher


@contextlib.contextmanager
def open_hook(
    settings: Settings, *, start: bool = True, connect_timeout_s: float = CONNECT_TIMEOUT_S
) -> Iterator[TriggerHook]:
    """A built ``TriggerHook`` (started and connected when ``start``); always closed."""
    init_schema(settings.database_url)
    switch_interval = sys.getswitchinterval()  # a running engine changes it
    hook = build(settings)
    _SETTINGS[hook] = settings
    try:
        if start:
            hook.start()
            connected = publisher_of(hook).connected.wait(connect_timeout_s)
            assert connected, f"publisher not connected within {connect_timeout_s}s"
        yield hook
    finally:
        try:
            hook.close()
        finally:
            sys.setswitchinterval(switch_interval)


class HookFactory:
    """Builds ``TriggerHook`` objects on the test's database and exchange.

    Every hook built is stopped and closed when the test ends (last built first).
    """

    def __init__(
        self, database_url: str, amqp_url: str, exchange: str, stack: contextlib.ExitStack
    ) -> None:
        self.database_url = database_url
        self.amqp_url = amqp_url
        self.exchange = exchange
        self._stack = stack

    def settings(self, **overrides: Any) -> Settings:
        return make_settings(self.database_url, self.amqp_url, self.exchange, **overrides)

    def __call__(self, *, start: bool = True, **overrides: Any) -> TriggerHook:
        """A hook with ``SHORT_KNOBS`` + ``overrides``; started and connected if ``start``."""
        return self._stack.enter_context(open_hook(self.settings(**overrides), start=start))


@dataclass(frozen=True)
class TaskRow:
    """One ``th_tasks`` row as stored."""

    id: str
    due_ms: int
    routing_key: str | None
    payload: bytes | None
    shard: int
    fire_ms: int
    gen: int
    firing: int  # 1: armed, by its shard's marks (docs/design/ownership.md)
    created_at: object
    attempts: int = 0


_ROW_COLUMNS = (
    "t.id, t.due_ms, t.routing_key, t.payload, t.shard, t.fire_ms, t.gen,"
    " (t.fire_ms < s.armed_ms OR (t.fire_ms = s.armed_ms AND t.id <= s.armed_id))"
    " AND t.gen < s.arm_gen, t.created_at, t.attempts"
)
_ROWS = "th_tasks t JOIN th_shards s ON s.shard = t.shard"


class RowReader:
    """Reads ``th_tasks`` over its own autocommit connection (each query sees
    everything committed before it). Single-threaded: one per thread."""

    def __init__(self, database_url: str) -> None:
        self._url = database_url
        self._conn: Any = None

    def _cursor(self) -> Any:
        if self._conn is None:
            self._conn = connect(self._url)
        return self._conn.cursor()

    def row(self, task_id: str) -> TaskRow | None:
        with self._cursor() as cur:
            cur.execute(f"SELECT {_ROW_COLUMNS} FROM {_ROWS} WHERE t.id = %s", (task_id,))
            found = cur.fetchone()
        return None if found is None else _task_row(found)

    def rows(self) -> dict[str, TaskRow]:
        with self._cursor() as cur:
            cur.execute(f"SELECT {_ROW_COLUMNS} FROM {_ROWS}")
            return {r[0]: _task_row(r) for r in cur.fetchall()}

    def owners(self) -> dict[int, str | None]:
        """shard -> its owner (None: free), of every shard row."""
        with self._cursor() as cur:
            cur.execute("SELECT shard, owner FROM th_shards")
            return {int(r[0]): r[1] for r in cur.fetchall()}

    def leases(self) -> dict[int, int]:
        """shard -> lease_until_ms, of every shard row (0: released)."""
        with self._cursor() as cur:
            cur.execute("SELECT shard, lease_until_ms FROM th_shards")
            return {int(r[0]): int(r[1]) for r in cur.fetchall()}

    def members(self) -> set[str]:
        """The instance names registered in th_members."""
        with self._cursor() as cur:
            cur.execute("SELECT instance FROM th_members")
            return {str(r[0]) for r in cur.fetchall()}

    def count(self) -> int:
        with self._cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM th_tasks")
            (count,) = cur.fetchone()
        return int(count)

    def execute(self, statement: str, args: tuple[object, ...] = ()) -> int:
        """Run a write statement (autocommit); returns the affected row count."""
        with self._cursor() as cur:
            return int(cur.execute(statement, args))

    def mark_firing(self, task_id: str) -> None:
        """See :data:`support.mysql.MARK_FIRING`."""
        assert self.execute(MARK_FIRING[0], (task_id,)) == 1, f"no row {task_id!r} to mark firing"
        self.execute(MARK_FIRING[1], (task_id,))

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


def _task_row(r: tuple[Any, ...]) -> TaskRow:
    payload = None if r[3] is None else bytes(r[3])
    return TaskRow(
        r[0], int(r[1]), r[2], payload, int(r[4]), int(r[5]), int(r[6]), int(r[7]), r[8], int(r[9])
    )


def wait_for_shards(hook: TriggerHook, count: int = SHARD_COUNT, timeout_s: float = 10.0) -> None:
    """Wait until the started ``hook`` holds exactly ``count`` shard leases."""
    wait_for(
        lambda: len(hook.engine.shards) == count,
        timeout_s,
        lambda: f"{hook.instance_id} holds {len(hook.engine.shards)} shards, not {count}",
        interval_s=0.01,
    )


def collect_until(consumer: EventConsumer, message_id: str, timeout_s: float) -> list[Received]:
    """Every event received until (and including) the one with ``message_id``.

    Raises AssertionError if it does not arrive within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    received: list[Received] = []
    while not any(r.message_id == message_id for r in received):
        left = deadline - time.monotonic()
        if left <= 0:
            seen = sorted({str(r.message_id) for r in received})
            raise AssertionError(f"{message_id!r} not received within {timeout_s}s; saw {seen}")
        received += consumer.collect(1, left)
    return received


def header_int(event: Received, name: str) -> int:
    """An integer header of an event (asserting it is an int, not a string)."""
    value = event.headers.get(name)
    assert isinstance(value, int) and not isinstance(value, bool), (name, value)
    return value
