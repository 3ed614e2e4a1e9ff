"""The namespaces file and tokens the namespaces tests share
(tests/unit/test_http_namespaces.py, test_web_namespaces.py,
test_grpc_namespaces.py), and their HTTP requests."""

from __future__ import annotations

from typing import Any

from support.served import Client
from triggerhook.domain.namespaces import token_hash

AT_MS = 1_893_456_000_250  # far beyond arm_ahead_ms: never armed meanwhile
ADMIN = "admin-secret"
BILLING, SHOP, READER = "th_billing", "th_shop", "th_billing_reader"

NAMESPACES = f"""
[[namespace]]
name = "billing"
id_prefix = "billing-"
routing_keys = ["billing.#"]

[[namespace]]
name = "shop"
id_prefix = "shop-"
routing_keys = ["shop.*"]

[[token]]
name = "billing-api"
namespace = "billing"
scopes = ["read", "write", "admin"]
sha256 = "{token_hash(BILLING)}"

[[token]]
name = "billing-ro"
namespace = "billing"
scopes = ["read"]
sha256 = "{token_hash(READER)}"

[[token]]
name = "shop-api"
namespace = "shop"
scopes = ["read", "write"]
sha256 = "{token_hash(SHOP)}"
"""


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def answer(response: Any) -> tuple[int, Any]:
    async with response as r:
        body = await r.json() if r.content_type == "application/json" else None
        return r.status, body


def forbidden(message: str) -> dict[str, Any]:
    return {"error": {"code": "forbidden", "message": message}}


async def create(client: Client, token: str, task_id: str, key: str) -> tuple[int, Any]:
    body = {"id": task_id, "at_ms": AT_MS, "routing_key": key}
    return await answer(client.post("/v1/tasks", json=body, headers=bearer(token)))


OUTSIDE = "task id 'shop-1' is outside namespace 'billing' (its ids start with 'billing-')"
