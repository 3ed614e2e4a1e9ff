"""``triggerhook tail``: the events published to the exchange, as they come,
one JSON object per line (:mod:`triggerhook.amqp.tail`)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from types import FrameType
from typing import Any

from triggerhook.amqp.tail import tail
from triggerhook.cli.flags import positive_int
from triggerhook.settings import Settings

EXIT_OK, EXIT_FAILURE = 0, 1

_DESCRIPTION = """\
Prints each event published to the exchange (the `exchange` setting) whose
routing key matches --routing-key, from the moment it is bound on: id,
routing_key, due_ms, fired_ms, rev (and occurrence for a series), the task's
AMQP properties and headers, and the payload (text, or {"base64": ...}).
While it runs, its queue takes every matching event: one that no other queue
takes is delivered to it and not retried or dead-lettered. Give it a narrow
pattern next to production traffic. Exit 0 after --count events, at
--timeout-s, or on Ctrl-C; 1 when --timeout-s ran out before --count events."""


def add_tail_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tail_parser = sub.add_parser(
        "tail",
        help="print the events published to the exchange as they come: one JSON object per line",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    tail_parser.add_argument(
        "--routing-key",
        default="#",
        metavar="PATTERN",
        help="routing keys to show, topic syntax: billing.* or # (default: every one)",
    )
    tail_parser.add_argument("--count", type=positive_int, metavar="N", help="stop after N events")
    tail_parser.add_argument(
        "--timeout-s", type=positive_int, metavar="S", help="stop after S seconds"
    )


def run_tail(args: argparse.Namespace, settings: Settings) -> int:
    left: int | None = args.count  # None: no limit

    def show(event: dict[str, Any]) -> bool:
        nonlocal left
        print(json.dumps(event), flush=True)
        if left is None:
            return True
        left -= 1
        return left > 0

    def bound() -> None:
        print(
            f"tailing exchange {settings.exchange!r}, routing keys {args.routing_key!r} "
            "(one JSON object per event; Ctrl-C stops)",
            file=sys.stderr,
            flush=True,
        )

    # Ctrl-C ends the wait between two reads (a KeyboardInterrupt inside pika
    # could leave the connection's close waiting for ever); a second one at once.
    stop = threading.Event()

    def interrupted(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    previous = signal.signal(signal.SIGINT, interrupted)
    try:
        done = tail(
            settings.amqp_url,
            settings.exchange,
            args.routing_key,
            show,
            args.timeout_s,
            bound,
            stop,
        )
    except KeyboardInterrupt:
        return EXIT_OK
    finally:
        signal.signal(signal.SIGINT, previous)
    return EXIT_OK if done or args.count is None or stop.is_set() else EXIT_FAILURE
