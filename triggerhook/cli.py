"""The ``triggerhook`` command line.

Exit codes: 0 success; 1 runtime failure (database, engine, or daemon
unreachable); 2 bad input or configuration; 3 task not found; 4 too late to
cancel or reschedule.

With ``--url`` (or ``TRIGGERHOOK_URL``), the task commands (schedule,
reschedule, cancel, get) go to a running daemon's HTTP API through
:mod:`triggerhook.client` (token: the ``api_token`` setting) instead of the
database, with the same output and exit codes.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from triggerhook import logs
from triggerhook.app import TriggerHook
from triggerhook.client import (
    Client,
    Conflict,
    InvalidRequest,
    NotFound,
    TooLate,
    Unauthorized,
)
from triggerhook.domain.task import CancelResult, RescheduleResult, TaskState
from triggerhook.domain.timeparse import parse_duration_ms
from triggerhook.errors import (
    ConfigError,
    ConflictError,
    SchemaError,
    TriggerHookError,
    ValidationError,
)
from triggerhook.settings import (
    FIELDS,
    Settings,
    env_var,
    load_settings,
    parse_bool,
    render_reference,
    render_toml,
)
from triggerhook.status import render as status_text
from triggerhook.store.mysql import init_schema
from triggerhook.wiring import build

log = logging.getLogger(__name__)

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_TOO_LATE = 0, 1, 2, 3, 4
# The commands that act on tasks: through the HTTP API when --url is given.
TASK_COMMANDS = frozenset({"schedule", "reschedule", "cancel", "get"})


def _flag_bool(text: str) -> bool:
    try:
        return parse_bool(text, "flag")
    except ConfigError:
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}") from None


# Settings' annotations (strings, see `from __future__ import annotations`) ->
# the flag's converter and metavar.
_FLAG_TYPES: dict[str, tuple[Callable[[str], object], str]] = {
    "int": (int, "N"),
    "bool": (_flag_bool, "true|false"),
    "str": (str, "VALUE"),
}


def _literal(text: str) -> str:
    """``text`` as an argparse help string: argparse %-formats help (for
    ``%(default)s``), so a literal ``%`` (the ``%2F`` vhost of the default
    amqp_url) must be doubled or ``--help`` crashes."""
    return text.replace("%", "%%")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="triggerhook", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--config",
        type=Path,
        default=os.environ.get("TRIGGERHOOK_CONFIG"),
        help="TOML config file (env TRIGGERHOOK_CONFIG); settings: file < env < flags",
    )
    parser.add_argument(
        "--url",
        default=os.environ.get("TRIGGERHOOK_URL") or None,
        help="a running daemon's HTTP API (env TRIGGERHOOK_URL), e.g. http://127.0.0.1:8080: "
        "schedule, reschedule, cancel and get go through it instead of the database",
    )
    group = parser.add_argument_group("settings (each also TRIGGERHOOK_<NAME> in the environment)")
    for name, spec in FIELDS.items():
        convert, metavar = _FLAG_TYPES[str(spec.type)]
        group.add_argument(
            f"--{name.replace('_', '-')}",
            dest=f"setting_{name}",
            type=convert,
            metavar=metavar,
            help=_literal(f"{spec.metadata['help']} [{env_var(name)}, default {spec.default!r}]"),
        )
    sub = parser.add_subparsers(dest="command", required=True)
    db = sub.add_parser("db", help="database commands").add_subparsers(dest="db_command")
    db.required = True
    db.add_parser("init", help="create the database and apply schema.sql (idempotent)")
    config = sub.add_parser("config", help="print the documented default config file (TOML)")
    config.add_argument(
        "--format",
        choices=("toml", "markdown"),
        default="toml",
        help="toml: the config file; markdown: the reference (docs/configuration.md)",
    )
    run = sub.add_parser("run", help="run the daemon until SIGTERM/SIGINT")
    run.add_argument("--init-db", action="store_true", help="apply the schema before starting")
    sched = sub.add_parser("schedule", help="schedule one task")
    sched.add_argument("--id", help="task id (default: a new UUIDv4)")
    _due_time_arguments(sched)
    sched.add_argument("--routing-key", help="routing key (default: default_routing_key)")
    sched.add_argument("--payload", help="payload text (UTF-8)")
    move = sub.add_parser("reschedule", help="move a task not yet firing to a new due time")
    move.add_argument("id")
    _due_time_arguments(move)
    for name in ("cancel", "get"):
        cmd = sub.add_parser(name, help=f"{name} a task by id")
        cmd.add_argument("id")
    status = sub.add_parser(
        "status", help="a running daemon's live figures (from --url, default its http_port)"
    )
    status.add_argument("--json", action="store_true", help="print the raw JSON")
    return parser


def _due_time_arguments(parser: argparse.ArgumentParser) -> None:
    when = parser.add_mutually_exclusive_group(required=True)
    when.add_argument("--at", help="due time: ISO-8601 (e.g. 2026-01-01T12:00:00.250Z) or epoch s")
    when.add_argument("--in", dest="delay", help="due after a delay: 250ms, 5s, 2h, 1h30m")


def _settings(args: argparse.Namespace) -> Settings:
    overrides = {name: getattr(args, f"setting_{name}") for name in FIELDS}
    return load_settings(args.config, os.environ, overrides)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = _settings(args)
        logs.configure(settings.log_level)
        return _dispatch(args, settings)
    except (
        ValidationError,
        ConfigError,
        ConflictError,
        SchemaError,
        InvalidRequest,
        Conflict,
    ) as exc:
        _error(str(exc))
        return EXIT_USAGE
    except Unauthorized as exc:
        _error(f"{exc} (the daemon's api_token: --api-token or TRIGGERHOOK_API_TOKEN)")
        return EXIT_USAGE
    except TriggerHookError as exc:
        _error(str(exc))
        return EXIT_FAILURE


def _error(message: str) -> None:
    """The one error line; a URL in it (a setting's, a server's) without its password."""
    print(f"triggerhook: error: {logs.redact(message)}", file=sys.stderr)


def _dispatch(args: argparse.Namespace, settings: Settings) -> int:
    if args.command == "config":
        print(render_toml() if args.format == "toml" else render_reference(), end="")
        return EXIT_OK
    if args.command == "db":
        version = init_schema(settings.database_url)
        print(f"schema version {version} ready")
        return EXIT_OK
    if args.command == "run":
        if args.init_db:
            init_schema(settings.database_url)
        # Imported here: the daemon's HTTP stack is not needed by other commands.
        from triggerhook.service import Service  # noqa: PLC0415

        return Service(build(settings), settings).run()
    if args.command == "status" or (args.url and args.command in TASK_COMMANDS):
        return _remote(args, settings)
    hook = build(settings)
    try:
        if args.command == "schedule":
            return _schedule(hook, args)
        if args.command == "reschedule":
            return _reschedule(hook, args)
        if args.command == "cancel":
            return _cancel(hook, args.id)
        return _get(hook, args.id)
    finally:
        hook.close()


def _delay_ms(args: argparse.Namespace) -> int | None:
    return None if args.delay is None else parse_duration_ms(args.delay)


def _in_named_in(exc: ValidationError) -> ValidationError:
    """The library's ``delay_ms`` is the CLI's ``--in``."""
    return ValidationError("in", exc.message) if exc.field == "delay_ms" else exc


def _schedule(hook: TriggerHook, args: argparse.Namespace) -> int:
    delay_ms = _delay_ms(args)
    try:
        result = hook.schedule(
            args.id,
            at=args.at,
            delay_ms=delay_ms,
            routing_key=args.routing_key,
            payload=args.payload,
        )
    except ValidationError as exc:
        raise _in_named_in(exc) from None
    _print_json({"id": result.task.id, "due_ms": result.task.due_ms, "created": result.created})
    return EXIT_OK


def _reschedule(hook: TriggerHook, args: argparse.Namespace) -> int:
    delay_ms = _delay_ms(args)
    try:
        moved = hook.reschedule(args.id, at=args.at, delay_ms=delay_ms)
    except ValidationError as exc:
        raise _in_named_in(exc) from None
    if moved.result is not RescheduleResult.RESCHEDULED or moved.task is None:
        return _outcome(args.id, moved.result.value)
    _print_json({"id": args.id, "due_ms": moved.task.due_ms, "result": moved.result.value})
    return EXIT_OK


def _cancel(hook: TriggerHook, task_id: str) -> int:
    return _outcome(task_id, hook.cancel(task_id).value)


_OUTCOME_EXITS = {
    CancelResult.CANCELLED.value: EXIT_OK,
    RescheduleResult.RESCHEDULED.value: EXIT_OK,
    CancelResult.NOT_FOUND.value: EXIT_NOT_FOUND,
    CancelResult.TOO_LATE.value: EXIT_TOO_LATE,
}


def _outcome(task_id: str, result: str) -> int:
    """Print ``{"id", "result"}``; the exit code the result means."""
    _print_json({"id": task_id, "result": result})
    return _OUTCOME_EXITS[result]


def _get(hook: TriggerHook, task_id: str) -> int:
    info = hook.get(task_id)
    if info is None:
        return _outcome(task_id, CancelResult.NOT_FOUND.value)
    task = info.task
    _print_task(task.id, task.due_ms, task.routing_key, task.payload, info.state)
    return EXIT_OK


def _print_task(
    task_id: str, due_ms: int, routing_key: str, payload: bytes, state: TaskState
) -> None:
    try:
        shown: object = payload.decode("utf-8")
    except UnicodeDecodeError:
        shown = {"base64": base64.b64encode(payload).decode()}
    _print_json(
        {
            "id": task_id,
            "due_ms": due_ms,
            "routing_key": routing_key,
            "payload": shown,
            "state": state.value,
        }
    )


# -- through a daemon's HTTP API (--url) ----------------------------------------------------


def _remote(args: argparse.Namespace, settings: Settings) -> int:
    if settings.log_level.upper() != "DEBUG":
        # The answer, or one error line, is the output: not each request or retry.
        for name in ("httpx", "triggerhook.client"):
            logging.getLogger(name).setLevel(logging.ERROR)
    try:
        client = Client(args.url or _local_url(settings), token=settings.api_token or None)
    except ValueError as exc:
        raise ConfigError(f"--url: {exc}") from None
    with client:
        if args.command == "status":
            figures = client.status()
            print(json.dumps(figures) if args.json else status_text(figures))
            return EXIT_OK
        if args.command == "schedule":
            return _remote_schedule(client, args)
        if args.command == "reschedule":
            return _remote_reschedule(client, args)
        if args.command == "cancel":
            return _remote_cancel(client, args.id)
        return _remote_get(client, args.id)


def _local_url(settings: Settings) -> str:
    """This machine's daemon, as configured: its http_host (any-address binds
    are reached on loopback) and http_port."""
    host = settings.http_host
    host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    return (
        f"http://[{host}]:{settings.http_port}"
        if ":" in host
        else f"http://{host}:{settings.http_port}"
    )


def _delay_s(args: argparse.Namespace) -> float | None:
    delay_ms = _delay_ms(args)
    return None if delay_ms is None else delay_ms / 1000


def _in_named_in_remote(exc: InvalidRequest) -> InvalidRequest:
    """The client's ``delay_s`` is the CLI's ``--in``."""
    if exc.field != "delay_s":
        return exc
    return InvalidRequest(exc.status, exc.code, exc.message, "in")


def _remote_schedule(client: Client, args: argparse.Namespace) -> int:
    delay_s = _delay_s(args)
    try:
        result = client.schedule(
            args.id,
            at=args.at,
            delay_s=delay_s,
            routing_key=args.routing_key,
            payload=args.payload,
        )
    except InvalidRequest as exc:
        raise _in_named_in_remote(exc) from None
    _print_json({"id": result.id, "due_ms": result.at_ms, "created": result.created})
    return EXIT_OK


def _remote_reschedule(client: Client, args: argparse.Namespace) -> int:
    delay_s = _delay_s(args)
    try:
        moved = client.reschedule(args.id, at=args.at, delay_s=delay_s)
    except InvalidRequest as exc:
        raise _in_named_in_remote(exc) from None
    except NotFound:
        return _outcome(args.id, RescheduleResult.NOT_FOUND.value)
    except TooLate:
        return _outcome(args.id, RescheduleResult.TOO_LATE.value)
    result = RescheduleResult.RESCHEDULED.value
    _print_json({"id": moved.id, "due_ms": moved.at_ms, "result": result})
    return EXIT_OK


def _remote_cancel(client: Client, task_id: str) -> int:
    try:
        client.cancel(task_id)
    except NotFound:
        return _outcome(task_id, CancelResult.NOT_FOUND.value)
    except TooLate:
        return _outcome(task_id, CancelResult.TOO_LATE.value)
    return _outcome(task_id, CancelResult.CANCELLED.value)


def _remote_get(client: Client, task_id: str) -> int:
    status = client.get(task_id)
    if status is None:
        return _outcome(task_id, CancelResult.NOT_FOUND.value)
    _print_task(status.id, status.at_ms, status.routing_key, status.payload, status.state)
    return EXIT_OK


def _print_json(data: dict[str, object]) -> None:
    print(json.dumps(data))


if __name__ == "__main__":
    sys.exit(main())
