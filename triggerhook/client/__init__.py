"""Deprecated: import :mod:`triggerhook_client` instead (``pip install
triggerhook-client``, or ``./client`` from this repository).

The Python client of the daemon's HTTP API is a distribution of its own,
``triggerhook-client``, which needs only httpx. This package re-exports its
public names, unchanged (the same classes), so that code written against
``triggerhook.client`` keeps working; it will be removed in a later release.
"""

from triggerhook_client import (
    ApiError,
    AsyncClient,
    At,
    BulkCancelled,
    Client,
    Conflict,
    HeaderValue,
    Health,
    InvalidRequest,
    Late,
    NotFound,
    Scheduled,
    TaskPage,
    TaskRequest,
    TaskStatus,
    TaskSummary,
    Timeline,
    TooLate,
    Unauthorized,
    Unavailable,
)

__all__ = [
    "ApiError",
    "AsyncClient",
    "At",
    "BulkCancelled",
    "Client",
    "Conflict",
    "HeaderValue",
    "Health",
    "InvalidRequest",
    "Late",
    "NotFound",
    "Scheduled",
    "TaskPage",
    "TaskRequest",
    "TaskStatus",
    "TaskSummary",
    "Timeline",
    "TooLate",
    "Unauthorized",
    "Unavailable",
]
