"""docs/webhooks.md's verification snippet, run against requests signed by
the daemon's own code (WebhookSink, as the bridge and ``triggerhook dev``
send them): the documented check cannot drift from the signature."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

from support.docblocks import REPO, Kind, extract
from support.webhook import WebhookServer

from triggerhook.local.sinks import Event, WebhookSink

Verify = Callable[[list[bytes], dict[str, str], bytes, int], bool]
SECRETS = (b"whsec_new_0123456789", b"whsec_old_0123456789")


def documented_verify() -> Verify:
    blocks = extract(Path(REPO / "docs" / "webhooks.md"))
    (code,) = [b.text for b in blocks if b.kind is Kind.PYTHON and "def verify" in b.text]
    namespace: dict[str, object] = {}
    exec(compile(code, "docs/webhooks.md", "exec"), namespace)
    return cast(Verify, namespace["verify"])


def test_the_documented_snippet_verifies_a_signed_request() -> None:
    verify = documented_verify()
    event = Event("task-1", "billing.due", {"x-due-ms": 1, "tenant": "acme"}, b'{"a":1}')
    with WebhookServer(204) as server:
        sink = WebhookSink(server.url(), 5.0, allow_private=True, secrets=SECRETS)
        try:
            sink.deliver(event)
        finally:
            sink.close()
        (got,) = server.wait_for(1, 5.0)
    assert got.headers["x-triggerhook-signature"].count("v1=") == 2  # both secrets
    assert verify([SECRETS[0]], got.headers, got.body, 300)
    assert verify([SECRETS[1]], got.headers, got.body, 300)  # the old one, while rotating
    assert not verify([b"another_secret_0123"], got.headers, got.body, 300)
    assert not verify([SECRETS[0]], got.headers, got.body + b" ", 300)  # tampered
    stale = {**got.headers, "x-triggerhook-timestamp": str(int(time.time()) - 3600)}
    assert not verify([SECRETS[0]], stale, got.body, 300)  # replayed an hour later
