"""Settings: one frozen dataclass, loaded from TOML < ``TRIGGERHOOK_*`` env < flags.

Every setting is declared once, here, with its default and meaning; the CLI's
flags and the documentation are derived from these declarations.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import math
import os
import re
import socket
import tomllib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from triggerhook.domain.meta import FIRE, MAX_DEDUP_WINDOW_MS, LateKind, LatePolicy
from triggerhook.domain.ratelimits import RateLimit, parse_rate, parse_rate_list
from triggerhook.domain.task import DEFAULT_MAX_PAYLOAD_BYTES, ID_PATTERN, ROUTING_KEY_PATTERN
from triggerhook.errors import ConfigError, ValidationError

ENV_PREFIX = "TRIGGERHOOK_"
_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
_LOG_FORMATS = ("text", "json")
# Settings that may hold a credential, by a rule on their names (so a new one
# is covered): each may be read from a file (TRIGGERHOOK_<KEY>_FILE, as the
# official database and Grafana images do) and `config show` masks it.
SECRET_SUFFIXES = ("_url", "_token", "_password")
FILE_SUFFIX = "_FILE"
_INSTANCE_ID = ID_PATTERN
# A webhook target's queue: the prefix and its name (up to 63), 255 at most.
_MAX_QUEUE_PREFIX_CHARS = 192
_ROUTING_KEY = ROUTING_KEY_PATTERN
# More would only share the same cores; each holds its own database connections.
MAX_API_PROCESSES = 32
QUEUE_TYPES = ("classic", "quorum")
_MAX_SHARDS = 4096
# Each a connection of the store's pool (16), beside the armer's, the keeper's and the writes'.
MAX_CONFIRM_TRANSACTIONS = 8
_HOST_NAME = re.compile(r"\.?[a-z0-9_-]+(\.[a-z0-9_-]+)*\.?")  # of http_allowed_hosts
# Settings of the claim protocol (schema v2), renamed or gone with the shard
# protocol (v3): a configuration naming one gets told what to write instead.
RENAMED = {
    "claim_lease_ms": "shard_lease_ms",
    "claim_batch_size": "arm_batch_size",
    "poll_interval_ms": "arm_interval_ms",
    "preload_window_ms": "",
}


def _setting(
    default: Any,
    help_text: str,
    minimum: int | None = None,
    maximum: int | None = None,
    *,
    above: float | None = None,
) -> Any:
    """A setting's declaration: ``minimum`` and ``maximum`` bound an int
    (inclusive), ``above`` a float (exclusive)."""
    return field(
        default=default,
        metadata={"help": help_text, "minimum": minimum, "maximum": maximum, "above": above},
    )


@dataclass(frozen=True, slots=True)
class Settings:
    database_url: str = _setting(
        "mysql://root:@127.0.0.1:3306/triggerhook",
        "MySQL/MariaDB URL; the database is created by `db init` if missing. "
        "mysql:// speaks mysqlclient when it is installed, else PyMySQL; "
        "mysql+mysqldb:// or mysql+pymysql:// names the driver.",
    )
    amqp_url: str = _setting(
        "amqp://guest:guest@127.0.0.1:5672/%2F",
        "RabbitMQ URL (pika URLParameters syntax); or several, separated by spaces or commas "
        "(the nodes of a cluster): connections go to the first, and after a failure to the "
        "next at once, in turn (the back-off only once every node failed in a row).",
    )
    amqp_queue_type: str = _setting(
        "classic",
        "Type of the queues the daemon declares (dead_letter_queue, command_queue and "
        "its .dead): `classic`, or `quorum` on a RabbitMQ cluster (replicated, so they "
        "stay available when a node is lost; a classic queue is down with its node, and "
        "publishing with it). RabbitMQ refuses to redeclare a queue with another type: "
        "delete the old queues when changing it.",
    )
    exchange: str = _setting("triggerhook", "Durable topic exchange events are published to.")
    default_routing_key: str = _setting(
        "triggerhook.fire", "Routing key of tasks scheduled without one."
    )
    instance_id: str = _setting(
        "",
        "Name of this engine instance; empty = <hostname>-<pid>-<random>, unique per "
        "process. A second process under the name of a live one refuses to start.",
    )
    max_payload_bytes: int = _setting(
        DEFAULT_MAX_PAYLOAD_BYTES, "Largest payload accepted, in bytes.", 0
    )
    arm_ahead_ms: int = _setting(
        200,
        "Tasks are armed (loaded into memory and committed to fire; cancel answers too "
        "late) this long before their due time, so the database is off the precise "
        "firing path.",
        2,
    )
    arm_interval_ms: int = _setting(
        25,
        "How often each instance looks for tasks to arm in the shards it owns (a read; "
        "a full arming pass runs at least every half of arm_ahead_ms); a task scheduled "
        "through an instance that does not own its shard waits at most this long to be "
        "armed. Keep it well under arm_ahead_ms.",
        1,
    )
    arm_batch_size: int = _setting(5000, "Most rows armed by one arming pass.", 1)
    shard_count: int = _setting(
        64,
        "Shards the tasks are split into, fixed when `db init` creates the database "
        "(later changes of this setting are ignored; see docs/operations.md).",
        1,
    )
    shard_lease_ms: int = _setting(
        10000,
        "An instance's lease on its shards (and its instance name), renewed every third "
        "of it; another instance takes the shards of one that stopped renewing this "
        "long (crash recovery), and an instance stops firing a shard's tasks once its "
        "lease may have lapsed.",
        1000,
    )
    max_tasks_in_memory: int = _setting(
        50000, "Bound on tasks held in memory (heaps, send buffer, unconfirmed).", 1
    )
    send_buffer_size: int = _setting(10000, "Bound on fired tasks waiting to be published.", 1)
    max_unconfirmed: int = _setting(
        5000, "Most published messages awaiting a broker confirm at once.", 1
    )
    confirm_batch_size: int = _setting(2000, "Most rows deleted by one confirm batch.", 1)
    confirm_max_delay_ms: int = _setting(
        50,
        "Longest a confirmed task waits for its batch delete (longer: fewer, larger "
        "deletes at low rates; a crash meanwhile fires those tasks again).",
        0,
    )
    confirm_transactions: int = _setting(
        4,
        "Most delete transactions of confirmed rows in flight at once, each a batch on a "
        f"connection of its own (at most {MAX_CONFIRM_TRANSACTIONS}); more than one only "
        "while more than a batch of confirmed rows waits (a burst).",
        1,
        MAX_CONFIRM_TRANSACTIONS,
    )
    schedule_batch_size: int = _setting(
        1000, "Most single schedule() calls committed in one group transaction.", 1
    )
    publish_retry_max_ms: int = _setting(
        30000, "Upper bound of the back-off between retries of an unroutable event.", 1
    )
    publish_max_attempts: int = _setting(
        10,
        "Deliveries of one event tried (each returned as unroutable or nacked by the "
        "broker) before it is dead-lettered instead.",
        1,
    )
    publish_max_age_ms: int = _setting(
        600000,
        "An undelivered event this long past its due time is dead-lettered at its next "
        "failure, whatever its attempts; 0 = no age limit.",
        0,
    )
    dead_letter_routing_key: str = _setting(
        "triggerhook.dead",
        "Routing key (on `exchange`) undeliverable events are published with, headers saying why.",
    )
    late_policy: str = _setting(
        "fire",
        "Late-fire policy of tasks that have none of their own: `fire` (however late), or "
        "`skip_after_ms=N` (a task found more than N ms late when published is "
        "dead-lettered instead, cause `late`).",
    )
    dedup_window_ms: int = _setting(
        0,
        "Dedup window of tasks created without a dedup_window_ms of their own: once such a "
        "task fired, a create of its id within this many ms is answered already_fired "
        "(HTTP 409) and writes nothing. 0 = none; at most 30 days. Each windowed task "
        "leaves a record, written when it fires and deleted by a sweep (dedup_sweep_s).",
        0,
        MAX_DEDUP_WINDOW_MS,
    )
    dedup_sweep_s: float = _setting(
        60.0,
        "How often each instance deletes the expired fired records (of tasks with a dedup "
        "window) in the shards it owns, in seconds (a fraction allowed).",
        above=0,
    )
    outbox_poll_ms: int = _setting(
        50,
        "How often each instance reads the outbox (tasks scheduled inside a caller's own "
        "transaction with schedule_in) when it was empty, in ms; a full batch is followed "
        "at once. A task due sooner than this plus arm_interval_ms after its caller's "
        "commit fires that much late. 0 = this instance moves none.",
        0,
        60_000,
    )
    rate_limits: str = _setting(
        "",
        "Per routing-key pattern, the most tasks fired a second (each instance its share: "
        "the rate times its fraction of the shards): `pattern=N/s` (or `/m`, `/h`; "
        "`burst B`: at most B at once, default one second's), comma-separated; AMQP topic "
        "patterns (`*` a word, `#` any), the first that matches a key applies. A task over "
        "the rate waits for its token: later, never earlier. Empty = no limit. Example: "
        "`billing.*=200/s, #=20000/s`.",
    )
    catch_up_rate: str = _setting(
        "",
        "The most tasks fired a second per routing key among those found more than "
        "catch_up_after_ms past their due time (the backlog an outage leaves), as "
        "`N/s [burst B]`; on-time tasks do not count. Empty = none.",
    )
    catch_up_after_ms: int = _setting(
        1000, "A task this late when it comes due is catching up (catch_up_rate).", 0
    )
    dead_letter_queue: str = _setting(
        "triggerhook.dead",
        "Durable queue declared and bound to `exchange` with dead_letter_routing_key, "
        "so a dead letter always has somewhere to go; empty = declare none (bind your own).",
    )
    commit_queue_max: int = _setting(
        10000,
        "Most calls waiting for each group commit (schedule, cancel, reschedule); "
        "beyond it a call is refused at once (HTTP 503).",
        1,
    )
    switch_interval_us: int = _setting(
        500,
        "sys.setswitchinterval applied by a running engine, in microseconds; a shorter "
        "interval lets the firing thread take the GIL sooner. 0 leaves Python's default.",
        0,
    )
    database_idle_transaction_timeout_s: int = _setting(
        5,
        "MariaDB aborts an engine transaction left idle this long, freeing its locks, so "
        "an instance paused mid-transaction (a stop signal, a suspended VM) cannot keep "
        "others from shards whose lease ran out; keep it under shard_lease_ms. 0 = off; "
        "MySQL has no such limit.",
        0,
    )
    clock_sync_interval_ms: int = _setting(
        1000,
        "How often the engine reads the database's clock, by which it fires tasks "
        "(the host's clock is not used).",
        10,
    )
    clock_uncertainty_max_ms: int = _setting(
        50,
        "Past this uncertainty about the database's time (half a query's round trip, "
        "plus drift while the database is unreachable) nothing is fired and the daemon "
        "is not ready.",
        1,
    )
    clock_drift_ppm: int = _setting(
        500,
        "Largest rate difference assumed between the host's and the database's clocks, "
        "in parts per million; it widens the uncertainty between reads.",
        0,
    )
    shutdown_timeout_s: int = _setting(
        15, "Graceful stop waits this long for due tasks to be published and confirmed.", 0
    )
    log_level: str = _setting("INFO", "Logging level: DEBUG, INFO, WARNING or ERROR.")
    log_format: str = _setting(
        "text",
        "Log lines on stderr, times in UTC: `text` (`2026-12-04T12:00:00.123Z INFO logger: "
        "message key=value ...`) or `json` (one object per line: time, level, logger, "
        "message, the context keys, traceback).",
    )
    api_processes: int = _setting(
        1,
        "Processes `triggerhook run` serves the HTTP API and the AMQP command queue "
        "from, beside the one that fires, so that their Python work cannot delay a "
        "fire; several share http_port (SO_REUSEPORT). 0 = everything in one process.",
        0,
    )
    http_enabled: bool = _setting(True, "Serve the HTTP API (`triggerhook run`).")
    http_host: str = _setting("127.0.0.1", "Address the HTTP API binds to.")
    http_port: int = _setting(8080, "TCP port of the HTTP API.", 0)
    api_token: str = _setting(
        "",
        "Bearer token every /v1/* request must carry; empty = no authentication "
        "(then only a loopback http_host is allowed, see http_allow_public_without_token).",
    )
    namespaces_file: str = _setting(
        "",
        "A TOML file of namespaces (the task ids and routing keys each owns) and the tokens "
        "that act in them, stored as SHA-256 (`triggerhook token new`); read at start and "
        "again when it changes. api_token stays a token of every namespace. Empty = none; "
        "see docs/api.md, Namespaces.",
    )
    namespaces_reload_s: float = _setting(
        5.0,
        "How often each API process looks whether namespaces_file changed (a token added "
        "or removed takes effect within this long, no restart). Above 0.",
        above=0.0,
    )
    webhooks_file: str = _setting(
        "",
        "A TOML file of webhook targets (`[[webhook]]`: name, url, routing_keys, secret_file "
        "or secret_env, concurrency, timeout_s, max_attempts, backoff_initial_ms, "
        "backoff_max_ms, allow_private): `triggerhook run` POSTs the events of those routing "
        "keys to each, signed, consumed from a queue of its own. Read at start (a change needs "
        "a restart). Empty = none; see docs/webhooks.md.",
    )
    webhook_queue_prefix: str = _setting(
        "triggerhook.webhook.",
        "The durable queue of each webhook target is named this and the target's name, "
        "bound to `exchange` with its routing_keys.",
    )
    http_allow_public_without_token: bool = _setting(
        False, "Allow a non-loopback http_host without api_token (trusted networks only)."
    )
    http_allowed_hosts: str = _setting(
        "",
        "Host names the HTTP API answers to, comma-separated, against DNS rebinding: a "
        "request whose Host header names another gets 421 (IP addresses, localhost and "
        "http_host are always accepted; /healthz and /readyz answer any Host); "
        "`.example.com` takes in its subdomains, `*` accepts any Host. Empty: any Host when "
        "api_token is set and http_host is not a loopback address, else only those.",
    )
    http_max_body_bytes: int = _setting(
        4 * 1024 * 1024,
        "Largest HTTP request body (a 10,000-task batch with ~300-byte payloads); "
        "larger ones get 413 unread.",
        1,
    )
    http_header_timeout_s: int = _setting(
        30,
        "A connection that has not sent a whole request head this long after it "
        "opened (or after its previous response) is closed.",
        1,
    )
    http_body_timeout_s: int = _setting(
        60, "A request whose body has not fully arrived this long after its head gets 408.", 1
    )
    http_keepalive_timeout_s: int = _setting(
        30, "An idle keep-alive connection is closed after this long.", 1
    )
    http_max_connections: int = _setting(
        512, "Most open HTTP connections; further ones are closed at once.", 1
    )
    http_max_batch_tasks: int = _setting(10000, "Most tasks in one POST /v1/tasks/batch.", 1)
    grpc_enabled: bool = _setting(
        False,
        "Serve the gRPC API (docs/api.md, gRPC) from the API processes too, beside HTTP; "
        "the same tokens, namespaces and outcomes.",
    )
    grpc_host: str = _setting(
        "127.0.0.1", "Address the gRPC API binds to (not loopback: as http_host, a token needed)."
    )
    grpc_port: int = _setting(
        50051, "TCP port of the gRPC API (several API processes share it).", 1
    )
    grpc_max_message_bytes: int = _setting(
        4 * 1024 * 1024,
        "Largest gRPC request message (as http_max_body_bytes); a larger one is "
        "refused RESOURCE_EXHAUSTED unread.",
        1024,
        64 * 1024 * 1024,
    )
    # Reads of many tasks (list, count, timeline, bulk cancel): docs/api.md, "Endpoints".
    listing_timeout_ms: int = _setting(
        5000, "The database stops a read of many tasks running longer: 422 too_costly.", 10
    )
    listing_concurrency: int = _setting(4, "Reads of many tasks at once per process; more: 503.", 1)
    bulk_cancel_timeout_s: int = _setting(300, "A bulk cancel stops after this (next_cursor).", 1)
    metrics_require_token: bool = _setting(
        False, "GET /metrics requires api_token too (it is open by default, like /healthz)."
    )
    metrics_scrape_token: str = _setting(
        "",
        "Bearer token GET /metrics requires (Prometheus's `authorization` credentials); "
        "empty = none (unless metrics_require_token). It grants nothing else.",
    )
    web_view: bool = _setting(
        True,
        "Serve the web view (pages under /ui on the HTTP API's port: tasks, counts, the "
        "timeline, live figures), behind api_token like /v1; see docs/web-view.md.",
    )
    web_allow_cancel: bool = _setting(
        False,
        "The web view offers buttons to cancel a task and every task its filter matches "
        "(forms with a CSRF token); false = read-only, such requests get 403.",
    )
    web_session_token: str = _setting(
        "",
        "Secret that signs the web view's login sessions (never sent anywhere). Empty = "
        "api_token when set, else a random one made at start for the daemon's API "
        "processes (logins then end at a restart). Set it to keep logins over restarts, "
        "or across daemons behind one address.",
    )
    commands_enabled: bool = _setting(True, "Consume the AMQP command queue (`triggerhook run`).")
    command_queue: str = _setting(
        "triggerhook.commands",
        "Durable queue of create/cancel/reschedule commands; malformed ones go to "
        "<command_queue>.dead.",
    )
    command_prefetch: int = _setting(
        256, "Commands taken from the queue at once (unacknowledged until committed).", 1
    )
    command_allowed_users: str = _setting(
        "",
        "With api_token set, commands must carry `authorization: Bearer <token>` or a "
        "`user_id` property from this comma-separated list (RabbitMQ checks user_id "
        "against the connection's user).",
    )
    command_reply_prefix: str = _setting(
        "triggerhook.reply.",
        "A command's reply_to must be direct reply-to (amq.rabbitmq.reply-to) or a queue "
        "whose name starts with this; empty = direct reply-to only.",
    )
    metrics_url: str = _setting(
        "", "InfluxDB base URL metrics are written to, e.g. http://127.0.0.1:8086; empty = off."
    )
    metrics_influx_version: int = _setting(
        1,
        "InfluxDB write API: 1 (InfluxDB 1.x /write: database, retention policy, user) "
        "or 2 (InfluxDB 2.x/3.x: org, bucket, token).",
        1,
    )
    metrics_database: str = _setting("triggerhook", "InfluxDB 1.x database.")
    metrics_retention_policy: str = _setting(
        "", "InfluxDB 1.x retention policy; empty = the database's default."
    )
    metrics_username: str = _setting("", "InfluxDB 1.x user; empty = no authentication.")
    metrics_password: str = _setting("", "InfluxDB 1.x password.")
    metrics_org: str = _setting("", "InfluxDB 2.x/3.x organization.")
    metrics_bucket: str = _setting("triggerhook", "InfluxDB 2.x/3.x bucket.")
    metrics_token: str = _setting("", "InfluxDB 2.x/3.x API token.")
    metrics_interval_ms: int = _setting(
        1000, "Metrics are aggregated over and written every this many ms.", 100
    )
    metrics_buffer_points: int = _setting(
        3600,
        "Points kept while InfluxDB is slow or down; beyond it the oldest are dropped "
        "(counted and logged).",
        1,
    )
    metrics_timeout_ms: int = _setting(2000, "Timeout of one write to InfluxDB.", 1)
    metrics_recount_s: int = _setting(
        60,
        "The tasks-in-database figure is an exact COUNT(*) this often (less often when "
        "a count is slow: at most 1% of the time); in between, this instance's own "
        "inserts and deletes are added to it.",
        1,
    )
    database_pool_recycle_s: int = _setting(
        3600,
        "A pooled database connection open this long is closed and replaced when next "
        "borrowed (keep it under the server's wait_timeout and any proxy's idle limit); "
        "0 = never.",
        0,
    )
    database_pool_ping_idle_s: int = _setting(
        2,
        "A pooled database connection not used this long is pinged when next borrowed "
        "and replaced if dead, so the first statement after a database restart does not "
        "fail; 0 = ping at every borrow (a round trip each).",
        0,
    )

    def __post_init__(self) -> None:
        self._check_types()
        if self.log_level.upper() not in _LOG_LEVELS:
            raise ConfigError(f"log_level: must be one of {', '.join(_LOG_LEVELS)}")
        if self.log_format not in _LOG_FORMATS:
            raise ConfigError(f"log_format: must be one of {', '.join(_LOG_FORMATS)}")
        if self.shard_count > _MAX_SHARDS:
            raise ConfigError(f"shard_count: must be at most {_MAX_SHARDS}")
        if self.arm_interval_ms >= self.arm_ahead_ms:
            raise ConfigError("arm_interval_ms: must be less than arm_ahead_ms")
        if self.database_idle_transaction_timeout_s * 1000 >= self.shard_lease_ms:
            raise ConfigError(
                "database_idle_transaction_timeout_s: must be less than shard_lease_ms"
            )
        if self.instance_id and not _INSTANCE_ID.fullmatch(self.instance_id):
            raise ConfigError("instance_id: must be 1-64 characters from [A-Za-z0-9._:-]")
        self._check_names()
        self._check_http()
        self.default_late_policy()
        self.throttle_limits()
        if self.amqp_queue_type not in QUEUE_TYPES:
            raise ConfigError(f"amqp_queue_type: must be one of {', '.join(QUEUE_TYPES)}")
        if self.metrics_influx_version not in (1, 2):
            raise ConfigError("metrics_influx_version: must be 1 or 2")

    def _check_types(self) -> None:
        """Every field's type and bounds; a float setting given an int holds the float."""
        for name in FIELDS:
            checked = _check(name, getattr(self, name), source=name)
            if type(checked) is not type(getattr(self, name)):
                object.__setattr__(self, name, checked)

    def _check_names(self) -> None:
        for name in ("exchange", "default_routing_key", "command_queue", "dead_letter_routing_key"):
            if not _ROUTING_KEY.fullmatch(getattr(self, name)):
                raise ConfigError(f"{name}: must be 1-255 characters from [A-Za-z0-9._:/-]")
        for name in ("dead_letter_queue", "command_reply_prefix"):
            value = getattr(self, name)
            if value and not _ROUTING_KEY.fullmatch(value):
                raise ConfigError(
                    f"{name}: must be empty or 1-255 characters from [A-Za-z0-9._:/-]"
                )
        prefix = self.webhook_queue_prefix
        if not _ROUTING_KEY.fullmatch(prefix) or len(prefix) > _MAX_QUEUE_PREFIX_CHARS:
            raise ConfigError(
                f"webhook_queue_prefix: must be 1-{_MAX_QUEUE_PREFIX_CHARS} characters from "
                "[A-Za-z0-9._:/-] (a queue's name is it and a target's, at most 255)"
            )
        if any(not user.strip() for user in self.command_users()):
            raise ConfigError("command_allowed_users: an empty name in the list")

    def _check_http(self) -> None:
        if self.api_processes > MAX_API_PROCESSES:
            raise ConfigError(f"api_processes: at most {MAX_API_PROCESSES}")
        if self.api_processes > 1 and self.http_enabled and self.http_port == 0:
            raise ConfigError(
                "http_port: 0 (any free port) would give each of the api_processes its "
                "own port; set a port, or api_processes = 1"
            )
        self.allowed_hosts()
        open_to_all = (
            not self.api_token
            and not self.namespaces_file
            and not self.http_allow_public_without_token
        )
        for enabled, name in ((self.http_enabled, "http_host"), (self.grpc_enabled, "grpc_host")):
            host = getattr(self, name)
            if enabled and open_to_all and not is_loopback(host):
                raise ConfigError(
                    f"{name}: {host!r} is not a loopback address and api_token "
                    "is empty; set api_token (or http_allow_public_without_token = true)"
                )

    def default_late_policy(self) -> LatePolicy:
        """late_policy, parsed; ConfigError naming it when malformed."""
        text = self.late_policy.strip()
        if text == "fire":
            return FIRE
        name, _, value = text.partition("=")
        if name.strip() == "skip_after_ms" and re.fullmatch(r"[0-9]{1,15}", value.strip()):
            return LatePolicy(LateKind.SKIP_AFTER, int(value.strip()))
        raise ConfigError("late_policy: must be `fire` or `skip_after_ms=N` (N: milliseconds)")

    def throttle_limits(self) -> tuple[tuple[RateLimit, ...], RateLimit | None]:
        """rate_limits and catch_up_rate, parsed; ConfigError naming the entry."""
        try:
            limits = parse_rate_list(self.rate_limits, "rate_limits")
            return limits, parse_rate(self.catch_up_rate, "catch_up_rate")
        except ValidationError as exc:
            raise ConfigError(str(exc)) from None

    def queue_arguments(self) -> dict[str, str]:
        """The arguments of every queue the daemon declares (amqp_queue_type)."""
        return {} if self.amqp_queue_type == "classic" else {"x-queue-type": self.amqp_queue_type}

    def allowed_hosts(self) -> list[str]:
        """http_allowed_hosts as lower-case names (``*``: any); ConfigError naming it."""
        names = [n.strip().lower() for n in self.http_allowed_hosts.split(",") if n.strip()]
        bad = [name for name in names if name != "*" and not _HOST_NAME.fullmatch(name)]
        if bad:
            why = "is not a host name (no scheme or port: api.example.com, .example.com, *)"
            raise ConfigError(f"http_allowed_hosts: {bad[0][:100]!r} {why}")
        return [name.removesuffix(".") for name in names]

    def command_users(self) -> list[str]:
        """command_allowed_users as a list (empty setting: none)."""
        if not self.command_allowed_users.strip():
            return []
        return [user.strip() for user in self.command_allowed_users.split(",")]

    def resolved_instance_id(self) -> str:
        if self.instance_id:
            return self.instance_id
        return f"{socket.gethostname()[:40]}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


FIELDS = {f.name: f for f in dataclasses.fields(Settings)}


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def env_var(name: str) -> str:
    return ENV_PREFIX + name.upper()


def is_secret(name: str) -> bool:
    """Whether setting ``name`` may hold a credential: a string named by
    SECRET_SUFFIXES (not a switch such as metrics_require_token)."""
    return name.endswith(SECRET_SUFFIXES) and FIELDS[name].type in ("str", str)


def load_settings(
    config_path: Path | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> Settings:
    """Merge the TOML file, then ``TRIGGERHOOK_*`` variables (or, for a
    secret, ``TRIGGERHOOK_<KEY>_FILE``), then ``overrides``."""
    return load_with_sources(config_path, environ, overrides)[0]


def load_with_sources(
    config_path: Path | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> tuple[Settings, dict[str, str]]:
    """:func:`load_settings`, and where each value came from: ``default``,
    ``file PATH``, ``env VAR``, ``env file VAR_FILE=PATH`` or ``flag --x``."""
    values: dict[str, object] = {}
    sources = dict.fromkeys(FIELDS, "default")
    if config_path is not None:
        values.update(_read_toml(config_path))
        sources.update(dict.fromkeys(values, f"file {config_path}"))
    env = os.environ if environ is None else environ
    old = [name for name in RENAMED if env_var(name) in env]
    if old:  # a v2 environment file would otherwise lose these without a word
        names = ", ".join(env_var(name) for name in old)
        raise ConfigError(f"{names}: unknown setting{_renamed(old)}")
    for name in FIELDS:
        found = _from_env(name, env)
        if found is not None:
            values[name], sources[name] = found
    for name, value in (overrides or {}).items():
        if value is not None:
            flag = f"--{name.replace('_', '-')}"
            values[name], sources[name] = _check(name, value, source=flag), f"flag {flag}"
    return Settings(**values), sources  # type: ignore[arg-type]


def _from_env(name: str, env: Mapping[str, str]) -> tuple[object, str] | None:
    """Setting ``name`` from ``TRIGGERHOOK_<KEY>`` or (a secret) from the file
    ``TRIGGERHOOK_<KEY>_FILE`` names, with its source; None if neither is set."""
    variable = env_var(name)
    file_variable = variable + FILE_SUFFIX
    if file_variable not in env:
        if variable not in env:
            return None
        return _coerce(name, env[variable], source=variable), f"env {variable}"
    if not is_secret(name):
        raise ConfigError(
            f"{file_variable}: only secret settings (strings named *_url, *_token or "
            f"*_password) are read from a file; set {variable}"
        )
    if variable in env:
        raise ConfigError(f"{variable} and {file_variable}: both set; give one of them")
    path = env[file_variable]
    value = _coerce(name, _read_secret(file_variable, path), source=file_variable)
    return value, f"env file {file_variable}={path}"


def _read_secret(variable: str, path: str) -> str:
    """The file's text without its trailing newline(s), as a shell's ``$(< file)``."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{variable}: cannot read {path!r}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{variable}: {path!r} is not UTF-8 text") from None
    return text.rstrip("\r\n")


def _read_toml(path: Path) -> dict[str, object]:
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError as exc:
        raise ConfigError(f"config file {path} does not exist") from exc
    except OSError as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc.strerror}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise ConfigError(f"{path}: unknown setting(s): {', '.join(unknown)}{_renamed(unknown)}")
    return {name: _check(name, value, source=f"{path}: {name}") for name, value in data.items()}


def _renamed(names: list[str]) -> str:
    """A hint for settings of the claim protocol a configuration still names."""
    hints = []
    for name in names:
        if name in RENAMED:
            new = RENAMED[name]
            hints.append(f"{name} is now {new}" if new else f"{name} is gone (no longer needed)")
    return f" ({'; '.join(hints)}, since schema version 3)" if hints else ""


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def parse_bool(raw: str, source: str) -> bool:
    text = raw.strip().lower()
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    raise ConfigError(f"{source}: expected true or false, got {raw!r}")


def _coerce(name: str, raw: str, source: str) -> object:
    if FIELDS[name].type in ("bool", bool):
        return parse_bool(raw, source)
    if FIELDS[name].type in ("int", int):
        try:
            return _check(name, int(raw.strip()), source)
        except ValueError:
            raise ConfigError(f"{source}: expected an integer, got {raw!r}") from None
    if FIELDS[name].type in ("float", float):
        try:
            return _check(name, float(raw.strip()), source)
        except ValueError:
            raise ConfigError(f"{source}: expected a number, got {raw!r}") from None
    return raw


def _check(name: str, value: object, source: str) -> object:
    """``value`` of setting ``name`` if it has the setting's type and bounds (a
    float setting's as a float); else ConfigError naming ``source``."""
    if name not in FIELDS:
        raise ConfigError(f"{source}: unknown setting {name!r}{_renamed([name])}")
    spec = FIELDS[name]
    if spec.type in ("bool", bool):
        if not isinstance(value, bool):
            raise ConfigError(f"{source}: expected true or false, got {value!r}")
    elif spec.type in ("int", int):
        _check_int(spec, value, source)
    elif spec.type in ("float", float):
        return _checked_float(spec, value, source)
    elif not isinstance(value, str):
        raise ConfigError(f"{source}: expected a string, got {value!r}")
    return value


def _check_int(spec: dataclasses.Field[Any], value: object, source: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{source}: expected an integer, got {value!r}")
    minimum = spec.metadata["minimum"]
    if minimum is not None and value < minimum:
        raise ConfigError(f"{source}: must be at least {minimum}, got {value}")
    maximum = spec.metadata["maximum"]
    if maximum is not None and value > maximum:
        raise ConfigError(f"{source}: must be at most {maximum}, got {value}")


def _checked_float(spec: dataclasses.Field[Any], value: object, source: str) -> float:
    # An integer is taken as a number too (TOML's 60, an environment's "60").
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise ConfigError(f"{source}: expected a number, got {value!r}")
    if not math.isfinite(value):
        raise ConfigError(f"{source}: expected a finite number, got {value!r}")
    above = spec.metadata["above"]
    if above is not None and not value > above:
        raise ConfigError(f"{source}: must be more than {above}, got {value}")
    return float(value)
