"""What each interface is configured with: its share of
:class:`~triggerhook.settings.Settings` (see there for each value's meaning),
built by the composition root (:mod:`triggerhook.wiring`). An interface never
sees the rest: no database URL or broker password in the HTTP layer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class HttpConfig:
    host: str
    port: int  # 0: any free port
    api_token: str  # empty: no authentication
    metrics_require_token: bool
    keepalive_timeout_s: float
    max_connections: int
    header_timeout_s: float
    body_timeout_s: float
    max_body_bytes: int
    max_batch_tasks: int
    max_payload_bytes: int
    reuse_port: bool = False  # several API processes share the port (SO_REUSEPORT)
    web_view: bool = True  # the pages under /ui
    web_allow_cancel: bool = False  # their cancel buttons (else read-only: 403)
    web_session_token: str = ""  # signs their logins (empty: api_token, else a random one)
    metrics_scrape_token: str = ""  # empty: /metrics needs none (unless metrics_require_token)
    listing_concurrency: int = 4  # reads of many tasks, bulk cancels at once (api/listing_work.py)
    bulk_cancel_timeout_s: float = 300.0  # a bulk cancel stops after the batch that passes it
    allowed_hosts: tuple[str, ...] = ()  # Host names besides the default ones (api/hosts.py)
    namespaces_file: str = ""  # empty: api_token alone (docs/design/shared-service.md)
    namespaces_reload_s: float = 5.0


@dataclass(frozen=True, slots=True)
class CommandConfig:
    queue: str  # dead letters go to ``<queue>.dead``
    prefetch: int
    api_token: str  # empty: commands are not authenticated
    allowed_users: frozenset[str]  # AMQP user ids allowed without a token
    reply_prefix: str  # replies only to direct reply-to or queues with this prefix
    max_payload_bytes: int
    queue_arguments: Mapping[str, str] = field(default_factory=dict)  # the queues' (type)
    namespaces_file: str = ""  # empty: api_token alone (docs/design/shared-service.md)
    namespaces_reload_s: float = 5.0


@dataclass(frozen=True, slots=True)
class GrpcConfig:
    host: str
    port: int  # 0: any free one (the tests')
    api_token: str  # empty: no authentication (as HTTP's)
    max_message_bytes: int
    max_batch_tasks: int  # http_max_batch_tasks: one bound for both
    reuse_port: bool = False  # several API processes share the port (SO_REUSEPORT)
    listing_concurrency: int = 4  # Lists and Counts at once (besides HTTP's as many)
    namespaces_file: str = ""
    namespaces_reload_s: float = 5.0
