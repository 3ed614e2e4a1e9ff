"""What the machine itself allows, measured in the same run: the ceilings.

The database ceilings speak the engine's driver (``--driver``), through a
raw DBAPI connection: the same client-side decoding cost, none of the engine's.

Each engine figure is also reported as a fraction of the ceiling that bounds
it (see ``benchmarks/report.py``):

* ``ceiling.insert``  raw multi-row INSERT into ``th_tasks`` (same schema and
                      indexes), 2,000 rows a statement, one transaction
* ``ceiling.read``    raw range SELECT of every row by (shard, fire_ms), as
                      arming reads them (arming writes one shard row per pass,
                      no task row)
* ``ceiling.delete``  raw batched DELETE by id, 2,000 ids a statement, a commit each
* ``ceiling.publish`` raw pika ``basic_publish`` of persistent, mandatory messages
                      (the engine's headers) into a durable queue, with up to
                      5,000 confirms in flight; done when every one is confirmed
* ``ceiling.publish_frames`` the same with the frames encoded by
                      ``triggerhook.amqp.frames`` (as the engine's publisher does),
                      written on pika's connection: the broker's own ceiling
* ``ceiling.heapq``   ``heapq`` push then pop of (due, seq, item) tuples
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Sequence
from typing import Any

import pika
import pika.channel
import pika.frame
import pika.spec

from benchmarks.common import Recorder, amqp_url, isolated, rate
from triggerhook.amqp.frames import encode_event
from triggerhook.domain.arming import shard_of
from triggerhook.store.mysql.connection import open_connection, target
from triggerhook.store.mysql.drivers import Connection

_CHUNK = 2000
_MAX_UNCONFIRMED = 5000


def _chunks(items: Sequence[str], size: int) -> list[Sequence[str]]:
    return [items[s : s + size] for s in range(0, len(items), size)]


def _in_list(count: int) -> str:
    return ", ".join(["%s"] * count)


def run(rec: Recorder, n: int) -> None:
    with isolated() as place:
        db = open_connection(target(place.settings.database_url))
        try:
            _database(rec, db, n)
        finally:
            db.close()
        rec.add(
            "ceiling.publish",
            _publish(place.name, n),
            "pika `basic_publish`: persistent, mandatory, up to 5,000 unconfirmed",
        )
        _purge(place.name)
        rec.add(
            "ceiling.publish_frames",
            _publish(place.name, n, pre_encoded=True),
            "the same, frames encoded with `struct` as the engine does (amqp/frames.py)",
        )
    rec.add("ceiling.heapq", _heap(n), "push + pop pairs")


_SHARDS = 64
_INSERT = (
    "INSERT INTO th_tasks (id, shard, rev, gen, fire_ms, due_ms, routing_key, payload)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
)


def raw_insert(db: Connection, n: int) -> tuple[list[str], int, float]:
    """``n`` rows into th_tasks in one transaction, ``_CHUNK`` a statement,
    due from a day ahead on: their ids, the first due time and the seconds
    it took (also benchmarks/indexcost.py's fill)."""
    ids = [f"c{i}" for i in range(n)]
    due_ms = int(time.time() * 1000) + 86_400_000
    rows = [
        (tid, shard_of(tid, _SHARDS), i, 1, due_ms + i, due_ms + i, "bench", None)
        for i, tid in enumerate(ids)
    ]
    with db.cursor() as cur:
        started = time.perf_counter()
        for s in range(0, n, _CHUNK):
            cur.executemany(_INSERT, rows[s : s + _CHUNK])
        db.commit()
    return ids, due_ms, time.perf_counter() - started


def _database(rec: Recorder, db: Connection, n: int) -> None:
    ids, due_ms, insert_s = raw_insert(db, n)
    rec.add("ceiling.insert", rate(n, insert_s), "one transaction")
    with db.cursor() as cur:
        started = time.perf_counter()
        read = 0
        for shard in range(_SHARDS):
            cur.execute(
                "SELECT id, fire_ms, due_ms, routing_key, payload, rev, attempts, gen"
                " FROM th_tasks WHERE shard = %s AND fire_ms <= %s ORDER BY fire_ms, id",
                (shard, due_ms + n),
            )
            read += len(cur.fetchall())
        db.commit()
        if read != n:
            raise RuntimeError(f"raw SELECT read {read} rows of {n}")
        rec.add("ceiling.read", rate(n, time.perf_counter() - started), "a statement per shard")

        rec.add("ceiling.delete", rate(n, raw_delete(db, ids)), "a commit per batch")


def raw_delete(db: Connection, ids: Sequence[str]) -> float:
    """Seconds to delete these rows of th_tasks by id, ``_CHUNK`` ids a
    statement and a commit each (also benchmarks/indexcost.py's measure)."""
    started = time.perf_counter()
    deleted = 0
    with db.cursor() as cur:
        for part in _chunks(ids, _CHUNK):
            deleted += cur.execute(
                f"DELETE FROM th_tasks WHERE id IN ({_in_list(len(part))})", part
            )
            db.commit()
    elapsed_s = time.perf_counter() - started
    if deleted != len(ids):
        raise RuntimeError(f"raw DELETE removed {deleted} rows of {len(ids)}")
    return elapsed_s


class _Publisher:
    """Publishes ``n`` messages on a SelectConnection, keeping up to
    ``_MAX_UNCONFIRMED`` unconfirmed; stops the I/O loop when all are confirmed."""

    def __init__(self, exchange: str, n: int, pre_encoded: bool) -> None:
        self.pre_encoded = pre_encoded
        self.exchange = exchange
        self.n = n
        self.sent = 0
        self.confirmed = 0
        self.error: str | None = None
        self.started = 0.0
        self.finished = 0.0
        self.channel: pika.channel.Channel | None = None
        self.conn = pika.SelectConnection(
            pika.URLParameters(amqp_url()),
            on_open_callback=self._on_open,
            on_open_error_callback=self._on_error,
        )

    def _on_error(self, _conn: Any, error: Any) -> None:
        self.error = repr(error)
        self.conn.ioloop.stop()

    def _on_open(self, conn: pika.SelectConnection) -> None:
        conn.channel(on_open_callback=self._on_channel)

    def _on_channel(self, channel: pika.channel.Channel) -> None:
        self.channel = channel
        channel.confirm_delivery(self._on_confirm, callback=self._on_confirm_mode)

    def _on_confirm_mode(self, _frame: pika.frame.Method) -> None:
        self.started = time.perf_counter()
        self._publish()

    def _publish(self) -> None:
        channel = self.channel
        assert channel is not None
        now_ms = int(time.time() * 1000)
        count = min(self.n - self.sent, _MAX_UNCONFIRMED - (self.sent - self.confirmed))
        if self.pre_encoded:
            number = channel.channel_number
            frames = [
                encode_event(
                    number, self.exchange, "bench", b"", f"c{i}", now_ms, now_ms, i + 1, 131_000
                )
                for i in range(self.sent, self.sent + count)
            ]
            self.conn._output_marshaled_frames([b"".join(frames)])  # as the engine does
            self.sent += count
            return
        for i in range(self.sent, self.sent + count):
            props = pika.BasicProperties(
                delivery_mode=2,
                message_id=f"c{i}",
                timestamp=now_ms // 1000,
                headers={"x-due-ms": now_ms, "x-fired-ms": now_ms},
            )
            channel.basic_publish(self.exchange, "bench", b"", props, mandatory=True)
        self.sent += count

    def _on_confirm(self, frame: pika.frame.Method) -> None:
        method = frame.method
        if isinstance(method, pika.spec.Basic.Nack):
            self.error = "the broker nacked a message"
        tag = method.delivery_tag
        self.confirmed = max(self.confirmed, tag)  # acks come in order; multiple or not
        if self.confirmed >= self.n or self.error:
            self.finished = time.perf_counter()
            self.conn.close()
            self.conn.ioloop.stop()
        elif self.sent < self.n:
            self._publish()


def _purge(queue: str) -> None:
    """Empty the queue between the two publish runs, so both start alike."""
    conn = pika.BlockingConnection(pika.URLParameters(amqp_url()))
    try:
        conn.channel().queue_purge(queue)
    finally:
        conn.close()


def _publish(exchange: str, n: int, pre_encoded: bool = False) -> float:
    publisher = _Publisher(exchange, n, pre_encoded)
    publisher.conn.ioloop.start()
    if publisher.error or publisher.confirmed < n:
        raise RuntimeError(f"raw publish: {publisher.error or 'not every message confirmed'}")
    return rate(n, publisher.finished - publisher.started)


def _heap(n: int) -> float:
    entries: list[tuple[int, int, object]] = []
    item = object()
    push, pop = heapq.heappush, heapq.heappop
    base = int(time.time() * 1000)
    dues = [base + (i * 7919) % n for i in range(n)]  # not in order
    started = time.perf_counter()
    for seq, due in enumerate(dues):
        push(entries, (due, seq, item))
    while entries:
        pop(entries)
    return rate(n, time.perf_counter() - started)
