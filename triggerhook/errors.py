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
    "AlreadyFiredError",
    "BrokerUnavailable",
    "ConfigError",
    "ConflictError",
    "EngineFailure",
    "Forbidden",
    "InstanceNameInUse",
    "Interrupted",
    "MetricsRejected",
    "MetricsUnavailable",
    "NotRunningError",
    "OverQuota",
    "Overloaded",
    "SchemaError",
    "StoreError",
    "StoreReadOnly",
    "StoreUnavailable",
    "TooCostly",
    "TooLateError",
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

    _WHY = "already exists with different content"

    def __init__(self, task_id: str, index: int | None = None) -> None:
        super().__init__(f"task {task_id!r} {self._WHY}")
        self.task_id = task_id
        self.index = index


class TooLateError(ConflictError):
    """A replace (``on_conflict`` REPLACE) of a task that is being published:
    too late to change it; nothing written."""

    _WHY = "is being published: too late to replace it"


class AlreadyFiredError(ConflictError):
    """A create of an id that fired within its dedup window (``fired_ms``,
    epoch ms, by the engine's clock): nothing written."""

    _WHY = "fired within its dedup window"

    def __init__(self, task_id: str, fired_ms: int, index: int | None = None) -> None:
        super().__init__(task_id, index)
        self.fired_ms = fired_ms


class Forbidden(TriggerHookError):
    """The caller's token may not do this (its namespace or its scopes:
    docs/design/shared-service.md); nothing was written. The message names
    the rule."""


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


class StoreReadOnly(StoreUnavailable):
    """The database answers but refuses writes for now: read-only (a demoted
    writer after a failover: MySQL/MariaDB 1290, 1792, 3100) or out of space
    (1114, 1021, errno 28; ``full``). Transient: writes succeed again once an
    operator or the failover fixes it; reads go on meanwhile."""

    def __init__(self, message: str, *, full: bool = False) -> None:
        super().__init__(message)
        self.full = full  # out of space, rather than read-only

    @property
    def kind(self) -> str:
        """The refusal as readiness names it (never the server's text)."""
        return "out of space" if self.full else "read-only"


class Overloaded(TransientError):
    """Too many calls already wait (a full group-commit queue): refused at once."""


class OverQuota(TriggerHookError):
    """A create over its namespace's quota: creates a second, or pending tasks
    (docs/design/shared-service.md); nothing was written. The message names
    the quota. Not now: the same create passes once tokens come back or
    tasks fire."""


class StoreError(TriggerHookError):
    """The database rejected an operation for a reason retrying will not fix."""


class TooCostly(TriggerHookError):
    """A read of tasks (a listing, count, timeline, a bulk cancel's batch) was
    refused or stopped for costing more than its bounds allow: the database's
    time limit for such reads (``listing_timeout_ms``), or an answer too big.
    Not transient: the same read costs as much again; narrow the filter."""


class Interrupted(TriggerHookError):
    """A long call stopped before its end because it was asked to: its
    caller went away or the daemon is stopping (the message says which)."""


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
