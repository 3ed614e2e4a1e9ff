"""The CLI as a process: flags after the command, --version, ``config``
(defaults, show, check), secrets from ``TRIGGERHOOK_<KEY>_FILE``, and a
daemon logging JSON lines (its API process too)."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import tomllib
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from support.amqp import AmqpNames
from support.daemon import DaemonGroup, TaskTable, base_env, daemon_env, run_cli, settings_env

from triggerhook.cli.config_text import render_reference, render_toml
from triggerhook.store.mysql import init_schema

EXIT_OK, EXIT_USAGE = 0, 2


@pytest.fixture
def db(database_url: str) -> Iterator[tuple[str, TaskTable]]:
    init_schema(database_url)
    with TaskTable(database_url) as table:
        yield database_url, table


def assert_clean_error(result: subprocess.CompletedProcess[str], *mentions: str) -> str:
    """Exit 2, one error line naming each of ``mentions``, no traceback; the line."""
    output = result.stdout + result.stderr
    assert result.returncode == EXIT_USAGE, output
    assert "Traceback" not in output, output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("triggerhook: error: "), output
    for mention in mentions:
        assert mention in line, output
    assert result.stdout == "", output
    return line


def show(*args: str, env: dict[str, str] | None = None) -> dict[str, tuple[object, str]]:
    """``config show``'s output: each setting's value and source comment."""
    result = run_cli([*args], env or base_env())
    assert result.returncode == EXIT_OK, result.stderr
    data = tomllib.loads(result.stdout)
    sources = {
        line.split(" = ", 1)[0]: line.rsplit("  # ", 1)[1]
        for line in result.stdout.splitlines()
        if not line.startswith("#")
    }
    return {name: (value, sources[name]) for name, value in data.items()}


# -- flags after the command -------------------------------------------------------------------


def test_setting_flags_after_the_command_and_the_later_wins() -> None:
    shown = show("config", "show", "--log-level", "DEBUG", "--http-port", "9000")
    assert shown["log_level"] == ("DEBUG", "flag --log-level")
    assert shown["http_port"] == (9000, "flag --http-port")
    shown = show("--http-port", "1000", "config", "show", "--http-port", "9000")
    assert shown["http_port"] == (9000, "flag --http-port")
    shown = show("--http-port", "1000", "config", "show")
    assert shown["http_port"] == (1000, "flag --http-port")


def test_a_task_command_takes_the_database_url_after_it(db: tuple[str, TaskTable]) -> None:
    database_url, table = db
    result = run_cli(
        ["schedule", "--id", "after-1", "--in", "1h", "--database-url", database_url], base_env()
    )
    assert result.returncode == EXIT_OK, result.stderr
    assert json.loads(result.stdout)["id"] == "after-1"
    assert table.count() == 1


def test_a_bad_setting_after_run_is_named() -> None:
    result = run_cli(["run", "--log-format", "yaml"], base_env())
    assert_clean_error(result, "log_format")


def test_version() -> None:
    result = run_cli(["--version"], base_env())
    assert result.returncode == EXIT_OK, result.stderr
    assert result.stdout == f"triggerhook {importlib.metadata.version('triggerhook')}\n"


# -- config ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        pytest.param([], render_toml(), id="plain"),
        pytest.param(["defaults"], render_toml(), id="defaults"),
        pytest.param(["--format", "markdown"], render_reference(), id="plain-markdown"),
        pytest.param(["defaults", "--format", "markdown"], render_reference(), id="markdown"),
        pytest.param(["--format", "markdown", "defaults"], render_reference(), id="format-first"),
    ],
)
def test_config_defaults_as_before(args: list[str], expected: str) -> None:
    """``triggerhook config`` regenerates config/triggerhook.toml and docs/configuration.md."""
    result = run_cli(["config", *args], base_env())
    assert result.returncode == EXIT_OK, result.stderr
    assert result.stdout == expected


def test_config_defaults_ignores_a_bad_environment() -> None:
    """Printing the defaults needs no valid configuration."""
    result = run_cli(["config"], {**base_env(), **settings_env(log_level="chatty")})
    assert result.returncode == EXIT_OK, result.stderr
    assert result.stdout == render_toml()


def test_config_show_masks_secrets_and_names_sources(tmp_path: Path) -> None:
    token = tmp_path / "api_token"
    token.write_text("tok-s3cret\n", encoding="utf-8")
    config = tmp_path / "triggerhook.toml"
    config.write_text('exchange = "from.file"\nmetrics_password = "pw-s3cret"\n')
    env = {
        **base_env(),
        "TRIGGERHOOK_CONFIG": str(config),
        "TRIGGERHOOK_API_TOKEN_FILE": str(token),
        "TRIGGERHOOK_AMQP_URL": "amqp://app:url-s3cret@mq/%2F",
    }
    result = run_cli(["config", "show", "--instance-id", "i-1"], env)
    assert result.returncode == EXIT_OK, result.stderr
    assert "s3cret" not in result.stdout
    shown = show("config", "show", "--instance-id", "i-1", env=env)
    assert shown["api_token"] == ("***", f"env file TRIGGERHOOK_API_TOKEN_FILE={token}")
    assert shown["amqp_url"] == ("amqp://app:***@mq/%2F", "env TRIGGERHOOK_AMQP_URL")
    assert shown["metrics_password"] == ("***", f"file {config}")
    assert shown["exchange"] == ("from.file", f"file {config}")
    assert shown["instance_id"] == ("i-1", "flag --instance-id")
    assert shown["shard_count"] == (64, "default")


def test_config_show_of_a_bad_configuration_is_a_usage_error() -> None:
    result = run_cli(["config", "show"], {**base_env(), **settings_env(http_port="x")})
    assert_clean_error(result, "TRIGGERHOOK_HTTP_PORT")


def test_config_check_of_a_good_file(tmp_path: Path) -> None:
    path = tmp_path / "good.toml"
    path.write_text('http_port = 9000\nlog_format = "json"\n')
    result = run_cli(["config", "check", str(path)], base_env())
    assert result.returncode == EXIT_OK, result.stderr
    assert result.stdout == f"{path}: OK\n"
    assert result.stderr == ""
    repo_file = Path(__file__).resolve().parents[2] / "config" / "triggerhook.toml"
    assert run_cli(["config", "check", str(repo_file)], base_env()).returncode == EXIT_OK


@pytest.mark.parametrize(
    ("toml", "mentions"),
    [
        pytest.param("nope = 1\n", ("nope", "unknown"), id="unknown-key"),
        pytest.param('http_port = "x"\n', ("http_port", "integer"), id="wrong-type"),
        pytest.param('log_level = "chatty"\n', ("log_level",), id="bad-value"),
        pytest.param('log_format = "yaml"\n', ("log_format",), id="bad-log-format"),
        pytest.param("shard_lease_ms = 10\n", ("shard_lease_ms", "1000"), id="below-minimum"),
        pytest.param(
            "arm_ahead_ms = 100\narm_interval_ms = 100\n", ("arm_interval_ms",), id="cross-field"
        ),
        pytest.param('http_host = "0.0.0.0"\n', ("http_host", "api_token"), id="public"),
        pytest.param("http_port = \n", ("not valid TOML",), id="not-toml"),
    ],
)
def test_config_check_names_the_field(tmp_path: Path, toml: str, mentions: tuple[str, ...]) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(toml)
    line = assert_clean_error(run_cli(["config", "check", str(path)], base_env()), *mentions)
    assert str(path) in line


def test_config_check_of_a_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "missing.toml"
    assert_clean_error(run_cli(["config", "check", str(path)], base_env()), str(path))


# -- secrets from files ------------------------------------------------------------------------


def test_the_database_url_from_a_file(db: tuple[str, TaskTable], tmp_path: Path) -> None:
    database_url, table = db
    secret = tmp_path / "database_url"
    secret.write_text(database_url + "\n", encoding="utf-8")
    env = {**base_env(), "TRIGGERHOOK_DATABASE_URL_FILE": str(secret)}
    result = run_cli(["schedule", "--id", "from-file", "--in", "1h"], env)
    assert result.returncode == EXIT_OK, result.stderr
    assert table.count() == 1


def test_a_secret_and_its_file_both_set(tmp_path: Path) -> None:
    secret = tmp_path / "token"
    secret.write_text("x")
    env = {
        **base_env(),
        "TRIGGERHOOK_API_TOKEN": "y",
        "TRIGGERHOOK_API_TOKEN_FILE": str(secret),
    }
    for command in (["run"], ["config", "show"], ["get", "x"]):
        result = run_cli(command, env)
        assert_clean_error(result, "TRIGGERHOOK_API_TOKEN and TRIGGERHOOK_API_TOKEN_FILE")


def test_an_unreadable_secret_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    env = {**base_env(), "TRIGGERHOOK_AMQP_URL_FILE": str(missing)}
    assert_clean_error(run_cli(["run"], env), "TRIGGERHOOK_AMQP_URL_FILE", str(missing))


# -- a daemon logging JSON ---------------------------------------------------------------------


def json_lines(lines: list[str]) -> list[dict[str, object]]:
    """Every line parsed (a line that is not JSON fails the test, naming it)."""
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            pytest.fail(f"not a JSON line: {line!r}")
    return records


def assert_utc(text: object) -> None:
    assert isinstance(text, str) and text.endswith("Z"), text
    assert datetime.fromisoformat(text).utcoffset() == timedelta(0)
    assert len(text.split(".")[1]) == len("123Z"), text  # milliseconds


def test_a_daemon_logs_json_lines_its_api_process_too(
    database_url: str, amqp_url: str, amqp_names: AmqpNames, daemons: DaemonGroup
) -> None:
    env = daemon_env(database_url, amqp_url, amqp_names.exchange, "json", log_format="json")
    # A setting after `run`: the engine's name in its log.
    daemon = daemons.start(env, "json", "--init-db", "--instance-id", "json-flag")
    daemon.wait_ready()
    assert daemon.terminate() == 0
    records = json_lines(daemon.lines)
    assert records, "no log lines"
    for record in records:
        assert {"time", "level", "logger", "message"} <= set(record), record
        assert_utc(record["time"])
    (started,) = [r for r in records if r["message"] == "engine started"]
    assert started["instance"] == "json-flag"  # the context, as a field
    listening = [r for r in records if str(r["message"]).startswith("http api listening")]
    assert listening and listening[0]["api_process"] == 0  # logged by the API process


def test_a_daemon_failing_to_start_reports_in_json(database_url: str) -> None:
    """The error line of a daemon logging JSON is a JSON record too."""
    env = {**base_env(), **settings_env(database_url=database_url, log_format="json")}
    result = run_cli(["run"], env)  # an empty database: no schema
    assert result.returncode == EXIT_USAGE, result.stderr
    records = json_lines(result.stderr.splitlines())
    errors = [r for r in records if r["level"] == "ERROR"]
    assert len(errors) == 1, records
    assert str(errors[0]["message"]).startswith("triggerhook: error: ")
    assert "db init" in str(errors[0]["message"])
