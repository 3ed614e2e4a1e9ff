"""The gRPC API's answers: every outcome's status code (:data:`GRPC_RENDERING`)
and the error a call ends with (:class:`GrpcError`).

A success is ``OK``, its outcome's code in the reply's ``outcome`` field. An
error is its status code, the outcome's message as the status details, and
in the trailing metadata (the keys: :mod:`triggerhook_client.grpc.keys`,
shared with the client) the HTTP API's ``error.code``
(``triggerhook-error-code``; overloaded is reported as unavailable there
too), the field at fault (``triggerhook-error-field``) and what the outcome
shows (``triggerhook-fired-ms`` of already_fired): one vocabulary, the same
words as HTTP's error body.

Choices: a create refused by what its id holds (conflict, already_fired) is
``ALREADY_EXISTS``; too_late (being published) is ``FAILED_PRECONDITION``;
too_costly (narrow the filter, do not just retry) ``OUT_OF_RANGE``; an
over-size message is refused by gRPC itself, ``RESOURCE_EXHAUSTED``.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from triggerhook_client.grpc.keys import CODE_KEY, FIELD_KEY, shown_key

from triggerhook.domain.outcomes import Outcome


@dataclass(frozen=True, slots=True)
class GrpcRendering:
    """An outcome over gRPC: the status code and, for an error, the outcome
    whose code the metadata carries, and the values shown beside it."""

    status: grpc.StatusCode
    reported_as: Outcome | None = None  # None: a success
    shows: tuple[str, ...] = ()

    @property
    def code(self) -> str | None:
        return None if self.reported_as is None else self.reported_as.code


_OK = GrpcRendering(grpc.StatusCode.OK)
_S = grpc.StatusCode


def _error(status: grpc.StatusCode, outcome: Outcome, *shows: str) -> GrpcRendering:
    return GrpcRendering(status, outcome, shows)


# Every outcome as the gRPC API answers it; None: the gRPC API never gives it
# (series operations, the command channel's and HTTP's own framing errors).
GRPC_RENDERING: dict[Outcome, GrpcRendering | None] = {
    Outcome.CREATED: _OK,
    Outcome.EXISTS: _OK,
    Outcome.REPLACED: _OK,
    Outcome.KEPT: _OK,
    Outcome.RESCHEDULED: _OK,
    Outcome.CANCELLED: _OK,
    Outcome.FOUND: _OK,
    Outcome.PAUSED: None,  # no series operations over gRPC (yet)
    Outcome.PAUSED_AFTER_THIS: None,
    Outcome.RESUMED: None,
    Outcome.ENDED: None,
    Outcome.TRIGGERED: None,
    Outcome.BACKFILLED: None,
    Outcome.CONFLICT: _error(_S.ALREADY_EXISTS, Outcome.CONFLICT),
    Outcome.NOT_FOUND: _error(_S.NOT_FOUND, Outcome.NOT_FOUND),
    Outcome.TOO_LATE: _error(_S.FAILED_PRECONDITION, Outcome.TOO_LATE),
    Outcome.NOT_A_SERIES: None,
    Outcome.ALREADY_FIRED: _error(_S.ALREADY_EXISTS, Outcome.ALREADY_FIRED, "fired_ms"),
    Outcome.INVALID: _error(_S.INVALID_ARGUMENT, Outcome.INVALID),
    Outcome.MALFORMED_JSON: None,  # a message protobuf cannot decode: gRPC's own INTERNAL
    Outcome.UNSUPPORTED_MEDIA_TYPE: None,  # HTTP's
    Outcome.TOO_LARGE: _error(_S.RESOURCE_EXHAUSTED, Outcome.TOO_LARGE),  # gRPC refuses it
    Outcome.REQUEST_TIMEOUT: None,  # HTTP's (a gRPC call has its client's deadline)
    Outcome.UNKNOWN_TYPE: None,  # the command channel's
    Outcome.UNAUTHORIZED: _error(_S.UNAUTHENTICATED, Outcome.UNAUTHORIZED),
    Outcome.FORBIDDEN: _error(_S.PERMISSION_DENIED, Outcome.FORBIDDEN),
    Outcome.FORBIDDEN_REPLY_TO: None,  # the command channel's
    Outcome.TOO_COSTLY: _error(_S.OUT_OF_RANGE, Outcome.TOO_COSTLY),
    Outcome.UNAVAILABLE: _error(_S.UNAVAILABLE, Outcome.UNAVAILABLE),
    # Told apart from a dependency being down only in the daemon's log (as HTTP).
    Outcome.OVERLOADED: _error(_S.UNAVAILABLE, Outcome.UNAVAILABLE),
    # The caller's own quota (HTTP's 429): RESOURCE_EXHAUSTED, as gRPC's rate limits say.
    Outcome.OVER_QUOTA: _error(_S.RESOURCE_EXHAUSTED, Outcome.OVER_QUOTA),
    Outcome.STOPPING: _error(_S.UNAVAILABLE, Outcome.STOPPING),
    Outcome.INTERNAL: _error(_S.INTERNAL, Outcome.INTERNAL),
}


class GrpcError(Exception):
    """An error answer: an outcome (its status and code), message, field."""

    def __init__(
        self,
        outcome: Outcome,
        message: str | None = None,
        field: str | None = None,
        **values: object,
    ) -> None:
        """``message``, or else the outcome's template filled with ``values``."""
        rendering = GRPC_RENDERING[outcome]
        assert rendering is not None and rendering.code is not None, f"{outcome}: no gRPC error"
        text = outcome.message(**values) if message is None else message
        super().__init__(text)
        self.status = rendering.status
        self.code = rendering.code
        self.message = text
        self.field = field
        self.shown = {name: values[name] for name in rendering.shows}

    def metadata(self) -> tuple[tuple[str, str], ...]:
        """The trailing metadata: the error code, the field, the shown values."""
        pairs = [(CODE_KEY, self.code)]
        if self.field is not None:
            pairs.append((FIELD_KEY, self.field))
        pairs.extend((shown_key(k), str(v)) for k, v in self.shown.items() if v is not None)
        return tuple(pairs)
