"""Webhook targets (docs/webhooks.md; docs/design/shared-service.md, section
3): pure, no I/O.

A target is a URL that the events of some routing keys are POSTed to, signed
with its secret. This module holds the rules every delivery follows and
nothing that talks to a network or a file: :func:`parse_webhooks` reads the
targets file's contents (its TOML already parsed) and refuses, naming
``webhook[i].field``, what is wrong; :func:`signature` signs a request;
:func:`address_refusal` says why an address may not be called;
:func:`verdict` what an answer's status means; :func:`backoff_ms` the wait
before the next attempt; :func:`retry_after_s` a 429/503's own wish.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import ipaddress
import math
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from urllib.parse import urlsplit

from triggerhook.domain.namespaces import routing_key_patterns
from triggerhook.domain.ratelimits import topic_matches
from triggerhook.errors import ConfigError

# The headers a signed request carries (docs/webhooks.md, "Signature").
TIMESTAMP_HEADER = "x-triggerhook-timestamp"
SIGNATURE_HEADER = "x-triggerhook-signature"
SIGNATURE_VERSION = "v1"
# A dead letter's cause when a target would not take the event.
DEAD_CAUSE = "webhook_failed"

_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
MAX_TARGETS = 256
MAX_CONCURRENCY = 64
MAX_ATTEMPTS = 100
MAX_TIMEOUT_S = 300.0
MAX_BACKOFF_MS = 3_600_000  # an hour: the message stays unacked meanwhile
MAX_URL_CHARS = 2048
# A Retry-After is honoured up to the target's backoff_max_ms, never beyond this.
MAX_RETRY_AFTER_S = 3600.0
_KEYS = (
    "name",
    "url",
    "routing_keys",
    "secret_file",
    "secret_env",
    "concurrency",
    "timeout_s",
    "max_attempts",
    "backoff_initial_ms",
    "backoff_max_ms",
    "allow_private",
)


@dataclass(frozen=True, slots=True)
class WebhookTarget:
    """One ``[[webhook]]`` entry. The secret itself is not here: it is read
    (from ``secret_file`` or ``secret_env``) where the process is wired."""

    name: str
    url: str
    routing_keys: tuple[str, ...]
    secret_file: str = ""
    secret_env: str = ""
    concurrency: int = 4
    timeout_s: float = 10.0
    max_attempts: int = 8
    backoff_initial_ms: int = 1000
    backoff_max_ms: int = 60_000
    allow_private: bool = False

    def takes(self, routing_key: str) -> bool:
        return any(topic_matches(pattern, routing_key) for pattern in self.routing_keys)


def parse_webhooks(data: Mapping[str, object]) -> tuple[WebhookTarget, ...]:
    """The targets file's contents (its TOML parsed): ``[[webhook]]`` entries.
    Raises :class:`ConfigError` naming the entry and its field."""
    unknown = sorted(set(data) - {"webhook"})
    if unknown:
        raise ConfigError(f"webhooks file: unknown table {unknown[0]!r} (webhook)")
    entries = data.get("webhook", [])
    if not isinstance(entries, list):
        raise ConfigError("webhooks file: webhook must be an array of tables ([[webhook]])")
    if len(entries) > MAX_TARGETS:
        raise ConfigError(f"webhooks file: more than {MAX_TARGETS} [[webhook]] entries")
    targets: dict[str, WebhookTarget] = {}
    for index, entry in enumerate(entries):
        where = f"webhook[{index}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: must be a table")
        target = _target(entry, where)
        if target.name in targets:
            raise ConfigError(f"{where}.name: {target.name!r} is named twice")
        targets[target.name] = target
    return tuple(targets.values())


def _target(entry: Mapping[str, object], where: str) -> WebhookTarget:
    unknown = sorted(set(entry) - set(_KEYS))
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}: unknown key (expected {', '.join(_KEYS)})")
    name = _string(entry, where, "name")
    if not _NAME.fullmatch(name):
        raise ConfigError(f"{where}.name: {name!r} is not [a-z0-9][a-z0-9_-]{{0,62}}")
    secret_file = _string(entry, where, "secret_file", "")
    secret_env = _string(entry, where, "secret_env", "")
    if not secret_file and not secret_env:
        raise ConfigError(f"{where}.secret_file: give secret_file or secret_env (or both)")
    if secret_env and not _ENV_NAME.fullmatch(secret_env):
        raise ConfigError(f"{where}.secret_env: {secret_env[:64]!r} is not a variable name")
    initial_ms = _int(entry, where, "backoff_initial_ms", 1000, 1, MAX_BACKOFF_MS)
    max_ms = _int(entry, where, "backoff_max_ms", 60_000, 1, MAX_BACKOFF_MS)
    if max_ms < initial_ms:
        raise ConfigError(f"{where}.backoff_max_ms: must be at least backoff_initial_ms")
    allow_private = entry.get("allow_private", False)
    if not isinstance(allow_private, bool):
        raise ConfigError(f"{where}.allow_private: true or false")
    return WebhookTarget(
        name=name,
        url=_url(entry, where),
        routing_keys=routing_key_patterns(entry, where),
        secret_file=secret_file,
        secret_env=secret_env,
        concurrency=_int(entry, where, "concurrency", 4, 1, MAX_CONCURRENCY),
        timeout_s=_seconds(entry, where, "timeout_s", 10.0),
        max_attempts=_int(entry, where, "max_attempts", 8, 1, MAX_ATTEMPTS),
        backoff_initial_ms=initial_ms,
        backoff_max_ms=max_ms,
        allow_private=allow_private,
    )


def _url(entry: Mapping[str, object], where: str) -> str:
    url = _string(entry, where, "url")
    try:
        parts = urlsplit(url)
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        parts, port_ok = None, False
    if (
        parts is None
        or not port_ok
        or parts.scheme not in ("http", "https")
        or not parts.hostname
        or len(url) > MAX_URL_CHARS
        or any(c.isspace() for c in url)
    ):
        # Never the URL itself: it may hold a credential.
        raise ConfigError(f"{where}.url: an http:// or https:// URL with a host is required")
    return url


def _string(entry: Mapping[str, object], where: str, key: str, default: str | None = None) -> str:
    value = entry.get(key, default)
    if not isinstance(value, str):
        raise ConfigError(f"{where}.{key}: a string is required")
    return value


def _int(
    entry: Mapping[str, object], where: str, key: str, default: int, least: int, most: int
) -> int:
    value = entry.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
        raise ConfigError(f"{where}.{key}: an integer from {least} to {most}")
    return value


def _seconds(entry: Mapping[str, object], where: str, key: str, default: float) -> float:
    value = entry.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where}.{key}: a number of seconds is required")
    if not 0 < value <= MAX_TIMEOUT_S:
        raise ConfigError(f"{where}.{key}: more than 0, at most {MAX_TIMEOUT_S:g}")
    return float(value)


# -- signing ---------------------------------------------------------------------


def signature(secrets: tuple[bytes, ...], timestamp_s: int, body: bytes) -> str:
    """The signature header's value: ``v1=<hex HMAC-SHA256>`` of
    ``"<timestamp>." + body`` per secret, comma-separated (two while a
    secret is being rotated)."""
    signed = f"{timestamp_s}.".encode() + body
    return ",".join(
        f"{SIGNATURE_VERSION}={hmac.new(secret, signed, hashlib.sha256).hexdigest()}"
        for secret in secrets
    )


# -- where a request may go -----------------------------------------------------------


IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def address_refusal(address: IpAddress) -> str | None:
    """Why a target without ``allow_private`` may not be called at
    ``address`` (None: it may): loopback, link-local (cloud metadata
    services live at 169.254.169.254), private, unspecified, multicast,
    reserved. An IPv4-mapped IPv6 address is judged as its IPv4 one."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    for kind, flag in (
        ("a loopback address", address.is_loopback),
        ("a link-local address", address.is_link_local),
        ("the unspecified address", address.is_unspecified),
        ("a multicast address", address.is_multicast),
        ("a reserved address", address.is_reserved),
        ("a private address", address.is_private),
        ("not globally routable", not address.is_global),
    ):
        if flag:
            return f"{address} is {kind}"
    return None


# -- answers and retries ---------------------------------------------------------------


class Verdict(enum.Enum):
    DELIVERED = "delivered"  # 2xx: ack
    RETRY = "retry"  # try again after the back-off (if attempts are left)
    DEAD = "dead"  # never better on a retry: dead-letter at once


def verdict(status: int) -> Verdict:
    """What an answer's status means: 2xx delivered; 408, 429 and 5xx
    retried; any other (4xx, and 1xx/3xx: redirects are not followed) dead
    at once."""
    if 200 <= status < 300:
        return Verdict.DELIVERED
    if status in (408, 429) or 500 <= status < 600:
        return Verdict.RETRY
    return Verdict.DEAD


def backoff_ms(attempt: int, initial_ms: int, max_ms: int, rng: random.Random) -> int:
    """The wait after failed attempt ``attempt`` (1 = the first): equal
    jitter over the capped exponential ``initial_ms * 2**(attempt-1)``, so
    between half of it and all of it; ``rng`` seeded makes it replayable."""
    ceiling_ms: int = min(max_ms, initial_ms << min(attempt - 1, 62))
    half = ceiling_ms / 2
    return math.ceil(half + rng.uniform(0, half))


def retry_after_s(value: str | None, now_s: float, most_s: float) -> float | None:
    """A ``Retry-After`` header's wait (delta seconds or an HTTP date,
    ``now_s``: Unix time), at most ``most_s``; None: absent or unreadable."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        wait_s = float(int(text[:12]))
    else:
        try:
            wait_s = parsedate_to_datetime(text).timestamp() - now_s
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
    return max(0.0, min(wait_s, most_s, MAX_RETRY_AFTER_S))
