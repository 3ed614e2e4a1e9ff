"""``triggerhook dev``: the daemon without servers, to try it (docs/dev.md).

SQLite instead of MySQL, and the fired events as JSON lines on stdout and/or
POSTed to a webhook instead of published to RabbitMQ; the HTTP API and the
web view as ``run`` serves them. One instance; not for production.
"""

from __future__ import annotations

import argparse
import logging
import os
from urllib.parse import urlsplit

from triggerhook.errors import ConfigError
from triggerhook.logs import url_origin
from triggerhook.settings import Settings
from triggerhook.wiring import DevOptions, build_dev

log = logging.getLogger(__name__)

EXIT_OK = 0
DEFAULT_DB = "triggerhook-dev.sqlite3"
MEMORY = ":memory:"

_DESCRIPTION = f"""\
Runs the engine, the HTTP API and the web view (http_host:http_port, default
127.0.0.1:8080; /ui) with no server to install: tasks are kept in an SQLite
file (--db; with --db {MEMORY}, none) and each fired event is printed
on stdout as one JSON object per line (as `triggerhook tail` prints them) and,
with --webhook, POSTed to that URL (body: the payload; headers: the event's,
x-message-id and x-routing-key; signed with --webhook-secret-file). A webhook
that answers 5xx, 408 or 429, or not in full within --webhook-timeout-s, gets
the event again later (back-off, then a dead letter, as RabbitMQ's returns;
another 4xx: a dead letter at once); stdout does not wait for it, nor print it
again.
Logs go to stderr. One instance per file; not for production (docs/dev.md).
Ctrl-C or SIGTERM stops it gracefully."""


def add_dev_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dev = sub.add_parser(
        "dev",
        help="try it without servers: SQLite, events on stdout and/or to a webhook, "
        "the HTTP API and web view (one instance, not for production)",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    dev.add_argument(
        "--db",
        default=DEFAULT_DB,
        metavar="PATH",
        help=f"the SQLite file, created if missing (default: {DEFAULT_DB} in the current "
        f"directory; {MEMORY} for none)",
    )
    dev.add_argument(
        "--webhook",
        type=webhook_url,
        metavar="URL",
        help="POST each event to this http:// or https:// URL too",
    )
    dev.add_argument(
        "--webhook-timeout-s",
        type=float,
        default=10.0,
        metavar="S",
        help="a webhook call (connect, send, the whole answer) not over in S seconds "
        "failed (default 10)",
    )
    dev.add_argument(
        "--webhook-secret-file",
        metavar="PATH",
        default="",
        help="sign each webhook request with the secret in this file (x-triggerhook-timestamp, "
        "x-triggerhook-signature: docs/webhooks.md); one a line, two while rotating",
    )
    dev.add_argument(
        "--webhook-public-only",
        action="store_true",
        help="refuse a webhook whose host resolves to a loopback, private or link-local "
        "address, as triggerhook run's targets do without allow_private",
    )
    dev.add_argument(
        "--no-stdout", action="store_true", help="events to the webhook only (needs --webhook)"
    )


def webhook_url(text: str) -> str:
    """An argparse type: an http(s) URL with a host."""
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018  (raises ValueError for a port that is no number)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a URL: {exc}") from None
    # Never the URL itself in the message: it may hold the webhook's secret.
    if parts.scheme not in ("http", "https"):
        got = f"scheme {parts.scheme!r}" if parts.scheme else "no scheme"
        raise argparse.ArgumentTypeError(f"expected an http:// or https:// URL, got {got}")
    if not parts.hostname:
        raise argparse.ArgumentTypeError("expected an http:// or https:// URL with a host")
    return text


def run_dev(args: argparse.Namespace, settings: Settings) -> int:
    options = _options(args)
    webhook = url_origin(options.webhook_url) if options.webhook_url else ""
    sinks = [s for s, on in (("stdout", options.stdout), (webhook, True)) if on and s]
    where = "in memory" if options.db_path == MEMORY else f"at {os.path.abspath(options.db_path)}"
    log.warning(
        "dev mode: one instance, SQLite %s, events to %s — not for production",
        where,
        " and ".join(sinks),
    )
    try:
        return build_dev(settings, options).run()
    except KeyboardInterrupt:  # before the signal handlers are in place
        return EXIT_OK


def _options(args: argparse.Namespace) -> DevOptions:
    if args.no_stdout and not args.webhook:
        raise ConfigError("--no-stdout: events would go nowhere; give --webhook URL too")
    if args.webhook_secret_file and not args.webhook:
        raise ConfigError("--webhook-secret-file: no webhook to sign for; give --webhook URL too")
    if not args.webhook_timeout_s > 0:
        raise ConfigError("--webhook-timeout-s: must be more than 0")
    db: str = args.db
    if db != MEMORY:
        folder = os.path.dirname(os.path.abspath(db))
        if not os.path.isdir(folder):
            raise ConfigError(f"--db: the directory {folder!r} does not exist")
    return DevOptions(
        db_path=db,
        webhook_url=args.webhook or "",
        webhook_timeout_s=args.webhook_timeout_s,
        stdout=not args.no_stdout,
        webhook_secret_file=args.webhook_secret_file,
        webhook_allow_private=not args.webhook_public_only,
    )
