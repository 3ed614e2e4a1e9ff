"""The composition root: the one place that reads :class:`Settings` and builds
the parts, handing each only the values it needs.

:func:`build` wires the library: the real adapters (MySQL store, AMQP
publisher, system clock, InfluxDB sink when ``metrics_url`` is set) around the
engine and the façade; :func:`assemble` does the same around whatever store,
clock and publisher it is given (unit tests pass the memory store and fakes).
:func:`build_daemon` adds the daemon's interfaces (HTTP API, AMQP commands) and
the :class:`~triggerhook.service.Service` that runs them all; :func:`build_dev`
the same for ``triggerhook dev``, over SQLite and the local publisher.
"""

from __future__ import annotations

import logging
import secrets
import socket
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from triggerhook.amqp.connection import AmqpNodes, amqp_parameters
from triggerhook.amqp.publisher import AmqpPublisher
from triggerhook.api.access import read_namespaces
from triggerhook.api.config import CommandConfig, GrpcConfig, HttpConfig
from triggerhook.app import Figures, TriggerHook
from triggerhook.clock import ClockSync, DatabaseClock
from triggerhook.domain.delivery import DeliveryPolicy
from triggerhook.domain.spec import TaskRules
from triggerhook.domain.webhooks import WebhookTarget
from triggerhook.engine.engine import Engine, EngineConfig, PublisherFactory
from triggerhook.engine.sendbuffer import SendBuffer
from triggerhook.errors import ConfigError
from triggerhook.interfaces import Clock, ConfirmSink, MetricsSink, RetryHandler, TaskStore
from triggerhook.local.publisher import LocalConfig, LocalPublisher
from triggerhook.local.sinks import EventSink, StdoutSink, WebhookSink
from triggerhook.logs import redact
from triggerhook.metrics.collector import Collector
from triggerhook.metrics.influx import InfluxV1Sink, InfluxV2Sink, check_url
from triggerhook.metrics.reporter import MetricsReporter
from triggerhook.runtime.points import Field
from triggerhook.runtime.worker import FailureHandler
from triggerhook.settings import Settings
from triggerhook.store.mysql import MySQLStore
from triggerhook.store.mysql.galera import GaleraWatch
from triggerhook.webhook.bridge import BridgeConfig, TargetBridge, WebhookBridge
from triggerhook.webhook.targets import read_secret_file, read_webhooks, target_secrets

if TYPE_CHECKING:
    from triggerhook.processes import EngineLink
    from triggerhook.service import ApiService, Service

log = logging.getLogger(__name__)


def build(settings: Settings) -> TriggerHook:
    """Wire the MySQL store, the AMQP publisher, the system clock and, when
    ``metrics_url`` is set, the InfluxDB metrics sink."""
    return _build(settings, amqp_parameters(settings.amqp_url))  # fails fast if malformed


def build_daemon(settings: Settings) -> Service:
    """Everything ``triggerhook run`` runs: the library, the HTTP API and the
    AMQP command consumer (each when enabled), and the service over them; with
    ``api_processes``, the interfaces run in API processes of their own
    (:mod:`triggerhook.processes`), each built by :func:`build_api_process`."""
    # Here, not at the top: the library (``import triggerhook``) does not load
    # the daemon's event loop and web server.
    from triggerhook.processes import ApiProcesses, SummedRequestStats  # noqa: PLC0415
    from triggerhook.service import Service  # noqa: PLC0415

    if settings.http_enabled and settings.namespaces_file:
        read_namespaces(settings.namespaces_file)  # wrong: say so now, not in an API process
    params = amqp_parameters(settings.amqp_url)  # once, for the publisher and the consumers
    webhooks = webhook_targets(settings)  # wrong: say so before anything starts
    hook = _build(settings, params)
    if _api_processes(settings):
        # The API processes speak for this instance: its name, not one of their
        # own; and sign the web view's logins with one secret (they share the port).
        session = settings.web_session_token or secrets.token_urlsafe(32)
        theirs = replace(settings, instance_id=hook.instance_id, web_session_token=session)
        wake = hook.engine.armer.wake
        processes = ApiProcesses(theirs, settings.api_processes, wake, SummedRequestStats())
        hook.engine.count_also(processes.engine_totals)
        service = Service(hook, settings.shutdown_timeout_s, processes)
        return service  # the webhook bridge runs in the API processes
    service = Service(hook, settings.shutdown_timeout_s)
    _attach_interfaces(service, settings, params)
    _attach_webhooks(service, settings, webhooks, params)
    return service


def _api_processes(settings: Settings) -> bool:
    """Whether ``triggerhook run`` serves its interfaces from API processes."""
    return bool(settings.api_processes) and (settings.http_enabled or settings.commands_enabled)


def _attach_webhooks(
    service: Service,
    settings: Settings,
    targets: list[tuple[WebhookTarget, tuple[bytes, ...]]],
    params: AmqpNodes,
) -> None:
    """The webhook bridge, where the interfaces are: its Python work (HTTP
    calls, AMQP frames) out of the firing process when API processes serve
    them, each with its share of every target's concurrency (rounded up)."""
    if not targets:
        return
    processes = settings.api_processes if _api_processes(settings) else 1
    shared = [
        (replace(target, concurrency=-(-target.concurrency // processes)), secrets)
        for target, secrets in targets
    ]
    bridge = webhook_bridge(settings, shared, params, service.fail)
    service.hook.engine.count_also(bridge.totals)
    service.attach_webhooks(bridge)


def webhook_targets(
    settings: Settings,
) -> list[tuple[WebhookTarget, tuple[bytes, ...]]]:
    """The targets of ``webhooks_file`` with their secrets (none: empty);
    ConfigError naming the file, the entry and the field."""
    if not settings.webhooks_file:
        return []
    path = settings.webhooks_file
    targets = read_webhooks(path, settings.dead_letter_routing_key)
    where = f"webhooks_file {path!r}: webhook"
    return [
        (target, target_secrets(target, f"{where}[{index}]"))
        for index, target in enumerate(targets)
    ]


def webhook_bridge(
    settings: Settings,
    targets: list[tuple[WebhookTarget, tuple[bytes, ...]]],
    params: AmqpNodes,
    on_failure: FailureHandler,
) -> WebhookBridge:
    config = BridgeConfig(
        exchange=settings.exchange,
        queue_prefix=settings.webhook_queue_prefix,
        dead_letter_routing_key=settings.dead_letter_routing_key,
        dead_letter_queue=settings.dead_letter_queue,
        queue_arguments=settings.queue_arguments(),
        max_body_bytes=settings.max_payload_bytes or None,  # 0: no limit of its own
    )
    return WebhookBridge(
        [TargetBridge(target, secrets, config, params, on_failure) for target, secrets in targets]
    )


@dataclass(frozen=True, slots=True)
class DevOptions:
    """``triggerhook dev``'s own options (docs/dev.md): the SQLite file
    (``:memory:``: none), and where events go."""

    db_path: str
    webhook_url: str = ""  # empty: no webhook
    webhook_timeout_s: float = 10.0
    stdout: bool = True
    webhook_secret_file: str = ""  # empty: requests not signed
    # The production rule (no private, loopback or link-local address) when
    # false; a local run's webhook is usually on this machine.
    webhook_allow_private: bool = True


def build_dev(settings: Settings, dev: DevOptions) -> Service:
    """``triggerhook dev``: one instance over an SQLite file, its events to
    stdout and/or a webhook, the HTTP API (and web view); no broker, so no
    AMQP commands, and no API processes or InfluxDB either."""
    from triggerhook.service import Service  # noqa: PLC0415
    from triggerhook.store.sqlite import SQLiteStore  # noqa: PLC0415

    settings = replace(settings, commands_enabled=False, api_processes=0, metrics_url="")
    store = SQLiteStore(
        dev.db_path,
        settings.default_routing_key,
        settings.shard_count,
        listing_timeout_ms=settings.listing_timeout_ms,
    )
    clock, sync = _database_clock(settings, store)
    secrets: tuple[bytes, ...] = ()
    if dev.webhook_secret_file:  # read now: a wrong file is said before anything starts
        secrets = read_secret_file(dev.webhook_secret_file, "--webhook-secret-file")
    publisher = local_publisher_factory(settings, dev, clock, secrets)
    database = f"SQLite at {dev.db_path} through {store.driver}"
    hook = assemble(settings, store, clock, publisher, None, sync, database)
    service = Service(hook, settings.shutdown_timeout_s, store_name="sqlite")
    _attach_interfaces(service, settings, None)
    return service


def build_api_process(settings: Settings, link: EngineLink) -> ApiService:
    """An API process of ``triggerhook run``: the interfaces over an engine
    that only writes, with the firing process's ``settings`` (sent over ``link``)."""
    from triggerhook.service import ApiService  # noqa: PLC0415

    params = amqp_parameters(settings.amqp_url)
    hook = _build(settings, params, wake_armer=link.soon)
    sole = settings.api_processes == 1
    service = ApiService(hook, settings.shutdown_timeout_s, link, sole)
    _attach_interfaces(service, settings, params, service.figures, not sole)
    _attach_webhooks(service, settings, webhook_targets(settings), params)
    return service


def _attach_interfaces(
    service: Service,
    settings: Settings,
    params: AmqpNodes | None,
    figures: Callable[[], Figures] | None = None,
    reuse_port: bool = False,
) -> None:
    from triggerhook.api.commands import CommandConsumer  # noqa: PLC0415
    from triggerhook.api.http import HttpApi  # noqa: PLC0415
    from triggerhook.api.quotas import keeper_of  # noqa: PLC0415

    hook = service.hook
    # One per process: a namespace's creates a second, whichever way they come.
    quotas = keeper_of(hook, 1 / max(1, settings.api_processes))  # 0: all in one
    commands = None
    if settings.commands_enabled and params is not None:  # None: no broker (dev)
        channel = command_config(settings)
        commands = CommandConsumer(hook, channel, params, service.fail, quotas)
    http = None
    if settings.http_enabled:
        config = replace(http_config(settings), reuse_port=reuse_port)
        http = HttpApi(hook, config, service.readiness, service.executor, figures, quotas)
    grpc = None
    if settings.grpc_enabled:
        from triggerhook.api.grpc.server import GrpcApi  # noqa: PLC0415

        grpc = GrpcApi(hook, replace(grpc_config(settings), reuse_port=reuse_port), quotas)
    service.attach(http, commands, grpc)


def http_config(settings: Settings) -> HttpConfig:
    return HttpConfig(
        host=settings.http_host,
        port=settings.http_port,
        api_token=settings.api_token,
        metrics_require_token=settings.metrics_require_token,
        keepalive_timeout_s=float(settings.http_keepalive_timeout_s),
        max_connections=settings.http_max_connections,
        header_timeout_s=float(settings.http_header_timeout_s),
        body_timeout_s=float(settings.http_body_timeout_s),
        max_body_bytes=settings.http_max_body_bytes,
        max_batch_tasks=settings.http_max_batch_tasks,
        max_payload_bytes=settings.max_payload_bytes,
        web_view=settings.web_view,
        web_allow_cancel=settings.web_allow_cancel,
        web_session_token=settings.web_session_token,
        metrics_scrape_token=settings.metrics_scrape_token,
        allowed_hosts=tuple(settings.allowed_hosts()),
        listing_concurrency=settings.listing_concurrency,
        bulk_cancel_timeout_s=float(settings.bulk_cancel_timeout_s),
        namespaces_file=settings.namespaces_file,
        namespaces_reload_s=settings.namespaces_reload_s,
    )


def grpc_config(settings: Settings) -> GrpcConfig:
    return GrpcConfig(
        host=settings.grpc_host,
        port=settings.grpc_port,
        api_token=settings.api_token,
        max_message_bytes=settings.grpc_max_message_bytes,
        max_batch_tasks=settings.http_max_batch_tasks,
        listing_concurrency=settings.listing_concurrency,
        namespaces_file=settings.namespaces_file,
        namespaces_reload_s=settings.namespaces_reload_s,
    )


def command_config(settings: Settings) -> CommandConfig:
    return CommandConfig(
        queue=settings.command_queue,
        prefetch=settings.command_prefetch,
        api_token=settings.api_token,
        allowed_users=frozenset(settings.command_users()),
        reply_prefix=settings.command_reply_prefix,
        max_payload_bytes=settings.max_payload_bytes,
        queue_arguments=settings.queue_arguments(),
        namespaces_file=settings.namespaces_file,
        namespaces_reload_s=settings.namespaces_reload_s,
    )


def _build(
    settings: Settings, params: AmqpNodes, wake_armer: Callable[[], None] | None = None
) -> TriggerHook:
    """``wake_armer``: an engine that only writes, waking another's armer."""
    sink = sink_from_settings(settings)
    store = MySQLStore(
        settings.database_url,
        settings.default_routing_key,
        idle_transaction_timeout_s=settings.database_idle_transaction_timeout_s,
        pool_recycle_s=settings.database_pool_recycle_s,
        pool_ping_idle_s=settings.database_pool_ping_idle_s,
        listing_timeout_ms=settings.listing_timeout_ms,
        listing_pool_size=settings.listing_concurrency,
    )
    clock, sync = _database_clock(settings, store)
    publisher = publisher_factory(settings, params, clock)
    database = f"{redact(settings.database_url)} through {store.driver}"
    galera = GaleraWatch(store.galera_status)
    return assemble(
        settings,
        store,
        clock,
        publisher,
        sink,
        sync,
        database,
        wake_armer=wake_armer,
        more_gauges=galera.figures,
    )


def _database_clock(settings: Settings, store: TaskStore) -> tuple[DatabaseClock, ClockSync]:
    """The clock the engine fires by (the store's), and the thread keeping it current."""
    clock = DatabaseClock(
        store.database_time_us, settings.clock_uncertainty_max_ms, settings.clock_drift_ppm
    )
    return clock, ClockSync(clock, settings.clock_sync_interval_ms)


def assemble(
    settings: Settings,
    store: TaskStore,
    clock: Clock,
    publisher: PublisherFactory,
    metrics_sink: MetricsSink | None = None,
    clock_sync: ClockSync | None = None,
    database: str = "",
    *,
    wake_armer: Callable[[], None] | None = None,
    more_gauges: Callable[[], Mapping[str, Field]] | None = None,
) -> TriggerHook:
    """The engine and the façade over ``store``, ``clock`` and ``publisher``
    (and ``clock_sync``, the thread keeping a database clock current).
    ``wake_armer``: the engine only writes (an API process), and its soon-due
    rows go there. ``more_gauges``: figures of the store's own (Galera's)."""
    config = replace(engine_config(settings), fires=wake_armer is None)
    engine = Engine(config, store, clock, publisher, wake_armer)
    tags = {"instance": engine.instance, "host": socket.gethostname()}

    def start_metrics() -> MetricsReporter:
        collector = Collector(
            engine,
            store,
            tags,
            settings.metrics_recount_s * 1000,
            int(clock.now_ms()),
            gauges_of(clock_sync, more_gauges),
        )
        if metrics_sink is not None:
            log.info(
                "metrics: writing to %s every %d ms",
                redact(settings.metrics_url),
                settings.metrics_interval_ms,
            )
        return MetricsReporter(
            clock,
            collector,
            metrics_sink,
            settings.metrics_interval_ms,
            settings.metrics_buffer_points,
            join_timeout_s=settings.metrics_timeout_ms / 1000 + 1.0,
        )

    rules = TaskRules(
        settings.default_routing_key, settings.max_payload_bytes, settings.dedup_window_ms
    )
    return TriggerHook(engine, store, clock, rules, start_metrics, clock_sync, database)


def gauges_of(
    clock_sync: ClockSync | None, more: Callable[[], Mapping[str, Field]] | None
) -> Callable[[], Mapping[str, Field]]:
    """The collector's extra gauges: the database clock's, and ``more``."""
    sources = [source for source in (clock_sync and clock_sync.figures, more) if source]

    def gauges() -> dict[str, Field]:
        found: dict[str, Field] = {}
        for source in sources:
            found.update(source())
        return found

    return gauges


# A lease counts as lapsed this much (plus the clock's bound) before its end,
# at most a fifth of the lease (renewed every third of it): a copy fired just
# before may still wait in the send buffer a moment.
_PUBLISH_MARGIN_MS = 1000


def engine_config(settings: Settings) -> EngineConfig:
    rate_limits, catch_up = settings.throttle_limits()
    return EngineConfig(
        instance=settings.resolved_instance_id(),
        max_tasks_in_memory=settings.max_tasks_in_memory,
        send_buffer_size=settings.send_buffer_size,
        arm_ahead_ms=settings.arm_ahead_ms,
        arm_interval_ms=settings.arm_interval_ms,
        arm_batch_size=settings.arm_batch_size,
        shard_lease_ms=settings.shard_lease_ms,
        lease_margin_ms=2 * settings.clock_uncertainty_max_ms
        + min(_PUBLISH_MARGIN_MS, settings.shard_lease_ms // 5),
        confirm_batch_size=settings.confirm_batch_size,
        confirm_max_delay_ms=settings.confirm_max_delay_ms,
        confirm_transactions=settings.confirm_transactions,
        schedule_batch_size=settings.schedule_batch_size,
        commit_queue_max=settings.commit_queue_max,
        shutdown_timeout_s=settings.shutdown_timeout_s,
        switch_interval_us=settings.switch_interval_us,
        rate_limits=rate_limits,
        catch_up=catch_up,
        catch_up_after_ms=settings.catch_up_after_ms,
        dedup_sweep_ms=round(settings.dedup_sweep_s * 1000),
        outbox_poll_ms=settings.outbox_poll_ms,
    )


def publisher_factory(settings: Settings, params: AmqpNodes, clock: Clock) -> PublisherFactory:
    """The AMQP publisher, built when the engine asks (it hands over its stages)."""
    policy = delivery_policy(settings)

    def publisher(
        buffer: SendBuffer, confirms: ConfirmSink, retry: RetryHandler, on_failure: FailureHandler
    ) -> AmqpPublisher:
        return AmqpPublisher(
            params,
            settings.exchange,
            buffer,
            confirms,
            retry,
            settings.max_unconfirmed,
            on_failure,
            policy,
            settings.dead_letter_routing_key,
            settings.dead_letter_queue,
            settings.queue_arguments(),
            clock,
            settings.default_late_policy(),
        )

    return publisher


def local_publisher_factory(
    settings: Settings, dev: DevOptions, clock: Clock, secrets: tuple[bytes, ...] = ()
) -> PublisherFactory:
    """``triggerhook dev``'s publisher: each event to stdout and the webhook,
    each sink on a thread of its own (docs/dev.md, "Events to a webhook")."""
    config = LocalConfig(
        delivery_policy(settings),
        settings.dead_letter_routing_key,
        settings.default_late_policy(),
        settings.max_unconfirmed,
    )

    def publisher(
        buffer: SendBuffer, confirms: ConfirmSink, retry: RetryHandler, on_failure: FailureHandler
    ) -> LocalPublisher:
        sinks: list[EventSink] = []
        if dev.stdout:
            sinks.append(StdoutSink(sys.stdout))
        if dev.webhook_url:
            sinks.append(
                WebhookSink(
                    dev.webhook_url,
                    dev.webhook_timeout_s,
                    allow_private=dev.webhook_allow_private,
                    secrets=secrets,
                )
            )
        return LocalPublisher(buffer, confirms, retry, on_failure, sinks, config, clock)

    return publisher


def delivery_policy(settings: Settings) -> DeliveryPolicy:
    """What becomes of an event not delivered (every publisher's)."""
    return DeliveryPolicy(
        settings.publish_max_attempts, settings.publish_max_age_ms, settings.publish_retry_max_ms
    )


def sink_from_settings(settings: Settings) -> MetricsSink | None:
    """The sink ``settings`` ask for, or None when ``metrics_url`` is empty (off)."""
    if not settings.metrics_url:
        return None
    try:
        url = check_url(settings.metrics_url)
    except ValueError as exc:
        raise ConfigError(f"metrics_url: {exc}") from None
    timeout_s = settings.metrics_timeout_ms / 1000
    if settings.metrics_influx_version == 1:
        if not settings.metrics_database:
            raise ConfigError("metrics_database: must not be empty (metrics_influx_version = 1)")
        return InfluxV1Sink(
            url,
            settings.metrics_database,
            settings.metrics_retention_policy,
            settings.metrics_username,
            settings.metrics_password,
            timeout_s,
        )
    if not settings.metrics_bucket:
        raise ConfigError("metrics_bucket: must not be empty (metrics_influx_version = 2)")
    return InfluxV2Sink(
        url, settings.metrics_org, settings.metrics_bucket, settings.metrics_token, timeout_s
    )
