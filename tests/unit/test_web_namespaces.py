"""The web view with namespaces (docs/design/shared-service.md): a token of
the namespaces file logs in (or sends its bearer token) and sees and
cancels only its namespace's tasks, with its scopes; a cancel out of them is
a 403 page naming the rule that cancels nothing; removing the token from
the file ends its sessions. Over the in-memory store, as
test_http_namespaces.py."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.namespaces import BILLING, NAMESPACES, READER, SHOP, bearer, create
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
        namespaces_file=str(path),  # and no api_token: only the file's tokens
        namespaces_reload_s=0.05,
        web_allow_cancel=True,
        default_routing_key="billing.default",
    )
    with served(settings) as daemon:
        yield daemon


async def tasks_of(client: Client) -> None:
    for task_id, token, key in (
        ("billing-1", BILLING, "billing.a"),
        ("billing-2", BILLING, "billing.b"),
        ("shop-1", SHOP, "shop.a"),
    ):
        assert (await create(client, token, task_id, key))[0] == 201


async def page(client: Client, path: str = "/ui", **headers: str) -> tuple[int, str]:
    async with client.get(path, headers=headers, allow_redirects=False) as r:
        return r.status, await r.text()


def listed(html: str) -> list[str]:
    """The task ids the listing shows (each in a cancel form's action)."""
    return sorted(set(re.findall(r'action="/ui/tasks/([^/"]+)/cancel"', html)))


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]{64})"', html)
    assert found is not None, "no form token on the page"
    return found.group(1)


async def log_in(client: Client, token: str) -> int:
    async with client.post("/ui/login", data={"token": token}, allow_redirects=False) as r:
        return r.status


def test_a_namespace_token_logs_in_and_sees_only_its_namespace(daemon: Served) -> None:
    async def scenario(client: Client) -> None:
        await tasks_of(client)
        status, _ = await page(client)
        assert status == 303  # to the login page: the file's tokens are needed
        assert await log_in(client, "th_nobody") == 401
        assert await log_in(client, BILLING) == 303
        status, html = await page(client)
        assert status == 200
        assert listed(html) == ["billing-1", "billing-2"]
        assert "billing-api (namespace billing)" in html
        # Its filter is narrowed as the API's is: another prefix shows nothing.
        assert listed((await page(client, "/ui?prefix=shop-"))[1]) == []

    daemon.serve(scenario)


def test_a_bearer_token_sees_its_own_namespace(daemon: Served) -> None:
    async def scenario(client: Client) -> None:
        await tasks_of(client)
        status, html = await page(client, **bearer(SHOP))
        assert (status, listed(html)) == (200, ["shop-1"])
        status, _ = await page(client, **bearer("th_nobody"))
        assert status == 303

    daemon.serve(scenario)


def test_a_cancel_out_of_the_namespace_or_scopes_is_refused_naming_the_rule(
    daemon: Served,
) -> None:
    async def scenario(client: Client) -> None:
        await tasks_of(client)
        assert await log_in(client, BILLING) == 303
        csrf = csrf_of((await page(client))[1])

        async def post(path: str, **fields: str) -> tuple[int, str]:
            form = {"csrf": csrf, **fields}
            async with client.post(path, data=form, allow_redirects=False) as r:
                return r.status, await r.text()

        status, html = await post("/ui/tasks/shop-1/cancel")
        assert status == 403
        assert "task id &#x27;shop-1&#x27; is outside namespace &#x27;billing&#x27;" in html
        # Its own: cancelled.
        assert (await post("/ui/tasks/billing-1/cancel"))[0] == 303
        # A bulk cancel of a prefix outside: nothing of the other namespace goes.
        assert (await post("/ui/cancel", prefix="shop-"))[0] == 303

    daemon.serve(scenario)
    assert sorted(daemon.store.rows) == ["billing-2", "shop-1"]


def test_each_page_and_form_needs_its_scope(daemon: Served) -> None:
    async def scenario(client: Client) -> None:
        await tasks_of(client)
        assert await log_in(client, READER) == 303  # billing-ro: read only
        status, html = await page(client)
        assert (status, listed(html)) == (200, ["billing-1", "billing-2"])
        form = {"csrf": csrf_of(html)}
        async with client.post("/ui/tasks/billing-1/cancel", data=form) as r:
            assert r.status == 403
            assert "token &#x27;billing-ro&#x27; has no &#x27;write&#x27; scope" in (await r.text())
        # shop-api has read and write, no admin: no bulk cancel.
        assert await log_in(client, SHOP) == 303
        form = {"csrf": csrf_of((await page(client))[1]), "prefix": "shop-"}
        async with client.post("/ui/cancel", data=form) as r:
            assert r.status == 403
            assert "has no &#x27;admin&#x27; scope" in await r.text()

    daemon.serve(scenario)
    assert sorted(daemon.store.rows) == ["billing-1", "billing-2", "shop-1"]


def test_removing_a_token_from_the_file_ends_its_sessions(daemon: Served, tmp_path: Path) -> None:
    path = tmp_path / "namespaces.toml"

    async def scenario(client: Client) -> None:
        assert await log_in(client, BILLING) == 303
        assert (await page(client))[0] == 200
        kept = NAMESPACES.split("[[token]]")
        path.write_text("[[token]]".join(t for t in kept if '"billing-api"' not in t))
        deadline = time.monotonic() + 10
        while (await page(client))[0] == 200:  # until the file is looked at again
            assert time.monotonic() < deadline, "the session outlived its token"
        assert (await page(client))[0] == 303

    daemon.serve(scenario)
