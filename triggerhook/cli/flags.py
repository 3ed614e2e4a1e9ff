"""The flags every command takes: ``--config``, ``--url`` and one per setting
(``--log-level``, ``--http-port``, ...), before the command or after it.

After the command, the command's parser reads them, and argparse copies its
namespace over the top level's: given in both places, the later one wins. A
flag the command has of its own (list's ``--routing-key``, were there a
``routing_key`` setting) keeps the command's meaning there, and its help says so.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from triggerhook.errors import ConfigError
from triggerhook.settings import FIELDS, env_var, parse_bool

AFTER_COMMAND = (
    "The flags of `triggerhook --help` (--config, --url and every setting: --log-level, "
    "--http-port, ...) are accepted after the command too; given before and after it, "
    "the later one wins."
)


def _flag_bool(text: str) -> bool:
    try:
        return parse_bool(text, "flag")
    except ConfigError:
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}") from None


# Settings' annotations (strings, see `from __future__ import annotations`) ->
# the flag's converter and metavar.
_FLAG_TYPES: dict[str, tuple[Callable[[str], object], str]] = {
    "int": (int, "N"),
    "float": (float, "N"),
    "bool": (_flag_bool, "true|false"),
    "str": (str, "VALUE"),
}


def _literal(text: str) -> str:
    """``text`` as an argparse help string: argparse %-formats help (for
    ``%(default)s``), so a literal ``%`` (the ``%2F`` vhost of the default
    amqp_url) must be doubled or ``--help`` crashes."""
    return text.replace("%", "%%")


def positive_int(text: str) -> int:
    """An argparse type: a whole number >= 1."""
    # Digits checked (and counted) before int(): no sign, space or 5,000 digits.
    if not (text.isascii() and text.isdecimal() and len(text) <= 18) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text[:40]!r}")
    return int(text)


def version() -> str:
    try:
        return importlib.metadata.version("triggerhook")
    except importlib.metadata.PackageNotFoundError:  # a source tree, not installed
        return "unknown"


def add_global_flags(parser: argparse.ArgumentParser) -> None:
    """--version, --config, --url and the settings' flags, on the top level."""
    parser.add_argument("--version", action="version", version=f"triggerhook {version()}")
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
        "the task commands (schedule, reschedule, cancel, get, list, count, pause, resume, "
        "trigger, backfill) go through it instead of the database",
    )
    group = parser.add_argument_group(
        "settings (each also TRIGGERHOOK_<NAME> in the environment; "
        "accepted after the command too: the later one wins)"
    )
    for name, spec in FIELDS.items():
        convert, metavar = _FLAG_TYPES[str(spec.type)]
        group.add_argument(
            f"--{name.replace('_', '-')}",
            dest=f"setting_{name}",
            type=convert,
            metavar=metavar,
            help=_literal(f"{spec.metadata['help']} [{env_var(name)}, default {spec.default!r}]"),
        )


def overrides(args: argparse.Namespace) -> dict[str, object]:
    """The settings given as flags (None: not given)."""
    return {name: getattr(args, f"setting_{name}") for name in FIELDS}


def commands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every command's parser, nested ones (``db init``) included."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, command in action.choices.items():
                yield name, command
                yield from commands(command)


def accept_after_commands(top: argparse.ArgumentParser, skip: Sequence[str] = ()) -> None:
    """The top level's --config, --url and setting flags on every command
    (but those in ``skip``)."""
    for name, command in commands(top):
        if name not in skip:
            accept_after_command(top, command)


def accept_after_command(top: argparse.ArgumentParser, command: argparse.ArgumentParser) -> None:
    """``top``'s --config, --url and setting flags on ``command`` too, without
    a default there (one given only before the command stays) and hidden from
    its help (the top level's lists them). Those ``command`` has of its own
    stay its own, named in its help's epilog."""
    own = set(command._option_string_actions)
    shadowed: list[str] = []
    for action in top._actions:
        if action.dest not in ("config", "url") and not action.dest.startswith("setting_"):
            continue
        shadowed += [flag for flag in action.option_strings if flag in own]
        flags = [flag for flag in action.option_strings if flag not in own]
        if flags:
            extra: dict[str, Any] = {} if action.type is None else {"type": action.type}
            command.add_argument(
                *flags,
                dest=action.dest,
                metavar=action.metavar,
                default=argparse.SUPPRESS,
                help=argparse.SUPPRESS,
                **extra,
            )
    command.epilog = AFTER_COMMAND
    if shadowed:
        command.epilog += (
            f" Here {', '.join(shadowed)}: this command's own flag, not the setting; "
            "give the setting before the command."
        )
