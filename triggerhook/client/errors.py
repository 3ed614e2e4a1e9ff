"""Deprecated: import these from :mod:`triggerhook_client` (see
:mod:`triggerhook.client`)."""

from triggerhook_client.errors import (
    ApiError,
    Conflict,
    InvalidRequest,
    NotFound,
    TooLate,
    Unauthorized,
    Unavailable,
)

__all__ = [
    "ApiError",
    "Conflict",
    "InvalidRequest",
    "NotFound",
    "TooLate",
    "Unauthorized",
    "Unavailable",
]
