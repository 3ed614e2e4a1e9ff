"""A TOML file a setting names (``namespaces_file``, ``webhooks_file``), read
whole and parsed, bounded by its size: reading it costs no more than linear
work, and a mistake is a :class:`~triggerhook.errors.ConfigError` naming the
setting and the file."""

from __future__ import annotations

import tomllib

from triggerhook.errors import ConfigError


def read_toml_file(path: str, setting: str, max_bytes: int) -> dict[str, object]:
    """The file's TOML; ConfigError (``<setting>: ...``) when it cannot be
    read, is over ``max_bytes`` or is not TOML (UTF-8)."""
    try:
        with open(path, "rb") as file:
            raw = file.read(max_bytes + 1)
    except OSError as exc:
        raise ConfigError(f"{setting}: cannot read {path!r}: {exc.strerror}") from None
    if len(raw) > max_bytes:
        raise ConfigError(f"{setting}: {path!r} is over {max_bytes:,} bytes")
    try:
        return tomllib.loads(raw.decode())
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{setting}: {path!r} is not TOML: {exc}") from None
