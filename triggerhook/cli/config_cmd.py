"""``triggerhook config``: the documented defaults, the effective configuration,
and a check of a config file.

* ``config`` or ``config defaults [--format toml|markdown]``: the documented
  default file (``config/triggerhook.toml``) or the reference
  (``docs/configuration.md``), both generated from the settings' declarations;
* ``config show``: the configuration a command would run with (the file of
  ``--config``, the environment, the flags), secrets masked, each value with
  its source as a trailing comment;
* ``config check FILE``: loads FILE as ``--config`` would (with the
  environment and flags, so a rule spanning settings sees a token given
  elsewhere) and starts nothing: one ``OK`` line, or the error naming the field
  (exit 2, from :func:`triggerhook.cli.main`).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from pathlib import Path

from triggerhook.cli.config_text import render_effective, render_reference, render_toml
from triggerhook.errors import ConfigError
from triggerhook.settings import load_settings, load_with_sources

_FORMAT_HELP = "toml: the config file; markdown: the reference (docs/configuration.md)"


def add_config_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    config = sub.add_parser(
        "config",
        help="the documented defaults (TOML, the default), the effective configuration "
        "(show), or a check of a config file (check FILE)",
        description="Without a subcommand, as `config defaults`.",
    )
    config.add_argument("--format", choices=("toml", "markdown"), default="toml", help=_FORMAT_HELP)
    commands = config.add_subparsers(dest="config_command")
    defaults = commands.add_parser(
        "defaults", help="print the documented default config file (TOML) or the reference"
    )
    # SUPPRESS: not given here, `config --format X defaults` keeps X.
    defaults.add_argument(
        "--format", choices=("toml", "markdown"), default=argparse.SUPPRESS, help=_FORMAT_HELP
    )
    commands.add_parser(
        "show",
        help="print the effective configuration (TOML; secrets masked), each value's "
        "source as a comment: default, file, env, env file, flag",
    )
    check = commands.add_parser(
        "check",
        help="check a TOML config file (unknown keys, wrong types, bad values) without "
        "starting anything: exit 0 and one OK line, or 2 and the error naming the field",
    )
    check.add_argument("file", type=Path, metavar="FILE", help="the TOML file to check")


def run_config(args: argparse.Namespace, overrides: Mapping[str, object]) -> int:
    """The ``config`` command; a bad configuration raises ConfigError."""
    command = args.config_command or "defaults"
    if command == "defaults":
        print(render_toml() if args.format == "toml" else render_reference(), end="")
    elif command == "show":
        settings, sources = load_with_sources(args.config, os.environ, overrides)
        print(render_effective(settings, sources), end="")
    else:
        _check(args.file, overrides)
    return 0


def _check(path: Path, overrides: Mapping[str, object]) -> None:
    try:
        load_settings(path, os.environ, overrides)
    except ConfigError as exc:
        # A rule spanning settings names the fields, not the file: say which.
        message = str(exc)
        raise ConfigError(message if str(path) in message else f"{path}: {message}") from None
    print(f"{path}: OK")
