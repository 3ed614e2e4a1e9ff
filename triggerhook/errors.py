"""The project's error hierarchy.

Adapters translate driver exceptions (PyMySQL, pika) into these at their
boundary (``raise ... from exc``), so the engine and the callers of the library
API never see driver types. Only :class:`TransientError` subclasses are retried.
"""

from __future__ import annotations

# The base class is the client distribution's (its ApiError is one too), so
# that one ``except TriggerHookError`` catches the library's and the client's.
from triggerhook_client.errors import TriggerHookError

__all__ = [
    "BrokerUnavailable",
    "ConfigError",
    "ConflictError",
    "EngineFailure",
    "InstanceNameInUse",
    "MetricsRejected",
    "MetricsUnavailable",
    "NotRunningError",
    "Overloaded",
    "SchemaError",
    "StoreError",
    "StoreUnavailable",
    "TransientError",
    "TriggerHookError",
    "ValidationError",
]


class ValidationError(TriggerHookError, ValueError):
    """Bad input from a caller: names the offending field; nothing was written."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class ConflictError(TriggerHookError):
    """A task with this id exists with different content. ``index``: in a
    batch, the position of the task that conflicts (None for a single task)."""

    def __init__(self, task_id: str, index: int | None = None) -> None:
        super().__init__(f"task {task_id!r} already exists with different content")
        self.task_id = task_id
        self.index = index


class ConfigError(TriggerHookError):
    """The configuration is invalid (unknown key, wrong type, bad value)."""


class SchemaError(TriggerHookError):
    """The database schema is missing or has an unexpected version."""


class InstanceNameInUse(TriggerHookError):
    """A live process holds this instance name (R1): a second process refuses to start."""

    def __init__(self, instance: str, host: str, pid: int) -> None:
        super().__init__(
            f"instance name {instance!r} is in use by a live process on host {host!r}, "
            f"pid {pid}; give this process another instance_id (or leave it empty for "
            "a unique one), or stop the other"
        )
        self.instance = instance
        self.host = host
        self.pid = pid


class TransientError(TriggerHookError):
    """A failure that may go away by itself; the retry policy retries these."""


class StoreUnavailable(TransientError):
    """The database could not be reached or dropped the connection."""


class Overloaded(TransientError):
    """Too many calls already wait (a full group-commit queue): refused at once."""


class StoreError(TriggerHookError):
    """The database rejected an operation for a reason retrying will not fix."""


class BrokerUnavailable(TransientError):
    """The message broker could not be reached or dropped the connection."""


class NotRunningError(TriggerHookError):
    """The engine is not running (not started, stopping, or stopped)."""


class EngineFailure(TriggerHookError):
    """An engine thread failed in a way it could not recover from."""


class MetricsUnavailable(TransientError):
    """The metrics sink (InfluxDB) could not be reached, or timed out."""


class MetricsRejected(TriggerHookError):
    """The metrics sink refused a write for a reason retrying will not fix."""
