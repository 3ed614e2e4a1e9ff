"""The ``triggerhook`` command line.

Exit codes: 0 success; 1 runtime failure (database or engine); 2 bad input or
configuration; 3 task not found; 4 too late to cancel.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from triggerhook import logs
from triggerhook.app import TriggerHook
from triggerhook.domain.task import CancelResult, TaskInfo
from triggerhook.domain.timeparse import parse_duration_ms
from triggerhook.errors import (
    ConfigError,
    ConflictError,
    SchemaError,
    TriggerHookError,
    ValidationError,
)
from triggerhook.settings import FIELDS, Settings, env_var, load_settings, render_toml
from triggerhook.store.mysql import init_schema
from triggerhook.wiring import build

log = logging.getLogger(__name__)

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_TOO_LATE = 0, 1, 2, 3, 4


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="triggerhook", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--config",
        type=Path,
        default=os.environ.get("TRIGGERHOOK_CONFIG"),
        help="TOML config file (env TRIGGERHOOK_CONFIG); settings: file < env < flags",
    )
    group = parser.add_argument_group("settings (each also TRIGGERHOOK_<NAME> in the environment)")
    for name, spec in FIELDS.items():
        group.add_argument(
            f"--{name.replace('_', '-')}",
            dest=f"setting_{name}",
            type=int if spec.type in ("int", int) else str,
            metavar="N" if spec.type in ("int", int) else "VALUE",
            help=f"{spec.metadata['help']} [{env_var(name)}, default {spec.default!r}]",
        )
    sub = parser.add_subparsers(dest="command", required=True)
    db = sub.add_parser("db", help="database commands").add_subparsers(dest="db_command")
    db.required = True
    db.add_parser("init", help="create the database and apply schema.sql (idempotent)")
    sub.add_parser("config", help="print the documented default config file (TOML)")
    run = sub.add_parser("run", help="run the daemon until SIGTERM/SIGINT")
    run.add_argument("--init-db", action="store_true", help="apply the schema before starting")
    sched = sub.add_parser("schedule", help="schedule one task")
    sched.add_argument("--id", help="task id (default: a new UUIDv4)")
    when = sched.add_mutually_exclusive_group(required=True)
    when.add_argument("--at", help="due time: ISO-8601 (e.g. 2026-01-01T12:00:00.250Z) or epoch s")
    when.add_argument("--in", dest="delay", help="due after a delay: 250ms, 5s, 2h, 1h30m")
    sched.add_argument("--routing-key", help="routing key (default: default_routing_key)")
    sched.add_argument("--payload", help="payload text (UTF-8)")
    for name in ("cancel", "get"):
        cmd = sub.add_parser(name, help=f"{name} a task by id")
        cmd.add_argument("id")
    return parser


def _settings(args: argparse.Namespace) -> Settings:
    overrides = {name: getattr(args, f"setting_{name}") for name in FIELDS}
    return load_settings(args.config, os.environ, overrides)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = _settings(args)
        logs.configure(settings.log_level)
        return _dispatch(args, settings)
    except (ValidationError, ConfigError, ConflictError, SchemaError) as exc:
        print(f"triggerhook: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except TriggerHookError as exc:
        print(f"triggerhook: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE


def _dispatch(args: argparse.Namespace, settings: Settings) -> int:
    if args.command == "config":
        print(render_toml(), end="")
        return EXIT_OK
    if args.command == "db":
        version = init_schema(settings.database_url)
        print(f"schema version {version} ready")
        return EXIT_OK
    if args.command == "run":
        if args.init_db:
            init_schema(settings.database_url)
        return _run(build(settings))
    hook = build(settings)
    try:
        if args.command == "schedule":
            return _schedule(hook, args)
        if args.command == "cancel":
            return _cancel(hook, args.id)
        return _get(hook, args.id)
    finally:
        hook.close()


def _schedule(hook: TriggerHook, args: argparse.Namespace) -> int:
    delay_ms = None if args.delay is None else parse_duration_ms(args.delay)
    try:
        result = hook.schedule(
            args.id,
            at=args.at,
            delay_ms=delay_ms,
            routing_key=args.routing_key,
            payload=args.payload,
        )
    except ValidationError as exc:
        if exc.field != "delay_ms":
            raise
        raise ValidationError("in", exc.message) from None
    _print_json({"id": result.task.id, "due_ms": result.task.due_ms, "created": result.created})
    return EXIT_OK


def _cancel(hook: TriggerHook, task_id: str) -> int:
    result = hook.cancel(task_id)
    _print_json({"id": task_id, "result": result.value})
    return {
        CancelResult.CANCELLED: EXIT_OK,
        CancelResult.NOT_FOUND: EXIT_NOT_FOUND,
        CancelResult.TOO_LATE: EXIT_TOO_LATE,
    }[result]


def _get(hook: TriggerHook, task_id: str) -> int:
    info = hook.get(task_id)
    if info is None:
        _print_json({"id": task_id, "result": "not_found"})
        return EXIT_NOT_FOUND
    _print_json(_info_json(info))
    return EXIT_OK


def _info_json(info: TaskInfo) -> dict[str, object]:
    task = info.task
    try:
        payload: object = task.payload.decode("utf-8")
    except UnicodeDecodeError:
        payload = {"base64": __import__("base64").b64encode(task.payload).decode()}
    return {
        "id": task.id,
        "due_ms": task.due_ms,
        "routing_key": task.routing_key,
        "payload": payload,
        "state": info.state.value,
    }


def _print_json(data: dict[str, object]) -> None:
    print(json.dumps(data))


def _run(hook: TriggerHook) -> int:
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        if stop.is_set():
            log.warning("second signal: exiting at once; claims expire after the lease")
            os._exit(128 + signum)
        log.info("signal %s: stopping gracefully", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    hook.start()
    engine = hook.engine
    log.info("triggerhook running", extra={"instance": hook.instance_id})
    while not stop.is_set() and not engine.failed.is_set():
        stop.wait(0.5)
    clean = hook.stop()
    hook.close()
    if engine.failed.is_set():
        log.error("exiting after a fatal engine failure: %s", engine.failure)
        return EXIT_FAILURE
    if not clean:
        log.warning("stopped with unpublished tasks; they were released for others to fire")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
