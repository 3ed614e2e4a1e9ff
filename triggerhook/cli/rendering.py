"""Every outcome as the CLI reports it (:data:`CLI_RENDERING`: its exit code,
and whether it is printed as a result), and the printing of results and of
stored tasks (``get``, ``list``): shared by the task commands of
:mod:`triggerhook.cli` and :mod:`triggerhook.cli.series_cmd`.

Exit codes: 0 success; 1 runtime failure (database, engine, or daemon
unreachable); 2 bad input or configuration, or a refusal the input caused (a
conflict, an id that fired within its dedup window, a series' operation on a
one-off task); 3 task not found; 4 too late to cancel or reschedule.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

from triggerhook.cli.backends import Found, Listed
from triggerhook.domain.meta import meta_json
from triggerhook.domain.outcomes import Outcome

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_TOO_LATE = 0, 1, 2, 3, 4


@dataclass(frozen=True, slots=True)
class CliRendering:
    """An outcome on the command line: the exit code; ``result``: printed on
    stdout as ``{"id", "result": <the outcome's code>}`` (else a success prints
    the task, a failure one error line on stderr, followed by ``hint``)."""

    exit: int
    result: bool = False
    hint: str = ""


# Every outcome as the CLI reports it (over either backend).
CLI_RENDERING: dict[Outcome, CliRendering] = {
    Outcome.CREATED: CliRendering(EXIT_OK),
    Outcome.EXISTS: CliRendering(EXIT_OK),
    Outcome.REPLACED: CliRendering(EXIT_OK),
    Outcome.KEPT: CliRendering(EXIT_OK),
    Outcome.RESCHEDULED: CliRendering(EXIT_OK, result=True),
    Outcome.CANCELLED: CliRendering(EXIT_OK, result=True),
    Outcome.FOUND: CliRendering(EXIT_OK),
    Outcome.PAUSED: CliRendering(EXIT_OK, result=True),
    Outcome.PAUSED_AFTER_THIS: CliRendering(EXIT_OK, result=True),
    Outcome.RESUMED: CliRendering(EXIT_OK, result=True),
    Outcome.ENDED: CliRendering(EXIT_OK, result=True),
    Outcome.TRIGGERED: CliRendering(EXIT_OK, result=True),
    Outcome.BACKFILLED: CliRendering(EXIT_OK, result=True),
    Outcome.CONFLICT: CliRendering(EXIT_USAGE),
    Outcome.NOT_FOUND: CliRendering(EXIT_NOT_FOUND, result=True),
    Outcome.TOO_LATE: CliRendering(EXIT_TOO_LATE, result=True),
    # A refusal, like a conflict: the id names a task, but not a series.
    Outcome.NOT_A_SERIES: CliRendering(EXIT_USAGE, result=True),
    # A refusal, like a conflict: the id fired within its dedup window (the
    # error line says when).
    Outcome.ALREADY_FIRED: CliRendering(EXIT_USAGE),
    Outcome.INVALID: CliRendering(EXIT_USAGE),
    Outcome.MALFORMED_JSON: CliRendering(EXIT_USAGE),
    Outcome.UNSUPPORTED_MEDIA_TYPE: CliRendering(EXIT_USAGE),
    Outcome.TOO_LARGE: CliRendering(EXIT_USAGE),
    Outcome.REQUEST_TIMEOUT: CliRendering(EXIT_FAILURE),
    Outcome.UNKNOWN_TYPE: CliRendering(EXIT_USAGE),
    Outcome.UNAUTHORIZED: CliRendering(
        EXIT_USAGE, hint=" (the daemon's api_token: --api-token or TRIGGERHOOK_API_TOKEN)"
    ),
    Outcome.FORBIDDEN: CliRendering(EXIT_USAGE),  # the error line names the rule
    Outcome.FORBIDDEN_REPLY_TO: CliRendering(EXIT_USAGE),
    Outcome.TOO_COSTLY: CliRendering(EXIT_USAGE),
    Outcome.UNAVAILABLE: CliRendering(EXIT_FAILURE),
    Outcome.OVERLOADED: CliRendering(EXIT_FAILURE),
    Outcome.OVER_QUOTA: CliRendering(EXIT_FAILURE),  # not now: the error line names the quota
    Outcome.STOPPING: CliRendering(EXIT_FAILURE),
    Outcome.INTERNAL: CliRendering(EXIT_FAILURE),
}


def print_outcome(task_id: str, outcome: Outcome, **more: object) -> int:
    """Print ``{"id", "result", **more}``; the exit code the outcome means."""
    rendering = CLI_RENDERING[outcome]
    assert rendering.result, f"{outcome} is not a result"
    print_json({"id": task_id, "result": outcome.code, **more})
    return rendering.exit


def print_json(data: dict[str, object]) -> None:
    print(json.dumps(data))


def found_json(found: Found) -> dict[str, object]:
    """A task as ``get`` prints it: its payload as text, or ``{"base64"}``."""
    try:
        payload: object = found.payload.decode("utf-8")
    except UnicodeDecodeError:
        payload = {"base64": base64.b64encode(found.payload).decode()}
    return {
        "id": found.id,
        "due_ms": found.due_ms,
        "routing_key": found.routing_key,
        "payload": payload,
        "state": found.state.value,
        **_waiting(found.throttled, found.fire_ms),
        **meta_json(found.meta),
    }


def listed_json(task: Listed) -> dict[str, object]:
    """A task as ``list`` prints it (no payload)."""
    return {
        "id": task.id,
        "due_ms": task.due_ms,
        "routing_key": task.routing_key,
        "state": task.state.value,
        **_waiting(task.throttled, task.fire_ms),
        **meta_json(task.meta),
    }


def _waiting(throttled: bool, fire_ms: int | None) -> dict[str, object]:
    """A stored task's wait, printed as the metadata is (only what is set):
    ``"throttled": true`` while a rate limit's postponement holds it in the
    database, ``fire_ms`` when it fires after its due time. (The HTTP API
    always says ``throttled``, false too.)"""
    shown: dict[str, object] = {"throttled": True} if throttled else {}
    if fire_ms is not None:
        shown["fire_ms"] = fire_ms
    return shown
