"""Quotas per namespace (triggerhook/domain/quotas.py, api/quotas.py): the
file's keys refused naming the field; the create bucket never lets more
through than its rate and burst allow and refuses only when it must; the
pending estimate never lets the stored tasks pass max_pending once counted;
the keeper never waits on a count; and over HTTP, a create over a quota is
a 429 ``over_quota`` (``Retry-After``) that writes nothing, a batch all or
nothing, a payload over the namespace's bound a 422 naming it."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.fakes import FakeClock, FakePublisher, FakeStore
from support.grpc_served import grpc_served
from support.served import Client, Served, served
from triggerhook_client import OverQuota as ClientOverQuota
from triggerhook_client.grpc import GrpcClient
from triggerhook_client.grpc import triggerhook_pb2 as pb

from triggerhook.api.command_messages import (
    AMQP_RENDERING,
    Command,
    Disposition,
    Rejected,
    execute,
)
from triggerhook.api.quotas import QuotaKeeper
from triggerhook.api.scoped import ScopedHook
from triggerhook.domain.listing import TaskFilter
from triggerhook.domain.namespaces import Namespace, Principal, parse_namespaces, token_hash
from triggerhook.domain.outcomes import Outcome
from triggerhook.domain.quotas import RECOUNT_MS, Quota, Quotas, parse_quota
from triggerhook.domain.ratelimits import RateLimit
from triggerhook.errors import ConfigError, OverQuota, ValidationError
from triggerhook.settings import Settings
from triggerhook.wiring import DevOptions, assemble, build_dev

AT_MS = 1_893_456_000_250  # far beyond arm_ahead_ms: never armed meanwhile


# -- the file's keys -------------------------------------------------------------


def space(**quota: object) -> dict[str, object]:
    return {"name": "billing", "id_prefix": "billing-", "routing_keys": ["billing.#"], **quota}


def test_a_namespace_takes_its_quotas() -> None:
    parsed = parse_namespaces(
        {"namespace": [space(max_pending=10, create_rate="5/s burst 2", max_payload_bytes=64)]}
    )
    assert parsed.spaces["billing"].quota == Quota(10, RateLimit("#", 5.0, 2), 64)
    assert not parse_namespaces({"namespace": [space()]}).spaces["billing"].quota


@pytest.mark.parametrize(
    ("entry", "error"),
    [
        ({"max_pending": 0}, "namespace[0].max_pending: an integer from 1 to 999,999,999"),
        ({"max_pending": True}, "namespace[0].max_pending: an integer from 1"),
        ({"max_pending": "10"}, "namespace[0].max_pending: an integer from 1"),
        ({"max_payload_bytes": -1}, "namespace[0].max_payload_bytes: an integer from 1"),
        ({"create_rate": 5}, 'namespace[0].create_rate: a string such as "200/s"'),
        ({"create_rate": "fast"}, 'namespace[0].create_rate: must be "N/s", "N/m" or "N/h"'),
        ({"create_rate": "0/s"}, "namespace[0].create_rate: the rate must be above 0"),
        ({"max_creates": 5}, "namespace[0].max_creates: unknown key"),
    ],
)
def test_a_bad_quota_is_refused_naming_its_field(entry: dict[str, object], error: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_namespaces({"namespace": [space(**entry)]})
    assert error in str(refused.value)


def test_parse_quota_alone_names_the_entry() -> None:
    with pytest.raises(ConfigError, match=r"^ns\[3\]\.max_pending: "):
        parse_quota({"max_pending": 0}, "ns[3]")


# -- the create bucket -------------------------------------------------------------

RATE = RateLimit("#", 10.0, 3)  # a token each 100 ms, three at most


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 400), st.integers(1, 3)), max_size=60),
    st.sampled_from([1.0, 0.5, 1 / 3]),
)
def test_the_bucket_admits_no_more_than_rate_and_burst_allow(
    steps: list[tuple[int, int]], share: float
) -> None:
    quotas = Quotas(share)
    quota = Quota(create_rate=RATE)
    capacity = max(1.0, RATE.burst * share)
    per_ms = RATE.per_s * share / 1000
    tokens, now_ms = capacity, 0.0  # a model of the bucket, in exact steps
    admitted: list[tuple[float, int]] = []
    for gap_ms, creates in steps:
        now_ms += gap_ms
        tokens = min(capacity, tokens + gap_ms * per_ms)
        try:
            quotas.admit("billing", quota, creates, now_ms)
        except OverQuota as exc:
            assert tokens < creates, "refused with the tokens there"
            assert "create_rate of 10/s burst 3" in str(exc)
        except ValidationError as exc:
            assert creates > capacity, "refused as never possible, yet it was"
            assert exc.field == "tasks"
        else:
            assert tokens >= creates - 1e-9, "admitted without the tokens"
            tokens -= creates
            admitted.append((now_ms, creates))
    # Whatever the order: over any span, no more than the burst and the rate.
    for i, (start_ms, _) in enumerate(admitted):
        total = 0
        for at_ms, creates in admitted[i:]:
            total += creates
            assert total <= capacity + (at_ms - start_ms) * per_ms + 1e-6


def test_a_refused_create_takes_no_token() -> None:
    quotas = Quotas()
    quota = Quota(create_rate=RateLimit("#", 1.0, 2))
    quotas.admit("a", quota, 2, 0.0)
    for _ in range(5):
        with pytest.raises(OverQuota):
            quotas.admit("a", quota, 1, 0.0)
    quotas.admit("a", quota, 1, 1000.0)  # the one token of the second since


def test_namespaces_have_buckets_of_their_own() -> None:
    quotas = Quotas()
    quota = Quota(create_rate=RateLimit("#", 1.0, 1))
    quotas.admit("a", quota, 1, 0.0)
    with pytest.raises(OverQuota):
        quotas.admit("a", quota, 1, 0.0)
    quotas.admit("b", quota, 1, 0.0)


# -- pending tasks -------------------------------------------------------------------

Step = tuple[str, int]
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("create"), st.integers(1, 4)),
        st.tuples(st.just("fire"), st.integers(1, 4)),
        st.tuples(st.just("wait"), st.integers(1, 1500)),
        st.tuples(st.just("count"), st.just(0)),
    ),
    max_size=80,
)


@settings(max_examples=400, deadline=None)
@given(STEPS, st.integers(1, 12))
def test_once_counted_the_stored_tasks_never_pass_max_pending(steps: list[Step], most: int) -> None:
    """Counts come back whenever the steps say (the stored tasks as of then),
    fires happen unseen: once a count is in, the stored tasks stay within
    max_pending, and a create is refused only when the estimate is full."""
    quotas = Quotas()
    quota = Quota(max_pending=most)
    stored, now_ms = 0, 0.0
    in_flight = counted = False
    for kind, n in steps:
        if kind == "create":
            in_flight |= quotas.count_due("a", quota, n, now_ms)
            try:
                quotas.admit("a", quota, n, now_ms)
            except OverQuota as exc:
                assert counted, "refused before any count"
                assert f"of its max_pending {most}" in str(exc)
                continue
            except ValidationError:
                assert n > most
                continue
            stored += n
            if counted:
                assert stored <= most, "admitted past max_pending"
        elif kind == "fire":
            stored = max(0, stored - n)
        elif kind == "wait":
            now_ms += n
        elif in_flight:
            quotas.counted("a", stored, now_ms)
            in_flight, counted = False, True


def test_a_count_is_asked_for_once_at_a_time_and_at_most_once_a_second() -> None:
    quotas = Quotas()
    quota = Quota(max_pending=10)
    assert quotas.count_due("a", quota, 1, 0.0)  # none yet
    assert not quotas.count_due("a", quota, 1, 0.0)  # one in flight
    quotas.admit("a", quota, 1, 0.0)
    quotas.counted("a", 0, 5.0)  # the create admitted meanwhile is added
    quotas.admit("a", quota, 7, 10.0)  # 8 of 10: under 90 %, no count
    assert not quotas.count_due("a", quota, 1, 2000.0)
    assert not quotas.count_due("a", quota, 2, 500.0)  # 10 of 10, but counted 495 ms ago
    with pytest.raises(OverQuota, match="holds 8 pending tasks of its max_pending 10"):
        quotas.admit("a", quota, 3, 500.0)
    assert quotas.count_due("a", quota, 2, 5.0 + RECOUNT_MS)
    quotas.counted("a", 3, 5.0 + RECOUNT_MS)  # five fired meanwhile
    quotas.admit("a", quota, 7, 5.0 + RECOUNT_MS)


def test_a_failed_count_is_asked_for_again_a_second_later() -> None:
    quotas = Quotas()
    quota = Quota(max_pending=10)
    assert quotas.count_due("a", quota, 1, 0.0)
    quotas.count_failed("a", 100.0)
    assert not quotas.count_due("a", quota, 1, 100.0 + RECOUNT_MS - 1)
    assert quotas.count_due("a", quota, 1, 100.0 + RECOUNT_MS)


# -- the keeper ----------------------------------------------------------------------


def wait_for(condition: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


def test_the_keeper_never_waits_on_a_count() -> None:
    release = threading.Event()
    asked: list[tuple[TaskFilter, int]] = []

    def count(where: TaskFilter, up_to: int) -> int:
        asked.append((where, up_to))
        release.wait(10)
        return 5

    keeper = QuotaKeeper(count)
    billing = Namespace("billing", "billing-", ("billing.#",), Quota(max_pending=5))
    try:
        keeper.admit(billing, 1)  # not counted yet: admitted, a count started
        keeper.admit(billing, 1)  # the count blocks; the create does not
        wait_for(lambda: asked)
        assert asked == [(TaskFilter(prefix="billing-"), 6)]
        release.set()
        wait_for(lambda: keeper.counts == 1)
        with pytest.raises(OverQuota, match="holds 7 pending tasks of its max_pending 5"):
            keeper.admit(billing, 1)
    finally:
        keeper.close()


def test_a_count_that_fails_leaves_the_estimate_and_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def count(where: TaskFilter, up_to: int) -> int:
        raise OSError("database down")

    keeper = QuotaKeeper(count)
    billing = Namespace("billing", "billing-", ("billing.#",), Quota(max_pending=5))
    try:
        keeper.admit(billing, 1)
        wait_for(lambda: "could not count namespace 'billing'" in caplog.text)
        assert "database down" in caplog.text
        keeper.admit(billing, 1)
    finally:
        keeper.close()


# -- over HTTP -------------------------------------------------------------------------

TOKEN = "th_billing"
QUOTAS_FILE = f"""
[[namespace]]
name = "billing"
id_prefix = "billing-"
routing_keys = ["billing.#"]
create_rate = "1/h burst 3"
max_payload_bytes = 8

[[namespace]]
name = "shop"
id_prefix = "shop-"
routing_keys = ["shop.#"]
max_pending = 2

[[token]]
name = "billing-api"
namespace = "billing"
scopes = ["read", "write"]
sha256 = "{token_hash(TOKEN)}"

[[token]]
name = "shop-api"
namespace = "shop"
scopes = ["read", "write"]
sha256 = "{token_hash("th_shop")}"
"""


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Served]:
    path = tmp_path / "namespaces.toml"
    path.write_text(QUOTAS_FILE)
    settings = Settings(
        instance_id="unit",
        switch_interval_us=0,
        shutdown_timeout_s=1,
        api_token="admin",
        namespaces_file=str(path),
    )
    with served(settings) as daemon:
        yield daemon


async def post(client: Client, path: str, body: object, token: str) -> tuple[int, Any, Any]:
    headers = {"Authorization": f"Bearer {token}"}
    async with client.post(path, json=body, headers=headers) as r:
        return r.status, await r.json(), r.headers


def task(task_id: str, payload: str = "x", key: str = "billing.charge") -> dict[str, object]:
    return {"id": task_id, "at_ms": AT_MS, "routing_key": key, "payload": payload}


def test_a_create_over_the_rate_is_429_and_writes_nothing(daemon: Served) -> None:
    async def scenario(client: Client) -> None:
        status, body, _ = await post(
            client, "/v1/tasks/batch", {"tasks": [task("billing-1"), task("billing-2")]}, TOKEN
        )
        assert status == 201, body
        # Two more would pass the burst: the whole batch is refused.
        status, body, headers = await post(
            client, "/v1/tasks/batch", {"tasks": [task("billing-3"), task("billing-4")]}, TOKEN
        )
        assert (status, body["error"]["code"], headers["Retry-After"]) == (429, "over_quota", "1")
        assert (
            "namespace 'billing' is over its create_rate of 1/h burst 3; retry later"
            in (body["error"]["message"])
        )
        assert (await post(client, "/v1/tasks", task("billing-3"), TOKEN))[0] == 201
        status, body, _ = await post(client, "/v1/tasks", task("billing-4"), TOKEN)
        assert (status, body["error"]["code"]) == (429, "over_quota")
        # api_token has no quota.
        assert (await post(client, "/v1/tasks", task("billing-5"), "admin"))[0] == 201
        async with client.get("/metrics") as r:
            exposed = await r.text()
        assert re.search(r"^triggerhook_quota_refused_total(\{[^}]*\})? 2\.0$", exposed, re.M)

    daemon.serve(scenario)
    assert sorted(daemon.store.rows) == ["billing-1", "billing-2", "billing-3", "billing-5"]


def test_a_batch_no_wait_lets_through_is_invalid(daemon: Served) -> None:
    async def scenario(client: Client) -> None:
        tasks = [task(f"billing-{i}") for i in range(4)]
        status, body, _ = await post(client, "/v1/tasks/batch", {"tasks": tasks}, TOKEN)
        assert (status, body["error"]["code"], body["error"]["field"]) == (422, "invalid", "tasks")
        assert (
            "4 tasks are more than namespace 'billing' may create at once (3"
            in (body["error"]["message"])
        )

    daemon.serve(scenario)
    assert daemon.store.rows == {}


def test_a_payload_over_the_namespaces_bound_is_invalid(daemon: Served) -> None:
    async def scenario(client: Client) -> None:
        status, body, _ = await post(client, "/v1/tasks", task("billing-1", "123456789"), TOKEN)
        assert (status, body["error"]) == (
            422,
            {
                "code": "invalid",
                "field": "payload",
                "message": "is 9 bytes, over namespace 'billing''s max_payload_bytes of 8",
            },
        )
        batch = {"tasks": [task("billing-1"), task("billing-2", "123456789")]}
        status, body, _ = await post(client, "/v1/tasks/batch", batch, TOKEN)
        assert (status, body["error"]["field"]) == (422, "tasks[1].payload")
        # A refused create took no token of the rate: three still pass.
        batch = {"tasks": [task("billing-1"), task("billing-2"), task("billing-3")]}
        assert (await post(client, "/v1/tasks/batch", batch, TOKEN))[0] == 201

    daemon.serve(scenario)


def test_pending_tasks_over_max_pending_are_refused_until_some_fire(daemon: Served) -> None:
    quotas = daemon.api.quotas

    async def scenario(client: Client) -> None:
        async def create(task_id: str) -> tuple[int, Any]:
            status, body, _ = await post(
                client, "/v1/tasks", task(task_id, key="shop.x"), "th_shop"
            )
            return status, body

        assert (await create("shop-1"))[0] == 201  # the first count starts
        wait_for(lambda: quotas.counts >= 1)
        assert (await create("shop-2"))[0] == 201
        status, body = await create("shop-3")
        assert (status, body["error"]["code"]) == (429, "over_quota")
        assert (
            "namespace 'shop' holds 2 pending tasks of its max_pending 2"
            in (body["error"]["message"])
        )
        async with client.delete(
            "/v1/tasks/shop-1", headers={"Authorization": "Bearer th_shop"}
        ) as r:
            assert r.status == 204
        # Seen at the next count (a second after the last): then admitted.
        deadline = time.monotonic() + 10
        while (await create("shop-3"))[0] != 201:
            assert time.monotonic() < deadline, "never admitted after a task left"
            await asyncio.sleep(0.05)

    daemon.serve(scenario)
    assert sorted(daemon.store.rows) == ["shop-2", "shop-3"]


# -- over the AMQP command channel ----------------------------------------------------------


def test_a_command_over_the_quota_is_answered_over_quota_and_dead_lettered() -> None:
    store = FakeStore()
    hook = assemble(
        Settings(instance_id="unit", switch_interval_us=0, shutdown_timeout_s=1),
        store,
        FakeClock(),
        lambda buffer, sink, retry, fail: FakePublisher(),
    )
    billing = Namespace(
        "billing", "billing-", ("billing.#",), Quota(create_rate=RateLimit("#", 1 / 3600, 1))
    )
    keeper = QuotaKeeper(lambda where, up_to: 0)
    scoped = ScopedHook(hook, Principal("billing-api", billing), keeper)
    hook.start()
    try:
        body = b'{"id": "billing-%d", "delay_ms": 60000, "routing_key": "billing.x"}'
        execute(scoped, Command("create", body % 1), 10_000)
        with pytest.raises(Rejected) as refused:
            execute(scoped, Command("create", body % 2), 10_000)
        assert refused.value.code == "over_quota"
        assert "namespace 'billing' is over its create_rate of 1/h burst 1" in (
            refused.value.message
        )
        rendering = AMQP_RENDERING[Outcome.OVER_QUOTA]
        assert rendering is not None
        assert rendering.disposition is Disposition.DEAD_LETTERED
        assert list(store.rows) == ["billing-1"]
    finally:
        hook.close()
        keeper.close()


def test_the_wiring_builds_one_keeper_in_one_process() -> None:
    """api_processes = 0 (everything in one process) is a share of 1, not a
    division by zero."""
    service = build_dev(
        Settings(api_processes=0, http_port=18099), DevOptions(":memory:", stdout=False)
    )
    try:
        assert service.http is not None
        billing = Namespace(
            "billing", "billing-", ("billing.#",), Quota(create_rate=RateLimit("#", 1 / 3600, 2))
        )
        service.http.quotas.admit(billing, 2)  # the whole burst: a share of 1
    finally:
        service.hook.close()


# -- over gRPC, from the same bucket -------------------------------------------------------


def test_a_grpc_create_over_the_quota_is_resource_exhausted_from_the_same_bucket(
    tmp_path: Path,
) -> None:
    path = tmp_path / "namespaces.toml"
    path.write_text(QUOTAS_FILE)
    settings = Settings(
        instance_id="unit", switch_interval_us=0, shutdown_timeout_s=1, namespaces_file=str(path)
    )
    with grpc_served(settings, token=TOKEN) as api:

        async def http_creates(client: Client) -> None:
            batch = {"tasks": [task("billing-1"), task("billing-2")]}
            assert (await post(client, "/v1/tasks/batch", batch, TOKEN))[0] == 201

        api.daemon.serve(http_creates)  # two of the burst of three
        request = pb.CreateRequest(id="billing-3", at_ms=AT_MS, routing_key="billing.charge")
        assert api.caller.call("Create", request).outcome == "created"
        request = pb.CreateRequest(id="billing-4", at_ms=AT_MS, routing_key="billing.charge")
        refused = api.caller.refused("Create", request)
        assert (refused.status, refused.code) == (
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "over_quota",
        )
        assert "over its create_rate of 1/h burst 3" in refused.message
        client = GrpcClient(f"127.0.0.1:{api.api.port}", TOKEN)
        with client, pytest.raises(ClientOverQuota) as raised:
            client.create(id="billing-5", at_ms=AT_MS, routing_key="billing.charge")
        assert raised.value.code == "over_quota"
        assert sorted(api.daemon.store.rows) == ["billing-1", "billing-2", "billing-3"]
