"""The webhook targets file and the targets' secrets: the I/O around
:func:`triggerhook.domain.webhooks.parse_webhooks`.

Each is read once, where the process is wired (a change needs a restart); an
error is a :class:`~triggerhook.errors.ConfigError` naming the setting, the
file and the entry, and the daemon exits 2. A secret never appears in a
message.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from triggerhook.domain.ratelimits import topic_matches
from triggerhook.domain.webhooks import WebhookTarget, parse_webhooks
from triggerhook.errors import ConfigError
from triggerhook.tomlfile import read_toml_file

MAX_FILE_BYTES = 1024 * 1024
MAX_SECRET_BYTES = 4096
MIN_SECRET_BYTES = 16  # a shorter HMAC key is guessable
MAX_SECRETS_PER_FILE = 2  # the current one and, while rotating, the one before


def read_webhooks(path: str, dead_letter_routing_key: str) -> tuple[WebhookTarget, ...]:
    """The targets file's contents; ConfigError naming the file and what is
    wrong. A target whose patterns match ``dead_letter_routing_key`` is
    refused: its own dead letters would come back to it."""
    data = read_toml_file(path, "webhooks_file", MAX_FILE_BYTES)
    try:
        targets = parse_webhooks(data)
    except ConfigError as exc:
        raise ConfigError(f"webhooks_file {path!r}: {exc}") from None
    for index, target in enumerate(targets):
        looped = [p for p in target.routing_keys if topic_matches(p, dead_letter_routing_key)]
        if looped:
            raise ConfigError(
                f"webhooks_file {path!r}: webhook[{index}].routing_keys: {looped[0]!r} matches "
                f"dead_letter_routing_key {dead_letter_routing_key!r} (its dead letters would "
                "come back to it)"
            )
    return targets


def read_secret_file(path: str, where: str) -> tuple[bytes, ...]:
    """The secrets in the file at ``path``: one per line (at most
    :data:`MAX_SECRETS_PER_FILE`: while rotating, the new one first), blanks
    around them ignored. ``where`` names the setting in an error."""
    try:
        with open(path, "rb") as file:
            raw = file.read(MAX_SECRET_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read {path!r}: {exc.strerror}") from None
    if len(raw) > MAX_SECRET_BYTES:
        raise ConfigError(f"{where}: {path!r} is over {MAX_SECRET_BYTES} bytes")
    secrets = tuple(line.strip() for line in raw.splitlines() if line.strip())
    _check(secrets, f"{where} ({path!r})")
    return secrets


def target_secrets(
    target: WebhookTarget, where: str, environ: Mapping[str, str] = os.environ
) -> tuple[bytes, ...]:
    """A target's secrets: its ``secret_file``'s, then its ``secret_env``'s."""
    secrets: tuple[bytes, ...] = ()
    if target.secret_file:
        secrets += read_secret_file(target.secret_file, f"{where}.secret_file")
    if target.secret_env:
        value = environ.get(target.secret_env, "").strip().encode()
        _check((value,) if value else (), f"{where}.secret_env (${target.secret_env})")
        secrets += (value,)
    return secrets


def _check(secrets: tuple[bytes, ...], where: str) -> None:
    if not secrets:
        raise ConfigError(f"{where}: no secret in it")
    if len(secrets) > MAX_SECRETS_PER_FILE:
        raise ConfigError(f"{where}: at most {MAX_SECRETS_PER_FILE} secrets (one a line)")
    if any(len(secret) < MIN_SECRET_BYTES for secret in secrets):
        raise ConfigError(f"{where}: a secret must be at least {MIN_SECRET_BYTES} bytes")
