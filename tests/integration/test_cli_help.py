"""``--help`` of every command, and where the flags of every command go.

The tree of commands is walked from the parser itself, so a command added
later is covered without editing these tests. In-process (``main``): each
``--help`` exits through SystemExit(0) with the text on stdout; the installed
script runs ``--help`` as a process in tests/integration/test_cli.py.
"""

from __future__ import annotations

import argparse

import pytest

from triggerhook.cli import _parser, main
from triggerhook.cli.flags import accept_after_command, commands, overrides
from triggerhook.settings import FIELDS


def command_paths(
    parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()
) -> list[tuple[str, ...]]:
    """Every command (``()`` is the top level), nested ones included."""
    paths = [prefix]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                paths += command_paths(sub, (*prefix, name))
    return paths


PATHS = command_paths(_parser())


def test_the_walk_finds_nested_commands() -> None:
    expected = {("db", "init"), ("config", "show"), ("config", "check"), ("config", "defaults")}
    assert expected | {(), ("run",), ("dev",), ("schedule",), ("api-process",)} <= set(PATHS)


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "top-level")
def test_help_of_every_command(path: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main([*path, "--help"])
    out, err = capsys.readouterr()
    assert done.value.code == 0, err
    assert err == ""
    assert out.startswith(" ".join(("usage: triggerhook", *path))), out
    assert len(out.splitlines()) > 3, out
    if path and path != ("api-process",):
        # Says that the top level's flags work here too, and which wins.
        assert "the later one wins" in " ".join(out.split()), out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("triggerhook ") and out.strip() != "triggerhook", out


# -- setting flags before and after the command ------------------------------------------------


def parse(*argv: str) -> argparse.Namespace:
    return _parser().parse_args(argv)


def test_a_setting_flag_after_the_command() -> None:
    args = parse("run", "--log-level", "DEBUG", "--http-port", "9000")
    given = {k: v for k, v in overrides(args).items() if v is not None}
    assert given == {"log_level": "DEBUG", "http_port": 9000}


def test_a_setting_flag_after_a_nested_command() -> None:
    args = parse("db", "init", "--database-url", "mysql://u:@h/x")
    assert overrides(args)["database_url"] == "mysql://u:@h/x"


def test_the_later_of_a_flag_given_before_and_after_the_command_wins() -> None:
    assert overrides(parse("--log-level", "ERROR", "run", "--log-level", "DEBUG"))["log_level"] == (
        "DEBUG"
    )
    # Given only before it, it is not reset by the command's parser.
    assert overrides(parse("--log-level", "ERROR", "run"))["log_level"] == "ERROR"
    args = parse("--config", "a.toml", "get", "x", "--config", "b.toml")
    assert str(args.config) == "b.toml"


def test_every_setting_is_accepted_after_every_command() -> None:
    top = _parser()
    for name, command in commands(top):
        if name == "api-process":
            continue
        known = set(command._option_string_actions)
        missing = [n for n in FIELDS if f"--{n.replace('_', '-')}" not in known]
        assert missing == [], (name, missing)


def test_a_command_flag_of_a_setting_name_stays_the_commands() -> None:
    """Were there a ``routing_key`` setting, list's --routing-key would still be
    list's filter after the command (the setting's goes before it), and the
    help says so."""
    top = argparse.ArgumentParser(prog="t")
    top.add_argument("--routing-key", dest="setting_routing_key")
    top.add_argument("--log-level", dest="setting_log_level")
    command = argparse.ArgumentParser(prog="t list")
    command.add_argument("--routing-key", help="tasks with this routing key")
    accept_after_command(top, command)
    args = command.parse_args(["--routing-key", "billing.x", "--log-level", "DEBUG"])
    assert args.routing_key == "billing.x"
    assert not hasattr(args, "setting_routing_key")
    assert args.setting_log_level == "DEBUG"
    help_text = " ".join(command.format_help().split())
    assert "are accepted after the command too" in help_text  # the note on every command
    assert "Here --routing-key: this command's own flag, not the setting" in help_text


def test_list_routing_key_is_the_filter_after_the_command() -> None:
    args = parse("list", "--routing-key", "billing.x")
    assert args.routing_key == "billing.x"
    assert overrides(args)["default_routing_key"] is None
