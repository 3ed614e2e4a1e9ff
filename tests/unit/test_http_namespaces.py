"""Namespaces over the HTTP API (docs/design/shared-service.md): a token of
namespace A cannot read, list, count, cancel, move or create anything of
namespace B, and each refusal is a 403 naming the rule that writes nothing;
``api_token`` still sees everything. Over the in-memory store, as
test_http_api.py (the engine runs; the clock stands still)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.namespaces import (
    ADMIN,
    AT_MS,
    BILLING,
    NAMESPACES,
    OUTSIDE,
    READER,
    SHOP,
    answer,
    bearer,
    create,
    forbidden,
)
from support.served import Client, Served, served

from triggerhook.settings import Settings


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Served]:
    path = tmp_path / "namespaces.toml"
    path.write_text(NAMESPACES)
    settings = Settings(
        instance_id="unit",
        switch_interval_us=0,
        shutdown_timeout_s=1,
        api_token=ADMIN,
        namespaces_file=str(path),
        default_routing_key="billing.default",
    )
    with served(settings) as daemon:
        yield daemon


def test_a_namespace_token_creates_only_its_ids_and_routing_keys(daemon: Served) -> None:
    async def scenario(client: Client) -> None:
        assert (await create(client, BILLING, "billing-1", "billing.charge"))[0] == 201
        assert await create(client, BILLING, "shop-1", "billing.charge") == (
            403,
            forbidden(OUTSIDE),
        )
        assert await create(client, BILLING, "billing-2", "shop.paid") == (
            403,
            forbidden(
                "routing key 'shop.paid' is not one namespace 'billing' publishes to (billing.#)"
            ),
        )
        created = await create(client, SHOP, "shop-1", "shop.paid")
        assert (created[0], created[1]["id"], created[1]["outcome"]) == (201, "shop-1", "created")
        # The default routing key is judged too: billing.default is not shop.*.
        status, body = await answer(
            client.post("/v1/tasks", json={"id": "shop-2", "at_ms": AT_MS}, headers=bearer(SHOP))
        )
        assert (status, body["error"]["code"]) == (403, "forbidden")
        assert "'billing.default'" in body["error"]["message"]

    daemon.serve(scenario)
    assert sorted(daemon.store.rows) == ["billing-1", "shop-1"]


def test_a_create_without_an_id_gets_one_in_its_namespace(daemon: Served) -> None:
    async def scenario(client: Client) -> None:
        body = {"at_ms": AT_MS, "routing_key": "billing.x"}
        status, made = await answer(client.post("/v1/tasks", json=body, headers=bearer(BILLING)))
        assert status == 201
        assert made["id"].startswith("billing-")
        assert len(made["id"]) == len("billing-") + 36

    daemon.serve(scenario)


def test_a_batch_with_one_task_outside_writes_nothing_and_names_it(daemon: Served) -> None:
    async def scenario(client: Client) -> None:
        tasks = [
            {"id": "billing-1", "at_ms": AT_MS, "routing_key": "billing.a"},
            {"id": "shop-1", "at_ms": AT_MS, "routing_key": "billing.a"},
        ]
        status, body = await answer(
            client.post("/v1/tasks/batch", json={"tasks": tasks}, headers=bearer(BILLING))
        )
        assert (status, body) == (403, forbidden(f"tasks[1]: {OUTSIDE}"))

    daemon.serve(scenario)
    assert daemon.store.rows == {}


def test_another_namespaces_task_cannot_be_read_moved_or_cancelled(daemon: Served) -> None:
    async def scenario(client: Client) -> None:
        assert (await create(client, SHOP, "shop-1", "shop.paid"))[0] == 201
        calls = [
            client.get("/v1/tasks/shop-1", headers=bearer(BILLING)),
            client.patch("/v1/tasks/shop-1", json={"at_ms": AT_MS + 1}, headers=bearer(BILLING)),
            client.delete("/v1/tasks/shop-1", headers=bearer(BILLING)),
            client.post("/v1/tasks/shop-1/pause", headers=bearer(BILLING)),
            client.post("/v1/tasks/shop-1/trigger", headers=bearer(BILLING)),
        ]
        for call in calls:
            assert await answer(call) == (403, forbidden(OUTSIDE))
        # The same answer for an id that does not exist: nothing is told.
        missing = await answer(client.get("/v1/tasks/shop-404", headers=bearer(BILLING)))
        assert missing[0] == 403
        mine = await answer(client.get("/v1/tasks/shop-1", headers=bearer(SHOP)))
        assert (mine[0], mine[1]["due_ms"]) == (200, AT_MS)

    daemon.serve(scenario)
    stored = daemon.store.row("shop-1")
    assert stored is not None and stored.task.due_ms == AT_MS


def test_listing_counting_and_the_timeline_see_only_the_namespace(daemon: Served) -> None:
    async def scenario(client: Client) -> None:
        for task_id, token, key in (
            ("billing-1", BILLING, "billing.a"),
            ("billing-2", BILLING, "billing.b"),
            ("shop-1", SHOP, "shop.a"),
        ):
            assert (await create(client, token, task_id, key))[0] == 201

        async def ids(token: str, query: str = "") -> list[str]:
            status, page = await answer(client.get(f"/v1/tasks{query}", headers=bearer(token)))
            assert status == 200
            return [task["id"] for task in page["tasks"]]

        assert await ids(BILLING) == ["billing-1", "billing-2"]
        assert await ids(READER, "?prefix=b") == ["billing-1", "billing-2"]
        assert await ids(BILLING, "?prefix=billing-2") == ["billing-2"]
        assert await ids(BILLING, "?prefix=shop") == []
        assert await ids(ADMIN) == ["billing-1", "billing-2", "shop-1"]
        counted = await answer(client.get("/v1/tasks/count", headers=bearer(SHOP)))
        assert counted == (200, {"count": 1, "at_least": False})
        query = f"?start_ms={AT_MS // 60_000 * 60_000}&bucket_ms=60000&buckets=1"
        status, timeline = await answer(
            client.get(f"/v1/tasks/timeline{query}", headers=bearer(SHOP))
        )
        assert status == 200
        assert timeline["routing_keys"] == {"shop.a": [1]}

    daemon.serve(scenario)


def test_bulk_cancel_needs_admin_and_cancels_only_the_namespaces_tasks(daemon: Served) -> None:
    async def scenario(client: Client) -> None:
        for task_id, token, key in (
            ("billing-1", BILLING, "billing.a"),
            ("shop-1", SHOP, "shop.a"),
        ):
            assert (await create(client, token, task_id, key))[0] == 201

        def cancel(token: str, prefix: str) -> Any:
            return client.post("/v1/tasks/cancel", json={"prefix": prefix}, headers=bearer(token))

        refused = await answer(cancel(SHOP, "shop-"))
        assert refused == (403, forbidden("token 'shop-api' has no 'admin' scope"))
        nothing = await answer(cancel(BILLING, "shop-"))
        assert nothing == (200, {"cancelled": 0, "too_late": 0, "next_cursor": None})
        done = await answer(cancel(BILLING, "b"))
        assert done == (200, {"cancelled": 1, "too_late": 0, "next_cursor": None})

    daemon.serve(scenario)
    assert list(daemon.store.rows) == ["shop-1"]


def test_a_read_only_token_cannot_write_and_an_unknown_one_is_401(daemon: Served) -> None:
    async def scenario(client: Client) -> None:
        assert await create(client, READER, "billing-1", "billing.a") == (
            403,
            forbidden("token 'billing-ro' has no 'write' scope"),
        )
        status, _ = await create(client, "th_nobody", "billing-1", "billing.a")
        assert status == 401
        listed = await answer(client.get("/v1/status", headers=bearer(READER)))
        assert listed[0] == 200

    daemon.serve(scenario)
    assert daemon.store.rows == {}
