"""``triggerhook token new``: a token for the namespaces file
(docs/design/shared-service.md): the secret to give the client, and the
``sha256 = "..."`` line its ``[[token]]`` entry holds instead of it. Nothing
is stored; nothing else reads the settings."""

from __future__ import annotations

import argparse
import secrets

from triggerhook.domain.namespaces import token_hash

EXIT_OK = 0
_PREFIX = "th_"  # says what a leaked string is (secret scanners match on it)

_DESCRIPTION = """\
Prints a new token (th_ and 32 random bytes, URL-safe base64) on the first
line and, on the second, the line for its [[token]] entry in namespaces_file:
the file keeps only the token's SHA-256. Give the token to its client; it is
printed once and kept nowhere."""


def add_token_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    token = sub.add_parser(
        "token",
        help="tokens of namespaces_file: new",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = token.add_subparsers(dest="token_command", metavar="COMMAND", required=True)
    verbs.add_parser("new", help="print a new token and its sha256 line")


def new_token() -> str:
    return _PREFIX + secrets.token_urlsafe(32)


def run_token(_args: argparse.Namespace) -> int:
    token = new_token()
    print(token)
    print(f'sha256 = "{token_hash(token)}"')
    return EXIT_OK
