"""The one outcome vocabulary (triggerhook.domain.outcomes) and each interface's
table of it: HTTP (status, code), the AMQP command channel (ok, code, fate) and
the CLI (exit code). Every table names every outcome; the words on the wire are
pinned here as well as by the interfaces' own tests."""

from __future__ import annotations

import re

import grpc
import pytest

from triggerhook.api.command_messages import AMQP_RENDERING, Disposition, answer, code_of
from triggerhook.api.grpc.answers import GRPC_RENDERING, GrpcError
from triggerhook.api.http import HTTP_RENDERING, ApiError
from triggerhook.cli import (
    CLI_RENDERING,
    EXIT_FAILURE,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_TOO_LATE,
    EXIT_USAGE,
)
from triggerhook.domain.outcomes import (
    CANCEL_OUTCOMES,
    INSERT_OUTCOMES,
    MESSAGES,
    RESCHEDULE_OUTCOMES,
    SERIES_OUTCOMES,
    SUCCESSES,
    Outcome,
    error_outcome,
    unavailable_what,
)
from triggerhook.domain.task import CancelResult, InsertOutcome, RescheduleResult
from triggerhook.errors import (
    AlreadyFiredError,
    BrokerUnavailable,
    ConfigError,
    ConflictError,
    EngineFailure,
    Interrupted,
    MetricsUnavailable,
    NotRunningError,
    Overloaded,
    SchemaError,
    StoreError,
    StoreUnavailable,
    TooCostly,
    TooLateError,
    ValidationError,
)

ALL = set(Outcome)
# What an interface never gives (None in its table), and why.
NOT_HTTP = {Outcome.UNKNOWN_TYPE, Outcome.FORBIDDEN_REPLY_TO}  # the command channel's
NOT_AMQP = {
    Outcome.FOUND,  # no lookup command
    Outcome.UNSUPPORTED_MEDIA_TYPE,  # HTTP's
    Outcome.TOO_LARGE,  # HTTP's (an oversized command body is INVALID, field "body")
    Outcome.REQUEST_TIMEOUT,  # HTTP's
    Outcome.TOO_COSTLY,  # no command reads tasks in bulk
}
NOT_GRPC = {
    *NOT_HTTP,
    # no series operations over gRPC
    Outcome.PAUSED,
    Outcome.PAUSED_AFTER_THIS,
    Outcome.RESUMED,
    Outcome.ENDED,
    Outcome.TRIGGERED,
    Outcome.BACKFILLED,
    Outcome.NOT_A_SERIES,
    Outcome.MALFORMED_JSON,  # a message protobuf cannot decode: gRPC's own error
    Outcome.UNSUPPORTED_MEDIA_TYPE,  # HTTP's
    Outcome.REQUEST_TIMEOUT,  # HTTP's: a gRPC call has its client's deadline
}


def test_codes_are_unique_stable_words() -> None:
    codes = [outcome.code for outcome in Outcome]
    assert len(codes) == len(set(codes)) == len(Outcome.__members__)  # no aliases
    for code in codes:
        assert re.fullmatch(r"[a-z]+(_[a-z]+)*", code), code


def test_every_outcome_has_a_message_template() -> None:
    assert set(MESSAGES) == ALL
    assert all(MESSAGES[outcome] for outcome in Outcome)
    assert {o for o in Outcome if o.ok} == SUCCESSES
    assert {
        Outcome.CREATED,
        Outcome.EXISTS,
        Outcome.REPLACED,
        Outcome.KEPT,
        Outcome.RESCHEDULED,
        Outcome.CANCELLED,
        Outcome.FOUND,
        Outcome.PAUSED,
        Outcome.PAUSED_AFTER_THIS,
        Outcome.RESUMED,
        Outcome.ENDED,
        Outcome.TRIGGERED,
        Outcome.BACKFILLED,
    } == SUCCESSES


@pytest.mark.parametrize(
    "table",
    [HTTP_RENDERING, AMQP_RENDERING, CLI_RENDERING, GRPC_RENDERING],
    ids=["http", "amqp", "cli", "grpc"],
)
def test_every_interface_names_every_outcome(table: dict[Outcome, object]) -> None:
    assert set(table) == ALL


def test_the_outcomes_an_interface_never_gives_are_the_documented_ones() -> None:
    assert {o for o, r in HTTP_RENDERING.items() if r is None} == NOT_HTTP
    assert {o for o, r in AMQP_RENDERING.items() if r is None} == NOT_AMQP
    assert all(rendering is not None for rendering in CLI_RENDERING.values())
    assert {o for o, r in GRPC_RENDERING.items() if r is None} == NOT_GRPC


def test_http_rendering() -> None:
    for outcome, rendering in HTTP_RENDERING.items():
        if rendering is None:
            continue
        if outcome.ok:
            assert 200 <= rendering.status < 300 and rendering.code is None, outcome
        else:
            assert 400 <= rendering.status < 600, outcome
            # Overloaded is answered as unavailable (told apart in the log only).
            expected = Outcome.UNAVAILABLE if outcome is Outcome.OVERLOADED else outcome
            assert rendering.code == expected.code, outcome
    statuses = {o: r.status for o, r in HTTP_RENDERING.items() if r is not None}
    assert statuses == {
        Outcome.CREATED: 201,
        Outcome.EXISTS: 200,
        Outcome.REPLACED: 200,
        Outcome.KEPT: 200,
        Outcome.RESCHEDULED: 200,
        Outcome.CANCELLED: 204,
        Outcome.FOUND: 200,
        Outcome.PAUSED: 200,
        Outcome.PAUSED_AFTER_THIS: 200,
        Outcome.RESUMED: 200,
        Outcome.ENDED: 200,
        Outcome.TRIGGERED: 200,
        Outcome.BACKFILLED: 200,
        Outcome.CONFLICT: 409,
        Outcome.NOT_FOUND: 404,
        Outcome.TOO_LATE: 409,
        Outcome.NOT_A_SERIES: 409,
        Outcome.ALREADY_FIRED: 409,
        Outcome.INVALID: 422,
        Outcome.TOO_COSTLY: 422,
        Outcome.MALFORMED_JSON: 400,
        Outcome.UNSUPPORTED_MEDIA_TYPE: 415,
        Outcome.TOO_LARGE: 413,
        Outcome.REQUEST_TIMEOUT: 408,
        Outcome.UNAUTHORIZED: 401,
        Outcome.FORBIDDEN: 403,
        Outcome.UNAVAILABLE: 503,
        Outcome.OVERLOADED: 503,
        Outcome.OVER_QUOTA: 429,
        Outcome.STOPPING: 503,
        Outcome.INTERNAL: 500,
    }


def test_grpc_rendering() -> None:
    """Successes are OK; an error's code is HTTP's (one vocabulary)."""
    for outcome, rendering in GRPC_RENDERING.items():
        if rendering is None:
            continue
        assert (rendering.status is grpc.StatusCode.OK) is outcome.ok, outcome
        http = HTTP_RENDERING[outcome]
        assert http is not None and rendering.code == http.code, outcome
        assert rendering.shows == http.shows, outcome
    S = grpc.StatusCode
    statuses = {o: r.status for o, r in GRPC_RENDERING.items() if r is not None and not o.ok}
    assert statuses == {
        Outcome.CONFLICT: S.ALREADY_EXISTS,
        Outcome.ALREADY_FIRED: S.ALREADY_EXISTS,
        Outcome.NOT_FOUND: S.NOT_FOUND,
        Outcome.TOO_LATE: S.FAILED_PRECONDITION,
        Outcome.INVALID: S.INVALID_ARGUMENT,
        Outcome.TOO_COSTLY: S.OUT_OF_RANGE,
        Outcome.TOO_LARGE: S.RESOURCE_EXHAUSTED,
        Outcome.OVER_QUOTA: S.RESOURCE_EXHAUSTED,
        Outcome.UNAUTHORIZED: S.UNAUTHENTICATED,
        Outcome.FORBIDDEN: S.PERMISSION_DENIED,
        Outcome.UNAVAILABLE: S.UNAVAILABLE,
        Outcome.OVERLOADED: S.UNAVAILABLE,
        Outcome.STOPPING: S.UNAVAILABLE,
        Outcome.INTERNAL: S.INTERNAL,
    }


def test_grpc_errors_carry_the_http_code_field_and_shown_values() -> None:
    fired = GrpcError(Outcome.ALREADY_FIRED, field="id", id="t-1", fired_ms=5)
    assert (fired.status, fired.message) == (
        grpc.StatusCode.ALREADY_EXISTS,
        "task 't-1' fired at 5 (epoch ms), within its dedup window",
    )
    assert fired.metadata() == (
        ("triggerhook-error-code", "already_fired"),
        ("triggerhook-error-field", "id"),
        ("triggerhook-fired-ms", "5"),
    )
    busy = GrpcError(Outcome.OVERLOADED)
    assert busy.metadata() == (("triggerhook-error-code", "unavailable"),)


def test_http_errors_as_answered() -> None:
    gone = ApiError(Outcome.NOT_FOUND, id="t-1")
    assert (gone.status, gone.code, gone.message) == (
        404,
        "not_found",
        "task 't-1' is unknown or has fired",
    )
    late = ApiError(Outcome.TOO_LATE, id="t-1")
    assert (late.status, late.code, late.message) == (
        409,
        "too_late",
        "task 't-1' is being published",
    )
    busy = ApiError(Outcome.OVERLOADED)
    assert (busy.status, busy.code, busy.message) == (
        503,
        "unavailable",
        "temporarily unavailable; retry",
    )
    assert busy.headers == {"Retry-After": "1"}
    down = ApiError(Outcome.UNAVAILABLE, what=unavailable_what(StoreUnavailable("x")))
    assert down.message == "database unavailable; retry"
    assert ApiError(Outcome.UNAUTHORIZED).headers == {"WWW-Authenticate": "Bearer"}
    stopping = ApiError(Outcome.STOPPING)
    assert stopping.message == "the daemon is stopping; retry on another"
    assert stopping.headers == {}


def test_amqp_rendering() -> None:
    for outcome, rendering in AMQP_RENDERING.items():
        if rendering is None:
            continue
        assert rendering.ok is outcome.ok, outcome
        if outcome.ok:
            assert rendering.disposition is Disposition.ANSWERED, outcome
        elif outcome is not Outcome.INTERNAL:
            assert code_of(outcome) == outcome.code, outcome
    assert code_of(Outcome.INTERNAL) == "internal_error"
    fates = {o: r.disposition for o, r in AMQP_RENDERING.items() if r is not None and not o.ok}
    assert {o for o, d in fates.items() if d is Disposition.ANSWERED} == {
        Outcome.CONFLICT,
        Outcome.NOT_FOUND,
        Outcome.TOO_LATE,
        Outcome.NOT_A_SERIES,
        Outcome.ALREADY_FIRED,
    }
    assert {o for o, d in fates.items() if d is Disposition.RETRIED} == {
        Outcome.UNAVAILABLE,
        Outcome.OVERLOADED,
        Outcome.STOPPING,
    }
    assert {o for o, d in fates.items() if d is Disposition.REFUSED} == {
        Outcome.UNAUTHORIZED,
        Outcome.FORBIDDEN_REPLY_TO,
    }


def test_amqp_replies_as_answered() -> None:
    assert answer(Outcome.NOT_FOUND, id="t-1") == {
        "ok": False,
        "error": {
            "code": "not_found",
            "message": "task 't-1' not found (unknown, or fired already)",
        },
    }
    assert answer(Outcome.TOO_LATE, id="t-1", action="cancel") == {
        "ok": False,
        "error": {"code": "too_late", "message": "task 't-1' is being fired; too late to cancel"},
    }
    assert answer(Outcome.CONFLICT, id="t-1")["error"] == {
        "code": "conflict",
        "message": str(ConflictError("t-1")),
    }
    assert answer(Outcome.NOT_A_SERIES, id="t-1")["error"] == {
        "code": "not_a_series",
        "message": "task 't-1' is not a series (no every or cron)",
    }
    # The one answer with a field of its own: when the id fired (as the HTTP API's).
    assert answer(Outcome.ALREADY_FIRED, id="t-1", fired_ms=1_800_000_000_000) == {
        "ok": False,
        "error": {
            "code": "already_fired",
            "message": "task 't-1' fired at 1800000000000 (epoch ms), within its dedup window",
            "fired_ms": 1_800_000_000_000,
        },
    }


def test_already_fired_shows_fired_ms_on_both_channels_and_no_other_outcome_shows_a_value() -> None:
    fired = ApiError(Outcome.ALREADY_FIRED, field="id", id="t-1", fired_ms=1_800_000_000_000)
    assert (fired.status, fired.code, fired.shown) == (
        409,
        "already_fired",
        {"fired_ms": 1_800_000_000_000},
    )
    http_shows = {o: r.shows for o, r in HTTP_RENDERING.items() if r is not None and r.shows}
    amqp_shows = {o: r.shows for o, r in AMQP_RENDERING.items() if r is not None and r.shows}
    assert http_shows == amqp_shows == {Outcome.ALREADY_FIRED: ("fired_ms",)}


def test_cli_rendering() -> None:
    for outcome, rendering in CLI_RENDERING.items():
        assert (rendering.exit == EXIT_OK) is outcome.ok, outcome
    exits = {o: CLI_RENDERING[o].exit for o in Outcome}
    assert exits[Outcome.NOT_FOUND] == EXIT_NOT_FOUND
    assert exits[Outcome.TOO_LATE] == EXIT_TOO_LATE
    # A series' operation on a one-off task is refused like a conflict.
    for outcome in (
        Outcome.CONFLICT,
        Outcome.NOT_A_SERIES,
        Outcome.ALREADY_FIRED,
        Outcome.INVALID,
        Outcome.UNAUTHORIZED,
    ):
        assert exits[outcome] == EXIT_USAGE, outcome
    for outcome in (Outcome.UNAVAILABLE, Outcome.OVERLOADED, Outcome.STOPPING, Outcome.INTERNAL):
        assert exits[outcome] == EXIT_FAILURE, outcome
    # The words printed as {"id", "result"}: the library's result values.
    assert {o for o, r in CLI_RENDERING.items() if r.result} == {
        Outcome.RESCHEDULED,
        Outcome.CANCELLED,
        Outcome.NOT_FOUND,
        Outcome.TOO_LATE,
        *SERIES_OUTCOMES.values(),  # pause, resume, trigger, backfill
    }
    assert "api_token" in CLI_RENDERING[Outcome.UNAUTHORIZED].hint


def test_library_results_map_to_outcomes_of_the_same_word() -> None:
    assert set(CANCEL_OUTCOMES) == set(CancelResult)
    assert set(RESCHEDULE_OUTCOMES) == set(RescheduleResult)
    assert set(INSERT_OUTCOMES) == set(InsertOutcome)
    results = [*CANCEL_OUTCOMES.items(), *RESCHEDULE_OUTCOMES.items(), *INSERT_OUTCOMES.items()]
    for result, outcome in results:
        assert outcome.code == result.value


def test_conflict_message_is_the_errors() -> None:
    assert Outcome.CONFLICT.message(id="a.b") == str(ConflictError("a.b"))


def test_an_id_fired_within_its_window_is_its_own_outcome_a_conflict() -> None:
    fired = AlreadyFiredError("a.b", 1_800_000_000_000, 3)
    assert error_outcome(fired) is Outcome.ALREADY_FIRED
    assert isinstance(fired, ConflictError)
    assert (fired.task_id, fired.fired_ms, fired.index) == ("a.b", 1_800_000_000_000, 3)
    assert INSERT_OUTCOMES[InsertOutcome.ALREADY_FIRED] is Outcome.ALREADY_FIRED


def test_a_replace_too_late_is_its_own_outcome() -> None:
    assert error_outcome(TooLateError("a.b", 3)) is Outcome.TOO_LATE
    assert TooLateError("a.b", 3).index == 3
    assert "too late to replace" in str(TooLateError("a.b"))


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (ValidationError("id", "bad"), Outcome.INVALID),
        (ConflictError("x"), Outcome.CONFLICT),
        (NotRunningError("stopping"), Outcome.STOPPING),
        (Interrupted("stopped: the daemon is stopping"), Outcome.STOPPING),
        (TooCostly("the query took longer than 5000 ms"), Outcome.TOO_COSTLY),
        (Overloaded("full"), Outcome.OVERLOADED),
        (StoreUnavailable("down"), Outcome.UNAVAILABLE),
        (BrokerUnavailable("down"), Outcome.UNAVAILABLE),
        (MetricsUnavailable("down"), Outcome.UNAVAILABLE),
        (StoreError("refused"), Outcome.INTERNAL),
        (EngineFailure("died"), Outcome.INTERNAL),
        (SchemaError("old"), Outcome.INTERNAL),
        (ConfigError("bad"), Outcome.INTERNAL),
        (RuntimeError("bug"), Outcome.INTERNAL),
    ],
)
def test_error_outcome(error: BaseException, outcome: Outcome) -> None:
    assert error_outcome(error) is outcome


def test_unavailable_names_the_dependency_only() -> None:
    assert unavailable_what(StoreUnavailable("db1.internal:3306 refused")) == "database"
    assert unavailable_what(BrokerUnavailable("x")) == "message broker"
    assert unavailable_what(Overloaded("x")) == "temporarily"
