"""The gRPC API on a real daemon (``triggerhook run`` with grpc_enabled: its
API process, MariaDB, RabbitMQ): a task created through gRPC is stored (the
HTTP API finds it) and fires on RabbitMQ; a namespace's token cannot read,
list, cancel or create another's tasks through gRPC (docs/api.md, "gRPC")."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from support.daemon import DaemonGroup, closed_port
from support.grpc_served import Caller
from support.http import Api, api_daemon
from support.waiting import wait_for
from triggerhook_client.grpc import triggerhook_pb2 as pb

from triggerhook.domain.namespaces import token_hash

ADMIN = "admin-token"
BILLING, SHOP = "th_billing", "th_shop"
AT_MS = int(time.time() * 1000) + 3_600_000  # an hour away: never fired meanwhile
NAMESPACES = f"""
[[namespace]]
name = "billing"
id_prefix = "billing-"
routing_keys = ["fire.billing.#"]

[[namespace]]
name = "shop"
id_prefix = "shop-"
routing_keys = ["fire.shop"]

[[token]]
name = "billing-api"
namespace = "billing"
scopes = ["read", "write"]
sha256 = "{token_hash(BILLING)}"

[[token]]
name = "shop-api"
namespace = "shop"
scopes = ["read", "write"]
sha256 = "{token_hash(SHOP)}"
"""


@pytest.fixture(scope="module")
def served(
    mysql_url: str, amqp_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Api, Caller]]:
    path = tmp_path_factory.mktemp("grpc") / "namespaces.toml"
    path.write_text(NAMESPACES)
    port = closed_port()
    with api_daemon(
        mysql_url,
        amqp_url,
        api_token=ADMIN,
        namespaces_file=str(path),
        grpc_enabled="true",
        grpc_port=port,
    ) as api:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            grpc.channel_ready_future(channel).result(timeout=20)
            yield api, Caller(channel, ADMIN)
        assert api.daemon.terminate() == 0, api.daemon.tail()
        assert api.daemon.count("Traceback") == 0, api.daemon.tail()


def test_a_task_created_through_grpc_is_stored_and_fires(served: tuple[Api, Caller]) -> None:
    api, caller = served
    billing = caller.as_(BILLING)
    later = billing.call(
        "Create", pb.CreateRequest(id="billing-later", at_ms=AT_MS, routing_key="fire.billing.x")
    )
    assert (later.id, later.due_ms, later.outcome) == ("billing-later", AT_MS, "created")
    with api.client() as http:  # stored in MariaDB: the HTTP API reads it back
        stored = http.get("/v1/tasks/billing-later")
        assert stored.status_code == 200, stored.text
        assert stored.json()["due_ms"] == AT_MS
    soon = billing.call(
        "Create",
        pb.CreateRequest(
            id="billing-soon", delay_ms=200, routing_key="fire.billing.now", payload=b"\x00hi"
        ),
    )
    assert soon.outcome == "created"
    [event] = api.events.collect(1, timeout_s=20)
    assert (event.routing_key, event.body) == ("fire.billing.now", b"\x00hi")
    listed = [t.id for t in billing.call("List", pb.ListRequest()).tasks]
    assert "billing-later" in listed and all(i.startswith("billing-") for i in listed)


def test_a_namespace_token_cannot_reach_another_namespace(served: tuple[Api, Caller]) -> None:
    _api, caller = served
    shop, billing = caller.as_(SHOP), caller.as_(BILLING)
    assert shop.call(
        "Create", pb.CreateRequest(id="shop-1", at_ms=AT_MS, routing_key="fire.shop")
    ).outcome == ("created")
    denied = grpc.StatusCode.PERMISSION_DENIED
    for method, request in (
        ("Get", pb.GetRequest(id="shop-1")),
        ("Cancel", pb.CancelRequest(id="shop-1")),
        ("Reschedule", pb.RescheduleRequest(id="shop-1", delay_ms=1000)),
        ("Create", pb.CreateRequest(id="shop-2", at_ms=AT_MS, routing_key="fire.shop")),
    ):
        refused = billing.refused(method, request)
        assert (refused.status, refused.code) == (denied, "forbidden"), method
    assert "shop-1" not in [t.id for t in billing.call("List", pb.ListRequest()).tasks]
    assert billing.call("Count", pb.CountRequest(prefix="shop-")).count == 0
    assert caller.call("Get", pb.GetRequest(id="shop-1")).due_ms == AT_MS  # untouched
    assert caller.as_(None).refused("Count", pb.CountRequest()).status is (
        grpc.StatusCode.UNAUTHENTICATED
    )


def test_a_taken_grpc_port_fails_the_start(
    served: tuple[Api, Caller], daemons: DaemonGroup
) -> None:
    api, _caller = served
    env = {
        **api.daemon.env,
        "TRIGGERHOOK_INSTANCE_ID": "clash",
        "TRIGGERHOOK_HTTP_PORT": str(closed_port()),
    }
    clash = daemons.start(env, "clash")
    assert clash.wait_exit(30) == 1
    port = env["TRIGGERHOOK_GRPC_PORT"]
    wait_for(lambda: clash.count(f"cannot listen on 127.0.0.1:{port}") == 1, 5, clash.tail)
    assert clash.count("Traceback") == 0, clash.tail()


def test_the_proto_is_in_the_package() -> None:
    """The client's package carries it (the daemon's serves it, and imports its messages)."""
    import triggerhook_client.grpc as package

    assert (Path(package.__file__).parent / "triggerhook.proto").is_file()


def test_several_api_processes_share_the_grpc_port(mysql_url: str, amqp_url: str) -> None:
    port = closed_port()
    with api_daemon(
        mysql_url, amqp_url, api_processes=2, grpc_enabled="true", grpc_port=port
    ) as api:
        # Each API process binds it (the daemon is ready when one of them is).
        wait_for(lambda: api.daemon.count("grpc api listening") == 2, 20, api.daemon.tail)
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            grpc.channel_ready_future(channel).result(timeout=20)
            caller = Caller(channel)
            for n in range(4):
                request = pb.CreateRequest(id=f"many-{n}", at_ms=AT_MS, routing_key="fire.x")
                assert caller.call("Create", request).outcome == "created"
            assert caller.call("Count", pb.CountRequest(prefix="many-")).count == 4
        assert api.daemon.count("cannot listen") == 0, api.daemon.tail()
        assert api.daemon.terminate() == 0, api.daemon.tail()
