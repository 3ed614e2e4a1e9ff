"""Unique names for per-test databases, exchanges, queues and task ids."""

from __future__ import annotations

import secrets


def unique_name(prefix: str = "th_test_") -> str:
    """``th_test_`` + 8 hex digits."""
    return f"{prefix}{secrets.token_hex(4)}"


def uid(prefix: str) -> str:
    """A task id of its own for a test sharing a daemon: ``prefix-`` + 8 hex digits."""
    return f"{prefix}-{secrets.token_hex(4)}"
