"""A series' life on the command line: ``pause``, ``resume``, ``trigger`` and
``backfill`` (over either backend, as the other task commands), and
``schedule``'s ``--catch-up`` and ``--catch-up-max``.

Each prints one JSON object: ``{"id", "result"}`` (the outcome's code), and
for ``trigger`` and ``backfill`` the one-off copies written, ``"copies":
[{"id", "due_ms", "outcome"}]``. Exit codes by :data:`CLI_RENDERING`: 0, 3
not found, 2 not a series (a one-off task).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from triggerhook.cli.backends import Backend, Copying
from triggerhook.cli.flags import positive_int
from triggerhook.cli.rendering import print_outcome
from triggerhook.domain.recurrence import CATCH_UP, DEFAULT_CATCH_UP_MAX, MAX_CATCH_UP
from triggerhook.domain.series import MAX_BACKFILL
from triggerhook.domain.timeparse import parse_at

_EXITS = "Exit 0; 3 when the task is unknown (or ended); 2 when it is a one-off task."
_COPIES = (
    'Prints {"id", "result", "copies": [{"id", "due_ms", "outcome"}]}: the one-off tasks '
    "ID:DUE_MS that fire the occurrences (outcome created, or exists: written before). "
)


def add_series_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The commands of a series (a task scheduled with --every or --cron)."""
    sub.add_parser(
        "pause",
        help="pause a series: no occurrence fires until `resume`",
        description='Prints {"id", "result": "paused"} (also when it was paused), or '
        '"paused_after_this": its occurrence being published still fires, none after it. '
        "`get` then shows paused, and resume_ms: the occurrence it resumes at. " + _EXITS,
    ).add_argument("id", help="the series' id")
    sub.add_parser(
        "resume",
        help="resume a paused series at the occurrence it would have fired next",
        description='Prints {"id", "result": "resumed"} (also when it was not paused), or '
        '"ended": no occurrence was left (its --until passed), so it is deleted. An '
        "occurrence missed while it was paused goes by its --catch-up. " + _EXITS,
    ).add_argument("id", help="the series' id")
    sub.add_parser(
        "trigger",
        help="fire one extra occurrence of a series now, its schedule unchanged",
        description=_COPIES + "The copy's id is ID:NOW_MS (cancel it by that id). " + _EXITS,
    ).add_argument("id", help="the series' id")
    backfill = sub.add_parser(
        "backfill",
        help="fire now the occurrences a series' schedule had in a past range",
        description=_COPIES + f"At most {MAX_BACKFILL} occurrences. Run again, it finds "
        "the copies still pending (exists), but writes, and fires, again those that fired "
        "already: do not repeat it blindly. " + _EXITS,
    )
    backfill.add_argument("id", help="the series' id")
    backfill.add_argument(
        "--from",
        dest="from_time",
        required=True,
        metavar="TIME",
        help="the range's start, inclusive: RFC 3339; without an offset: UTC (as --at)",
    )
    backfill.add_argument(
        "--to",
        dest="to_time",
        required=True,
        metavar="TIME",
        help="the range's end, exclusive, not after now (as --at)",
    )


def add_catch_up_arguments(sched: argparse.ArgumentParser) -> None:
    """``schedule``'s flags of a series' missed occurrences."""
    sched.add_argument(
        "--catch-up",
        choices=list(CATCH_UP),
        help="a series' occurrences missed while nothing could fire them (an outage, a "
        "pause): one fires the first, late, once (default); skip fires none; all fires "
        "each, up to --catch-up-max, as one-off tasks ID:DUE_MS",
    )
    sched.add_argument(
        "--catch-up-max",
        type=positive_int,
        metavar="N",
        help=f"--catch-up all: at most N missed occurrences fire, the earliest "
        f"(1-{MAX_CATCH_UP}, default {DEFAULT_CATCH_UP_MAX})",
    )


def _pause(backend: Backend, args: argparse.Namespace) -> int:
    return print_outcome(args.id, backend.pause(args.id))


def _resume(backend: Backend, args: argparse.Namespace) -> int:
    return print_outcome(args.id, backend.resume(args.id))


def _trigger(backend: Backend, args: argparse.Namespace) -> int:
    return _print_copying(args.id, backend.trigger(args.id))


def _backfill(backend: Backend, args: argparse.Namespace) -> int:
    # Parsed here, as --at is: both backends take epoch ms (the API has no text form).
    from_ms = parse_at(args.from_time, "from")
    to_ms = parse_at(args.to_time, "to")
    return _print_copying(args.id, backend.backfill(args.id, from_ms, to_ms))


def _print_copying(task_id: str, done: Copying) -> int:
    if not done.outcome.ok:  # not found, not a series: nothing written
        return print_outcome(task_id, done.outcome)
    copies = [{"id": c.id, "due_ms": c.due_ms, "outcome": c.outcome.code} for c in done.copies]
    return print_outcome(task_id, done.outcome, copies=copies)


SERIES_COMMANDS: dict[str, Callable[[Backend, argparse.Namespace], int]] = {
    "pause": _pause,
    "resume": _resume,
    "trigger": _trigger,
    "backfill": _backfill,
}
