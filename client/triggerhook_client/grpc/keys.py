"""The gRPC API's names on the wire besides the messages, in one place for
both ends: the daemon's server (``triggerhook.api.grpc``) writes them,
:class:`~triggerhook_client.grpc.GrpcClient` reads them.

An error answer carries, in its trailing metadata, the HTTP API's
``error.code`` (:data:`CODE_KEY`), the field at fault (:data:`FIELD_KEY`)
and what the outcome shows (:func:`shown_key`: ``triggerhook-fired-ms`` of
already_fired).
"""

from __future__ import annotations

from triggerhook_client.grpc import triggerhook_pb2 as pb

# The service's full name, as the .proto gives it (the methods' paths start with it).
SERVICE: str = pb.DESCRIPTOR.services_by_name["Tasks"].full_name

CODE_KEY = "triggerhook-error-code"
FIELD_KEY = "triggerhook-error-field"
SHOWN_PREFIX = "triggerhook-"  # and the shown value's name, _ as -: triggerhook-fired-ms


def shown_key(name: str) -> str:
    """The metadata key of a value an outcome shows (``fired_ms``: triggerhook-fired-ms)."""
    return SHOWN_PREFIX + name.replace("_", "-")
