"""The ``triggerhook`` command line.

Exit codes: 0 success; 1 runtime failure (database, engine, or daemon
unreachable); 2 bad input or configuration (or a conflict, or a series'
operation on a one-off task); 3 task not found; 4 too late to cancel or
reschedule. ``db status``: 0 at head, 1 behind, 2 newer than this release.

With ``--url`` (or ``TRIGGERHOOK_URL``), the task commands (schedule,
reschedule, cancel, get, list, count, and a series' pause, resume, trigger and
backfill: :mod:`triggerhook.cli.series_cmd`) go to a running daemon's HTTP API
through :mod:`triggerhook_client` (token: the ``api_token`` setting) instead
of the database, with the same output and exit codes: each command is written
once against :class:`triggerhook.cli.backends.Backend`, which the library and
the HTTP client implement, and every outcome's exit code is in
``CLI_RENDERING`` (:mod:`triggerhook.cli.rendering`).
Results are JSON on stdout: one object, or for ``list`` one object per line.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence

from triggerhook_client.rules import FILTER_FIELDS

from triggerhook import logs
from triggerhook.cli.backends import (
    Backend,
    BackendError,
    HttpBackend,
    LibraryBackend,
    Where,
)
from triggerhook.cli.config_cmd import add_config_parser, run_config
from triggerhook.cli.dev_cmd import add_dev_parser, run_dev
from triggerhook.cli.flags import (
    accept_after_commands,
    add_global_flags,
    overrides,
    positive_int,
)
from triggerhook.cli.rendering import (
    CLI_RENDERING,
    EXIT_FAILURE,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_TOO_LATE,
    EXIT_USAGE,
    CliRendering,
    found_json,
    listed_json,
)
from triggerhook.cli.rendering import print_json as _print_json
from triggerhook.cli.rendering import print_outcome as _outcome
from triggerhook.cli.series_cmd import SERIES_COMMANDS, add_catch_up_arguments, add_series_parsers
from triggerhook.cli.tail_cmd import add_tail_parser, run_tail
from triggerhook.cli.task_args import LateArg, Metadata, parse_dedup_window
from triggerhook.cli.token_cmd import add_token_parser, run_token
from triggerhook.domain.listing import MAX_PAGE
from triggerhook.domain.outcomes import Outcome, error_outcome
from triggerhook.domain.recurrence import DST_REPEATED, DST_SKIPPED
from triggerhook.domain.task import OnConflict, TaskState
from triggerhook.domain.timeparse import parse_duration_ms
from triggerhook.errors import ConfigError, InstanceNameInUse, SchemaError, TriggerHookError
from triggerhook.processes import EngineLink
from triggerhook.settings import Settings, load_settings
from triggerhook.status import render as status_text
from triggerhook.store.mysql.schema import init_schema, schema_status, upgrade_schema
from triggerhook.wiring import build, build_api_process, build_daemon

# The outcome table and the exit codes are also read from here (the CLI's tests).
__all__ = [
    "CLI_RENDERING",
    "DB_COMMANDS",
    "EXIT_FAILURE",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_TOO_LATE",
    "EXIT_USAGE",
    "TASK_COMMANDS",
    "CliRendering",
    "main",
]


def _parser() -> argparse.ArgumentParser:
    # No abbreviations at the top level: it classifies every flag, the
    # command's too, and would refuse a command's flag that abbreviates two of
    # its own (schedule's --catch-up: the settings --catch-up-rate and
    # --catch-up-after-ms) as ambiguous. The commands still take abbreviations.
    parser = argparse.ArgumentParser(
        prog="triggerhook", description=__doc__.split("\n")[0], allow_abbrev=False
    )
    add_global_flags(parser)
    sub = parser.add_subparsers(dest="command", required=True)
    _db_commands(
        sub.add_parser(
            "db",
            help="database schema: init, upgrade, status",
            description=_DB_HELP,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
    )
    add_config_parser(sub)
    add_tail_parser(sub)
    add_token_parser(sub)
    add_dev_parser(sub)
    run = sub.add_parser("run", help="run the daemon until SIGTERM/SIGINT")
    run.add_argument(
        "--init-db",
        action="store_true",
        help="create or upgrade the schema first, as `db init` does (upgrades are offline)",
    )
    api = sub.add_parser("api-process", help="(started by `run`: one of its api_processes)")
    api.add_argument("--channel-fd", type=int, required=True, help="its socket to `run`")
    api.add_argument("--index", type=int, required=True, help="which of the api_processes")
    api.add_argument("--log-format", choices=("text", "json"), default="text", help="as `run`'s")
    _schedule_arguments(sub.add_parser("schedule", help="schedule one task"))
    move = sub.add_parser("reschedule", help="move a task not yet firing to a new due time")
    move.add_argument("id")
    _due_time_arguments(move)
    cancel = sub.add_parser(
        "cancel",
        help="cancel a task by id, or every task matching --prefix, --tag or --routing-key",
        description="With an ID: that task (exit 3 not found, 4 too late). With filters: every "
        'task they match, printing {"cancelled": n, "too_late": m} (exit 0; too_late counts '
        "those being published already). --due-after/--due-before only narrow the others.",
    )
    cancel.add_argument("id", nargs="?", help="the task's id (or give filters instead)")
    _filter_arguments(cancel, state=False)
    sub.add_parser("get", help="get a task by id").add_argument("id")
    listing = sub.add_parser(
        "list",
        help="list the tasks matching the filters, in due order: one JSON object per line",
    )
    _filter_arguments(listing, state=True)
    many = listing.add_mutually_exclusive_group()
    many.add_argument(
        "--limit", type=positive_int, default=100, metavar="N", help="print at most N (default 100)"
    )
    many.add_argument("--all", action="store_true", help="print every matching task")
    _filter_arguments(
        sub.add_parser("count", help='count the tasks matching the filters: {"count": n}'),
        state=True,
    )
    add_series_parsers(sub)
    status = sub.add_parser(
        "status", help="a running daemon's live figures (from --url, default its http_port)"
    )
    status.add_argument("--json", action="store_true", help="print the raw JSON")
    accept_after_commands(parser, skip=("api-process",))  # its settings come from `run`
    return parser


_DB_HELP = """\
The schema's versions are Alembic revisions (0003 = schema version 3).
Upgrades are offline: stop every instance first (version 2 -> 3 rewrites
every task row). db status exits 0 at head, 1 behind (or no schema or no
database yet), 2 if the database is newer than this release."""


def _db_commands(parser: argparse.ArgumentParser) -> None:
    db = parser.add_subparsers(dest="db_command")
    db.required = True
    db.add_parser(
        "init",
        help="create the database if missing, and its schema at head when it has none, "
        "else upgrade it (idempotent)",
    )
    db.add_parser(
        "upgrade",
        help="upgrade an existing database's schema to head (offline: stop every instance "
        "first); refused (exit 2) for a database that does not exist",
    )
    db.add_parser(
        "status",
        help="print the schema version and revision and whether it is at head "
        "(exit 0 at head, 1 behind, 2 newer than this release)",
    )


def _schedule_arguments(sched: argparse.ArgumentParser) -> None:
    sched.add_argument("--id", help="task id (default: a new UUIDv4)")
    _due_time_arguments(sched, required=False)  # a series may give neither
    sched.add_argument("--routing-key", help="routing key (default: default_routing_key)")
    sched.add_argument("--payload", help="payload text (UTF-8)")
    sched.add_argument(
        "--tag",
        action="append",
        default=[],
        help="a tag to find it by (list, count, cancel --tag); repeatable, at most 8",
    )
    sched.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a header of its event (VALUE as a string; NAME not starting with x-); repeatable",
    )
    sched.add_argument(
        "--on-conflict",
        choices=[rule.value for rule in OnConflict],
        help="when the id exists with other content: error (exit 2), keep the stored task, "
        "or replace it (exit 4 when it is being published) (default: error)",
    )
    sched.add_argument(
        "--dedup-window",
        metavar="DURATION",
        help="a dedup window, with its unit as --in takes it (1500ms, 90s, 24h, 7d; at most "
        "30d): once the task fired, scheduling its id again within it is refused as "
        "already fired (exit 2, nothing written) (default: the dedup_window_ms setting)",
    )
    sched.add_argument("--content-type", help="its event's content type, e.g. application/json")
    sched.add_argument("--content-encoding", help="its event's content encoding, e.g. gzip")
    sched.add_argument(
        "--late",
        metavar="fire|skip_after_ms=N|deadline=TIME",
        help="if it is found late when published: fire anyway, or dead-letter it when more "
        "than N ms late or after TIME (as --at) (default: the daemon's late_policy)",
    )
    _series_arguments(sched)


def _series_arguments(sched: argparse.ArgumentParser) -> None:
    kind = sched.add_mutually_exclusive_group()
    kind.add_argument(
        "--every",
        metavar="DURATION",
        help="a series, firing every ISO 8601 duration of elapsed time (PT15M, P1D; at least "
        "PT1S); first: --at/--in, else one DURATION from now",
    )
    kind.add_argument(
        "--cron",
        metavar="'MIN HOUR DOM MON DOW'",
        help="a series, firing at the times of these 5 cron fields in --timezone; first: the "
        "first match at or after --at/--in, else the next match",
    )
    sched.add_argument(
        "--timezone", help="--cron's IANA time zone, e.g. Europe/Berlin (default UTC)"
    )
    sched.add_argument(
        "--dst-repeated",
        choices=list(DST_REPEATED),
        help="--cron: a local time the clocks show twice (clocks back) fires at its first "
        "pass, its last, or both (default: first for named times, both for */N entries)",
    )
    sched.add_argument(
        "--dst-skipped",
        choices=list(DST_SKIPPED),
        help="--cron: local times the clocks skip (forward) fire once at the gap's end "
        "(shift) or not at all (skip) (default: shift for named times, skip for */N entries)",
    )
    sched.add_argument(
        "--until",
        metavar="TIME",
        help="a series' end, inclusive: RFC 3339; without an offset: UTC (as --at)",
    )
    add_catch_up_arguments(sched)


def _filter_arguments(parser: argparse.ArgumentParser, *, state: bool) -> None:
    parser.add_argument("--prefix", help="tasks whose id starts with this")
    parser.add_argument("--tag", help="tasks with this tag")
    parser.add_argument("--routing-key", help="tasks with this routing key")
    parser.add_argument("--due-after", metavar="TIME", help="tasks due at or after TIME (as --at)")
    parser.add_argument("--due-before", metavar="TIME", help="tasks due before TIME (as --at)")
    if state:
        parser.add_argument(
            "--state",
            choices=[s.value for s in TaskState],
            help="scheduled (cancellable) or firing (being published)",
        )


def _due_time_arguments(parser: argparse.ArgumentParser, required: bool = True) -> None:
    when = parser.add_mutually_exclusive_group(required=required)
    when.add_argument(
        "--at",
        metavar="TIME",
        help="due time, RFC 3339; without an offset: UTC, not local time "
        "(e.g. 2026-12-01T09:00:00+01:00 or 2026-12-01T08:00:00Z; epoch seconds: deprecated)",
    )
    when.add_argument("--in", dest="delay", help="due after a delay: 250ms, 5s, 2h, 1h30m")


def _settings(args: argparse.Namespace) -> Settings:
    return load_settings(args.config, os.environ, overrides(args))


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "api-process":  # its settings come from `run`, not from here
        return _api_process(args.channel_fd, args.index, args.log_format)
    try:
        if args.command == "config":  # prints; logs nothing, starts nothing
            return run_config(args, overrides(args))
        if args.command == "token":  # needs no settings
            return run_token(args)
        settings = _settings(args)
        logs.configure(settings.log_level, log_format=settings.log_format)
        return _dispatch(args, settings)
    except (ConfigError, SchemaError, InstanceNameInUse) as exc:  # set-up, not a call's outcome
        _error(str(exc))
        return EXIT_USAGE
    except TriggerHookError as exc:
        outcome = exc.outcome if isinstance(exc, BackendError) else error_outcome(exc)
        rendering = CLI_RENDERING[outcome]
        _error(f"{exc}{rendering.hint}")
        return rendering.exit
    except BrokenPipeError:
        return _reader_gone()


def _reader_gone() -> int:
    """stdout's reader went away (``triggerhook list --all | head``): stop
    quietly. stdout now leads nowhere, so that the interpreter's last flush at
    exit does not fail again (docs.python.org, "Note on SIGPIPE")."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return EXIT_FAILURE


def _api_process(channel_fd: int, index: int, log_format: str) -> int:
    context: dict[str, object] = {"api_process": index}
    # `run`'s format from the command line already, for anything logged
    # before the settings arrive over the link.
    logs.configure("INFO", context, log_format)
    link = EngineLink.from_fd(channel_fd)
    settings = link.settings()
    logs.configure(settings.log_level, context, settings.log_format)
    try:
        return build_api_process(settings, link).run()
    except (ConfigError, SchemaError) as exc:
        _error(str(exc))
        return EXIT_USAGE


def _error(message: str) -> None:
    """The one error line; a URL in it (a setting's, a server's) without its password.
    With json logs (a daemon's failure to start, say) it is a log record, so
    that every line on stderr is JSON."""
    if logs.json_configured():
        logging.getLogger("triggerhook").error("triggerhook: error: %s", message)
        return
    print(f"triggerhook: error: {logs.redact(message)}", file=sys.stderr)


def _dispatch(args: argparse.Namespace, settings: Settings) -> int:
    if args.command == "db":
        return DB_COMMANDS[args.db_command](settings)
    if args.command == "run":
        if args.init_db:
            init_schema(settings.database_url, settings.shard_count)
        return build_daemon(settings).run()
    if args.command == "tail":
        return run_tail(args, settings)
    if args.command == "dev":
        return run_dev(args, settings)
    if args.command == "status":
        with HttpBackend(args.url or _local_url(settings), settings) as remote:
            figures = remote.status()
        print(json.dumps(figures) if args.json else status_text(figures))
        return EXIT_OK
    # The task commands: through a daemon's HTTP API with --url, else the database.
    backend: HttpBackend | LibraryBackend
    if args.url:
        backend = HttpBackend(args.url, settings)
    else:
        backend = LibraryBackend(build(settings), settings)
    with backend:
        return TASK_COMMANDS[args.command](backend, args)


def _db_init(settings: Settings) -> int:
    version = init_schema(settings.database_url, settings.shard_count)
    print(f"schema version {version} ready")
    return EXIT_OK


def _db_upgrade(settings: Settings) -> int:
    version = upgrade_schema(settings.database_url, settings.shard_count)
    print(f"schema version {version} ready")
    return EXIT_OK


# db status: the exit code of each state.
_STATUS_EXIT = {"current": EXIT_OK, "behind": EXIT_FAILURE, "ahead": EXIT_USAGE}


def _db_status(settings: Settings) -> int:
    status = schema_status(settings.database_url)
    print(status.describe())
    return _STATUS_EXIT[status.state]


DB_COMMANDS: dict[str, Callable[[Settings], int]] = {
    "init": _db_init,
    "upgrade": _db_upgrade,
    "status": _db_status,
}


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


# -- the task commands, over either backend ---------------------------------------------------


def _delay_ms(args: argparse.Namespace) -> int | None:
    return None if args.delay is None else parse_duration_ms(args.delay)


def _dedup_window_ms(args: argparse.Namespace) -> int | None:
    return None if args.dedup_window is None else parse_dedup_window(args.dedup_window)


def _schedule(backend: Backend, args: argparse.Namespace) -> int:
    delay_ms = _delay_ms(args)
    meta = _metadata(args)
    if args.at is None and delay_ms is None and not meta.series:
        raise BackendError(
            Outcome.INVALID, "at: give --at or --in (a series, --every or --cron, may give neither)"
        )
    stored = backend.schedule(
        args.id,
        at=args.at,
        delay_ms=delay_ms,
        routing_key=args.routing_key,
        payload=args.payload,
        meta=meta,
    )
    outcome = stored.outcome
    created = outcome is Outcome.CREATED
    _print_json(
        {"id": stored.id, "due_ms": stored.due_ms, "created": created, "outcome": outcome.code}
    )
    return CLI_RENDERING[outcome].exit


def _metadata(args: argparse.Namespace) -> Metadata:
    """``schedule``'s flags besides the time, key and payload."""
    return Metadata(
        tags=tuple(args.tag),
        content_type=args.content_type,
        content_encoding=args.content_encoding,
        headers=_headers(args.header),
        late=None if args.late is None else LateArg.parse(args.late),
        every=args.every,
        cron=args.cron,
        timezone=args.timezone,
        dst_repeated=args.dst_repeated,
        dst_skipped=args.dst_skipped,
        until=args.until,
        catch_up=args.catch_up,
        catch_up_max=args.catch_up_max,
        on_conflict=args.on_conflict,
        dedup_window_ms=_dedup_window_ms(args),
    )


def _headers(given: list[str]) -> tuple[tuple[str, str], ...]:
    """``--header NAME=VALUE`` flags; a name given twice is refused, not overwritten."""
    headers: dict[str, str] = {}
    for item in given:
        name, equals, value = item.partition("=")
        if not equals or not name:
            raise BackendError(Outcome.INVALID, f"--header: expected NAME=VALUE, got {item[:40]!r}")
        if name in headers:
            raise BackendError(Outcome.INVALID, f"headers.{name}: given twice")
        headers[name] = value
    return tuple(headers.items())


def _reschedule(backend: Backend, args: argparse.Namespace) -> int:
    moved = backend.reschedule(args.id, at=args.at, delay_ms=_delay_ms(args))
    if moved.due_ms is None:
        return _outcome(args.id, moved.outcome)
    _print_json({"id": args.id, "due_ms": moved.due_ms, "result": moved.outcome.code})
    return CLI_RENDERING[moved.outcome].exit


def _where(args: argparse.Namespace) -> Where:
    """The filter flags given (``--state`` only where the command has it)."""
    return Where(**{name: getattr(args, name, None) for name in FILTER_FIELDS})


def _cancel(backend: Backend, args: argparse.Namespace) -> int:
    """One task by id, or (with filters instead) every task they match."""
    where = _where(args)
    if args.id is not None:
        if where != Where():
            raise BackendError(
                Outcome.INVALID, "cancel: give a task id or filters (--prefix, ...), not both"
            )
        return _outcome(args.id, backend.cancel(args.id))
    if not where.narrowed:
        # Never "every task": the library and the daemon refuse it too.
        raise BackendError(
            Outcome.INVALID,
            "cancel: give a task id, or at least one of --prefix, --tag and --routing-key "
            "(--due-after and --due-before only narrow those)",
        )
    done = backend.cancel_where(where)
    _print_json({"cancelled": done.cancelled, "too_late": done.too_late})
    return EXIT_OK


def _get(backend: Backend, args: argparse.Namespace) -> int:
    found = backend.get(args.id)
    if found is None:
        return _outcome(args.id, Outcome.NOT_FOUND)
    _print_json(found_json(found))
    return CLI_RENDERING[Outcome.FOUND].exit


def _list(backend: Backend, args: argparse.Namespace) -> int:
    """Page after page (by cursor) until ``--limit`` tasks are printed or none is left."""
    where = _where(args)
    left = None if args.all else args.limit
    cursor = None
    while left is None or left > 0:
        page = backend.list_page(where, MAX_PAGE if left is None else min(left, MAX_PAGE), cursor)
        for task in page.tasks:
            _print_json(listed_json(task))
        if left is not None:
            left -= len(page.tasks)
        cursor = page.cursor
        if cursor is None:
            break
    return EXIT_OK


def _count(backend: Backend, args: argparse.Namespace) -> int:
    _print_json({"count": backend.count(_where(args))})
    return EXIT_OK


# The commands that act on tasks: through the HTTP API when --url is given.
TASK_COMMANDS: dict[str, Callable[[Backend, argparse.Namespace], int]] = {
    "schedule": _schedule,
    "reschedule": _reschedule,
    "cancel": _cancel,
    "get": _get,
    "list": _list,
    "count": _count,
    **SERIES_COMMANDS,
}
