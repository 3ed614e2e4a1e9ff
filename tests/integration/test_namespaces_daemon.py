"""Namespaces on a real daemon (``triggerhook run``: its API process, MariaDB,
RabbitMQ's command channel): a token of one namespace cannot read, list,
cancel or create another's tasks, over HTTP or AMQP commands; a
token added to the file works within ``namespaces_reload_s`` and a removed
one stops, with no restart; a wrong file stops the daemon at start, naming
the entry (docs/api.md, "Namespaces: scoped tokens")."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.commands import CommandClient
from support.daemon import daemon_env, run_cli
from support.http import ROUTED, Api, api_daemon
from support.waiting import wait_until

from triggerhook.domain.namespaces import token_hash

ADMIN = "admin-token"
BILLING, SHOP, ROTATED = "th_billing", "th_shop", "th_rotated"
AT_MS = int(time.time() * 1000) + 3_600_000  # an hour away: never fired meanwhile


def namespaces_text(*tokens: tuple[str, str, str]) -> str:
    text = (
        '[[namespace]]\nname = "billing"\nid_prefix = "billing-"\n'
        'routing_keys = ["fire.billing.#"]\n'
        '[[namespace]]\nname = "shop"\nid_prefix = "shop-"\nrouting_keys = ["fire.shop"]\n'
    )
    for name, namespace, secret in tokens:
        text += (
            f'[[token]]\nname = "{name}"\nnamespace = "{namespace}"\n'
            f'scopes = ["read", "write"]\nsha256 = "{token_hash(secret)}"\n'
        )
    return text


@pytest.fixture(scope="module")
def namespaces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("namespaces") / "namespaces.toml"
    path.write_text(
        namespaces_text(("billing-api", "billing", BILLING), ("shop-api", "shop", SHOP))
    )
    return path


@pytest.fixture(scope="module")
def api(mysql_url: str, amqp_url: str, namespaces: Path) -> Iterator[Api]:
    with api_daemon(
        mysql_url,
        amqp_url,
        default_routing_key=ROUTED,
        api_token=ADMIN,
        namespaces_file=str(namespaces),
        namespaces_reload_s="0.2",
    ) as served:
        yield served
        assert served.daemon.terminate() == 0, served.daemon.tail()
        assert served.daemon.count("Traceback") == 0, served.daemon.tail()


def client(api: Api, token: str) -> httpx.Client:
    return httpx.Client(
        base_url=api.url, headers={"Authorization": f"Bearer {token}"}, timeout=30.0
    )


def test_a_namespace_sees_and_creates_only_its_own(api: Api) -> None:
    with client(api, BILLING) as billing, client(api, SHOP) as shop, client(api, ADMIN) as admin:
        created = billing.post(
            "/v1/tasks", json={"id": "billing-1", "at_ms": AT_MS, "routing_key": "fire.billing.x"}
        )
        assert created.status_code == 201, created.text
        assert (
            shop.post(
                "/v1/tasks", json={"id": "shop-1", "at_ms": AT_MS, "routing_key": "fire.shop"}
            ).status_code
            == 201
        )
        refused = shop.get("/v1/tasks/billing-1")
        assert refused.status_code == 403
        assert refused.json()["error"] == {
            "code": "forbidden",
            "message": (
                "task id 'billing-1' is outside namespace 'shop' (its ids start with 'shop-')"
            ),
        }
        assert shop.delete("/v1/tasks/billing-1").status_code == 403
        wrong_key = shop.post(
            "/v1/tasks", json={"id": "shop-2", "at_ms": AT_MS, "routing_key": "fire.billing.x"}
        )
        assert wrong_key.status_code == 403
        assert [t["id"] for t in shop.get("/v1/tasks").json()["tasks"]] == ["shop-1"]
        assert [t["id"] for t in admin.get("/v1/tasks").json()["tasks"]] == ["billing-1", "shop-1"]
        assert billing.get("/v1/tasks/billing-1").json()["id"] == "billing-1"


def test_a_token_added_or_removed_in_the_file_takes_effect_without_a_restart(
    api: Api, namespaces: Path
) -> None:
    with client(api, ROTATED) as rotated, client(api, SHOP) as shop:
        assert rotated.get("/v1/tasks").status_code == 401
        namespaces.write_text(
            namespaces_text(("billing-api", "billing", BILLING), ("shop-new", "shop", ROTATED))
        )
        os.utime(namespaces, ns=(1, 1))  # a changed mtime, whatever the clock's resolution
        assert wait_until(lambda: rotated.get("/v1/tasks").status_code == 200, 10.0)
        assert shop.get("/v1/tasks").status_code == 401  # its line is gone


def test_a_wrong_file_stops_the_daemon_at_start_naming_the_entry(
    mysql_url: str, amqp_url: str, tmp_path: Path
) -> None:
    path = tmp_path / "wrong.toml"
    path.write_text(
        '[[token]]\nname = "t"\nnamespace = "nowhere"\nscopes = ["read"]\n'
        f'sha256 = "{token_hash("x")}"\n'
    )
    env = daemon_env(
        f"{mysql_url}/unused",
        amqp_url,
        "unused",
        "wrong",
        namespaces_file=str(path),
    )
    done = run_cli(["run"], env)
    assert done.returncode == 2, done.stderr
    assert "token[0].namespace: no namespace named 'nowhere'" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_command_outside_its_namespace_is_refused_and_dead_lettered(
    api: Api, amqp_url: str
) -> None:
    queue = f"{api.names.exchange}.commands"
    with CommandClient(amqp_url, queue, token=BILLING) as billing:
        mine = {"id": "billing-cmd", "at_ms": AT_MS, "routing_key": "fire.billing.y"}
        assert billing.call("create", mine)["outcome"] == "created"
        theirs = {"id": "shop-cmd", "at_ms": AT_MS, "routing_key": "fire.shop"}
        refused = billing.call("create", theirs)
        assert refused == {
            "ok": False,
            "error": {
                "code": "forbidden",
                "message": (
                    "task id 'shop-cmd' is outside namespace 'billing'"
                    " (its ids start with 'billing-')"
                ),
            },
        }
        (dead,) = billing.dead_letters(1, 15.0)
        assert dead.json() == theirs
        assert billing.call("cancel", {"id": "shop-1"})["error"]["code"] == "forbidden"
    with client(api, ADMIN) as admin:
        assert admin.get("/v1/tasks/shop-cmd").status_code == 404  # nothing written
        assert admin.get("/v1/tasks/shop-1").status_code == 200  # not cancelled
