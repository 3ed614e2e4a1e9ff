"""Recurring tasks (series) through a real daemon: each occurrence fires as an
event with the same id and its occurrence number, one pending at a time; a
cancel stops the series; a daemon killed with ``kill -9`` loses and skips no
occurrence (one may repeat around the kill)."""

from __future__ import annotations

import httpx
import pytest
from support.amqp import AmqpNames, EventConsumer, Received, delete_topology
from support.daemon import DaemonGroup, daemon_env, settings_env
from support.hook import collect_until, header_int
from support.http import ROUTED, Api
from support.mysql import temporary_database
from support.names import uid, unique_name
from support.waiting import now_ms, wait_for


def occurrences(events: list[Received], task_id: str) -> list[tuple[int, int, int]]:
    """(occurrence, x-due-ms, x-rev) of each event of ``task_id``, in arrival order."""
    return [
        (header_int(e, "x-occurrence"), header_int(e, "x-due-ms"), header_int(e, "x-rev"))
        for e in events
        if e.message_id == task_id
    ]


def gather(
    consumer: EventConsumer, seen: list[Received], task_id: str
) -> list[tuple[int, int, int]]:
    """Add what arrived within half a second to ``seen``; the occurrences so far."""
    seen += consumer.collect(5, 0.5)
    return occurrences(seen, task_id)


def test_a_series_fires_each_occurrence_with_its_number(api: Api, http: httpx.Client) -> None:
    task_id = uid("every")
    first_s = (now_ms() + 300) / 1000
    body = {"id": task_id, "at": first_s, "every": "PT1S", "tags": ["series"], "payload": "p"}
    assert http.post("/v1/tasks", json=body).status_code == 201
    shown = http.get(f"/v1/tasks/{task_id}").json()
    assert (shown["every"], shown["occurrence"], shown["tags"]) == ("PT1S", 1, ["series"])
    seen: list[Received] = []
    wait_for(lambda: len(gather(api.events, seen, task_id)) >= 3, 20, "not 3 occurrences")
    fired = occurrences(seen, task_id)
    numbers = [n for n, _, _ in fired]
    assert numbers[:3] == [1, 2, 3]
    dues = [due for _, due, _ in fired[:3]]
    first_ms = round(first_s * 1000)
    assert dues == [first_ms, first_ms + 1000, first_ms + 2000]
    assert len({rev for _, _, rev in fired[:3]}) == 3  # a new revision per occurrence
    assert all(e.body == b"p" for e in seen if e.message_id == task_id)
    # One pending at a time: the row stands for the next occurrence.
    shown = http.get(f"/v1/tasks/{task_id}").json()
    assert shown["occurrence"] >= 4 and shown["at"] * 1000 >= first_ms + 3000
    _cancel_and_check_it_ends(api, http, task_id, seen)


def _cancel_and_check_it_ends(
    api: Api, http: httpx.Client, task_id: str, seen: list[Received]
) -> None:
    answer = http.delete(f"/v1/tasks/{task_id}")
    assert answer.status_code in (204, 409), answer.text
    # After CANCELLED nothing more fires; after TOO_LATE, the occurrence being
    # published, and none after it.
    last = http.get(f"/v1/tasks/{task_id}")
    limit = last.json()["occurrence"] if last.status_code == 200 else 0
    wait_for(lambda: http.get(f"/v1/tasks/{task_id}").status_code == 404, 10)
    sentinel = uid("sentinel")
    assert http.post("/v1/tasks", json={"id": sentinel, "delay": 2.5}).status_code == 201
    after = collect_until(api.events, sentinel, 15)
    late = [n for n, _, _ in occurrences(after, task_id)]
    before = max(n for n, _, _ in occurrences(seen, task_id))
    assert all(n <= max(limit, before) for n in late), (late, limit, before)


def test_a_cron_series_is_due_at_its_next_matching_minute(http: httpx.Client) -> None:
    task_id = uid("cron")
    body = {"id": task_id, "cron": "*/5 * * * *", "timezone": "Europe/Berlin"}
    assert http.post("/v1/tasks", json=body).status_code == 201
    shown = http.get(f"/v1/tasks/{task_id}").json()
    assert (shown["cron"], shown["timezone"], shown["occurrence"]) == (
        "*/5 * * * *",
        "Europe/Berlin",
        1,
    )
    due_ms = round(shown["at"] * 1000)
    assert due_ms % 300_000 == 0 and 0 < due_ms - now_ms() <= 300_000
    assert http.delete(f"/v1/tasks/{task_id}").status_code == 204


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"every": "P1M"}, "every"),
        ({"every": "PT0.5S"}, "every"),
        ({"every": "PT1S", "cron": "* * * * *"}, "every"),
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "* * * *"}, "cron"),
        ({"cron": "* * * * *", "timezone": "Mars/Olympus"}, "timezone"),
        ({"cron": "* * * * *", "timezone": "../../etc/passwd"}, "timezone"),
        ({"every": "PT1S", "timezone": "UTC"}, "timezone"),
        ({"every": "PT1S", "until": "yesterday"}, "until"),
        ({"every": "PT1S", "at": 4e9, "until": 3e9}, "until"),
        ({"at": 4e9, "until": 5e9}, "until"),
    ],
)
def test_bad_schedules_are_refused_naming_the_field(
    http: httpx.Client, extra: dict[str, object], field: str
) -> None:
    task_id = uid("bad")
    answer = http.post("/v1/tasks", json={"id": task_id, **extra})
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == field
    assert http.get(f"/v1/tasks/{task_id}").status_code == 404


@pytest.mark.slow
def test_a_daemon_killed_mid_series_skips_and_loses_no_occurrence(
    mysql_url: str, amqp_url: str
) -> None:
    names = AmqpNames(exchange=unique_name(), queue=unique_name())
    events = EventConsumer(amqp_url, names, binding="fire.#")
    with temporary_database(mysql_url, unique_name()) as database_url, DaemonGroup() as group:
        try:
            events.declare()
            env = daemon_env(
                database_url, amqp_url, names.exchange, "one", default_routing_key=ROUTED
            )
            first = group.start(env, "first", "--init-db")
            first.wait_ready()
            url = f"http://127.0.0.1:{env['TRIGGERHOOK_HTTP_PORT']}"
            task_id = uid("crash")
            with httpx.Client(base_url=url, timeout=10) as http:
                body = {"id": task_id, "delay": 0.2, "every": "PT1S"}
                assert http.post("/v1/tasks", json=body).status_code == 201
            seen: list[Received] = []
            wait_for(lambda: len(gather(events, seen, task_id)) >= 2, 20, "no 2nd occurrence")
            first.kill9()
            # Its successor under another name: the dead one's stays taken until
            # its heartbeat runs out (R1), and a restart at once may be refused.
            # It takes the shards over after the lease.
            second = group.start({**env, **settings_env(instance_id="two")}, "second")
            second.wait_ready()
            wait_for(
                lambda: max((n for n, _, _ in gather(events, seen, task_id)), default=0) >= 6,
                60,
                "the series did not go on after the restart",
            )
            fired = occurrences(seen, task_id)
            numbers = sorted({n for n, _, _ in fired})
            assert numbers == list(range(1, numbers[-1] + 1))  # none skipped, none lost
            dues = {n: due for n, due, _ in fired}
            assert all(dues[n + 1] - dues[n] >= 1000 for n in numbers[:-1])
            assert all((dues[n] - dues[1]) % 1000 == 0 for n in numbers)
            repeated = len(fired) - len(numbers)
            assert repeated <= 2, fired  # only around the kill
            assert second.terminate() == 0, second.tail()
        finally:
            events.close()
            group.close()
            delete_topology(amqp_url, names)
