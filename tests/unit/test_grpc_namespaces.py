"""Namespaces over the gRPC API (docs/design/shared-service.md), as
test_http_namespaces.py over HTTP: a token of namespace A cannot read, list,
count, cancel, move or create anything of namespace B (PERMISSION_DENIED
naming the rule, nothing written); ``api_token`` sees everything."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from support.grpc_served import GrpcServed, grpc_served
from support.namespaces import ADMIN, AT_MS, BILLING, NAMESPACES, OUTSIDE, READER, SHOP
from triggerhook_client.errors import Forbidden
from triggerhook_client.grpc import GrpcClient
from triggerhook_client.grpc import triggerhook_pb2 as pb

from triggerhook.settings import Settings

DENIED = grpc.StatusCode.PERMISSION_DENIED


@pytest.fixture
def api(tmp_path: Path) -> Iterator[GrpcServed]:
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
    with grpc_served(settings, token=ADMIN) as served:
        yield served


def create(task_id: str | None, key: str) -> pb.CreateRequest:
    return pb.CreateRequest(id=task_id, at_ms=AT_MS, routing_key=key)


def test_a_namespace_token_creates_only_its_ids_and_routing_keys(api: GrpcServed) -> None:
    billing, shop = api.caller.as_(BILLING), api.caller.as_(SHOP)
    assert billing.call("Create", create("billing-1", "billing.charge")).outcome == "created"
    refused = billing.refused("Create", create("shop-1", "billing.charge"))
    assert (refused.status, refused.code, refused.message) == (DENIED, "forbidden", OUTSIDE)
    refused = billing.refused("Create", create("billing-2", "shop.paid"))
    assert (refused.status, refused.message) == (
        DENIED,
        "routing key 'shop.paid' is not one namespace 'billing' publishes to (billing.#)",
    )
    made = billing.call("Create", create(None, "billing.x"))  # no id: one of its own
    assert made.id.startswith("billing-")
    batch = pb.CreateBatchRequest(tasks=[create("billing-3", "billing.x"), create("shop-1", "x")])
    refused = billing.refused("CreateBatch", batch)
    assert (refused.status, refused.message) == (DENIED, f"tasks[1]: {OUTSIDE}")
    assert shop.call("Create", create("shop-1", "shop.paid")).outcome == "created"
    assert sorted(api.daemon.store.ids()) == ["billing-1", made.id, "shop-1"]


def test_another_namespaces_task_cannot_be_read_moved_or_cancelled(api: GrpcServed) -> None:
    api.caller.as_(SHOP).call("Create", create("shop-1", "shop.paid"))
    billing = api.caller.as_(BILLING)
    for method, request in (
        ("Get", pb.GetRequest(id="shop-1")),
        ("Reschedule", pb.RescheduleRequest(id="shop-1", delay_ms=60_000)),
        ("Cancel", pb.CancelRequest(id="shop-1")),
    ):
        refused = billing.refused(method, request)
        assert (refused.status, refused.code, refused.message) == (DENIED, "forbidden", OUTSIDE)
    # The same answer whether or not such a task exists: nothing is told about B.
    assert billing.refused("Get", pb.GetRequest(id="shop-2")).message == OUTSIDE.replace(
        "shop-1", "shop-2"
    )
    assert api.caller.call("Get", pb.GetRequest(id="shop-1")).due_ms == AT_MS  # unchanged


def test_listing_and_counting_see_only_the_namespace(api: GrpcServed) -> None:
    api.caller.as_(SHOP).call("Create", create("shop-1", "shop.paid"))
    api.caller.as_(BILLING).call("Create", create("billing-1", "billing.x"))
    reader = api.caller.as_(READER)
    assert [t.id for t in reader.call("List", pb.ListRequest()).tasks] == ["billing-1"]
    assert [t.id for t in reader.call("List", pb.ListRequest(prefix="shop-")).tasks] == []
    assert reader.call("Count", pb.CountRequest()).count == 1
    assert api.caller.call("Count", pb.CountRequest()).count == 2  # api_token: every namespace


def test_a_read_only_token_cannot_write(api: GrpcServed) -> None:
    reader = api.caller.as_(READER)
    refused = reader.refused("Create", create("billing-1", "billing.x"))
    assert (refused.status, refused.code) == (DENIED, "forbidden")
    assert "write" in refused.message
    assert api.daemon.store.ids() == set()


def test_the_python_grpc_client_raises_forbidden(api: GrpcServed) -> None:
    api.caller.as_(SHOP).call("Create", create("shop-1", "shop.paid"))
    billing = GrpcClient(f"127.0.0.1:{api.api.port}", BILLING)
    with billing, pytest.raises(Forbidden) as refused:
        billing.cancel("shop-1")
    assert (refused.value.code, refused.value.message) == ("forbidden", OUTSIDE)
