"""Takeover after ``kill -9``: two ``triggerhook run`` daemons share the
shards of one database; tasks fall due at a steady rate; one daemon is
killed with SIGKILL. Measured:

* ``takeover.time_s``     from the kill until the survivor owns every shard
                          (polled in ``th_shards``); the bound is the lease
                          + 5 s (docs/design/ownership.md, item 6)
* ``takeover.lost``       tasks never received (must be 0)
* ``takeover.duplicates`` events received twice: the killed daemon's
                          published but unconfirmed copies, fired again
* ``takeover.late_max_ms`` the latest a task of the killed daemon's shards
                          was received after its due time: what its clients
                          saw (tasks due while the lease ran out wait for it)

The full run uses the default ``shard_lease_ms`` (an operator's figure);
``--quick`` a 2 s lease, so that CI is not kept waiting.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import pika
import uvloop

from benchmarks.common import Recorder, amqp_url, consuming, isolated, wait_until
from benchmarks.http import delete_command_queues, post_batches, spawn, stop
from triggerhook import Settings
from triggerhook.domain.arming import shard_of
from triggerhook.store.mysql import sql
from triggerhook.store.mysql.connection import open_connection, target

QUICK_LEASE_MS = 2000
# (task id, x-due-ms, received epoch ms) of one event.
Receipt = tuple[str, int, float]


def _consume_unique(queue: str, expected: int, out: Connection) -> None:
    """Child process: receive events until ``expected`` distinct ids came, then
    send back every receipt (duplicates included)."""
    conn = pika.BlockingConnection(pika.URLParameters(amqp_url()))
    channel = conn.channel()
    rows: list[Receipt] = []
    seen: set[str] = set()
    out.send("ready")

    def on_message(ch: Any, _method: Any, props: Any, _body: bytes) -> None:
        rows.append((props.message_id, props.headers["x-due-ms"], time.time() * 1000))
        seen.add(props.message_id)
        if len(seen) >= expected:
            ch.stop_consuming()

    channel.basic_consume(queue, on_message, auto_ack=True)
    channel.start_consuming()
    conn.close()
    out.send(rows)


def run(rec: Recorder, seconds: int, rate: int, quick: bool) -> None:
    """``seconds`` of tasks at ``rate`` a second; the kill comes a quarter in."""
    lease_ms = QUICK_LEASE_MS if quick else Settings().shard_lease_ms
    seconds = max(seconds, lease_ms // 1000 + 8)  # past the lease, with room after
    n = seconds * rate
    with isolated() as place:
        url = place.settings.database_url
        # A transaction left idle is aborted well within the lease (as by default).
        extra = {
            "shard_lease_ms": str(lease_ms),
            "database_idle_transaction_timeout_s": str(max(1, lease_ms // 2000)),
        }
        procs = [spawn(place.settings, {**extra, "instance_id": f"bench-{who}"}) for who in "ab"]
        try:
            wait_until(lambda: _owners(url) == {"bench-a": 32, "bench-b": 32}, 60, "shards split")
            start_ms = int(time.time() * 1000) + 3000
            tasks: list[dict[str, object]] = [
                {"id": f"k{i}", "at": (start_ms + i * 1000 // rate) / 1000} for i in range(n)
            ]
            uvloop.run(post_batches(procs[1][1], tasks))
            with consuming(place.name, n, _consume_unique) as consumer:
                _pace_until(start_ms / 1000 + seconds / 4)
                doomed = _shards_of(url, "bench-a")
                os.kill(procs[0][0].pid, signal.SIGKILL)
                killed_at = time.time()
                taken_at = wait_until(
                    lambda: _owners(url) == {"bench-b": 64}, lease_ms / 1000 + 30, "takeover"
                )
                receipts: list[Receipt] = consumer.events(seconds + 60)
        finally:
            codes = [stop(proc) for proc, _ in procs]
            delete_command_queues(place.settings.exchange)
    if codes[1] != 0:  # the killed one's is -9
        raise RuntimeError(f"the surviving daemon exited with status {codes[1]}")
    shards = Settings().shard_count

    def of_doomed(task_id: str) -> bool:
        return shard_of(task_id, shards) in doomed

    _record(rec, receipts, n, taken_at - killed_at, lease_ms, of_doomed)


def _record(
    rec: Recorder,
    receipts: list[Receipt],
    n: int,
    takeover_s: float,
    lease_ms: int,
    doomed: Callable[[str], bool],
) -> None:
    unique = {task_id for task_id, _, _ in receipts}
    late = [recv - due for task_id, due, recv in receipts if doomed(task_id)]
    rec.add(
        "takeover.time_s",
        takeover_s,
        f"kill -9 of one of two daemons, shard_lease_ms {lease_ms:,}: "
        f"bound {lease_ms / 1000 + 5:.0f} s (lease + 5 s)",
    )
    rec.add("takeover.lost", n - len(unique), f"{n:,} tasks due over the run")
    rec.add(
        "takeover.duplicates",
        len(receipts) - len(unique),
        "the killed daemon's published, unconfirmed copies, fired again by the survivor",
    )
    rec.add(
        "takeover.late_max_ms",
        max(late, default=0.0),
        f"{len(late):,} events of the killed daemon's 32 shards",
    )


def _pace_until(when_s: float) -> None:
    """Wait (pacing the scenario, not a test's wait) until epoch ``when_s``."""
    pause_s = when_s - time.time()
    if pause_s > 0:
        threading.Event().wait(pause_s)


def _query(url: str, statement: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
    conn = open_connection(target(url), autocommit=True)
    try:
        cur = conn.cursor()
        cur.execute(statement, params)
        return list(cur.fetchall())
    finally:
        conn.close()


def _owners(url: str) -> dict[str, int]:
    """Live owners and how many shards each holds (by the database's clock)."""
    rows = _query(
        url,
        "SELECT owner, COUNT(*) FROM th_shards WHERE owner IS NOT NULL"
        f" AND lease_until_ms > {sql.NOW_MS} GROUP BY owner",
    )
    return {str(owner): int(count) for owner, count in rows}


def _shards_of(url: str, owner: str) -> set[int]:
    rows = _query(url, "SELECT shard FROM th_shards WHERE owner = %s", (owner,))
    return {int(shard) for (shard,) in rows}
