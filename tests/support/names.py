"""Unique names for per-test databases, exchanges and queues."""

from __future__ import annotations

import secrets


def unique_name(prefix: str = "th_test_") -> str:
    """``th_test_`` + 8 hex digits."""
    return f"{prefix}{secrets.token_hex(4)}"
