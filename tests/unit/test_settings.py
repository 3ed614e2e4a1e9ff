"""Settings: TOML file < TRIGGERHOOK_* env < overrides; strict keys, types and ranges."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import tomllib
from pathlib import Path

import pytest

from triggerhook.cli.config_text import render_effective, render_reference, render_toml, shown
from triggerhook.domain.meta import FIRE, LateKind, LatePolicy
from triggerhook.domain.ratelimits import RateLimit
from triggerhook.domain.task import ID_PATTERN
from triggerhook.errors import ConfigError
from triggerhook.settings import (
    FIELDS,
    FILE_SUFFIX,
    Settings,
    env_var,
    is_secret,
    load_settings,
    load_with_sources,
)

REPO = Path(__file__).resolve().parents[2]
CONFIG_FILE = REPO / "config" / "triggerhook.toml"

INT_FIELDS = [name for name, f in FIELDS.items() if f.type in ("int", int)]
STR_FIELDS = [name for name, f in FIELDS.items() if f.type in ("str", str)]
BOOL_FIELDS = [name for name, f in FIELDS.items() if f.type in ("bool", bool)]
FLOAT_FIELDS = [name for name, f in FIELDS.items() if f.type in ("float", float)]


def write_toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "triggerhook.toml"
    path.write_text(text, encoding="utf-8")
    return path


# -- the documented file ------------------------------------------------------------


def test_every_field_is_an_int_a_float_a_str_or_a_bool_with_help() -> None:
    assert sorted(INT_FIELDS + FLOAT_FIELDS + STR_FIELDS + BOOL_FIELDS) == sorted(FIELDS)
    for name, spec in FIELDS.items():
        assert spec.metadata["help"], name


def test_repo_config_file_is_render_toml() -> None:
    # The documented config file is generated: it must not drift from the code.
    assert CONFIG_FILE.read_text(encoding="utf-8") == render_toml()


def test_configuration_reference_is_generated_and_current() -> None:
    # Regenerate: triggerhook config --format markdown > docs/configuration.md
    reference = REPO / "docs" / "configuration.md"
    assert reference.read_text(encoding="utf-8") == render_reference()
    for name in FIELDS:
        env = f"`{env_var(name)}`" + (f", `{env_var(name)}_FILE`" if is_secret(name) else "")
        assert f"| `{name}` | {env} | `--{name.replace('_', '-')}` |" in reference.read_text(
            encoding="utf-8"
        )
    assert "TRIGGERHOOK_<KEY>_FILE" in render_reference()


def test_repo_config_file_loads_to_the_defaults() -> None:
    assert load_settings(CONFIG_FILE, environ={}) == Settings()
    data = tomllib.loads(render_toml())
    assert set(data) == set(FIELDS)
    assert data == {name: spec.default for name, spec in FIELDS.items()}


def test_render_toml_names_each_env_var() -> None:
    text = render_toml()
    for name in FIELDS:
        variable = f"TRIGGERHOOK_{name.upper()}"
        env = f"{variable} or {variable}_FILE" if is_secret(name) else variable
        assert f"(env {env})" in text


def test_no_sources_gives_defaults() -> None:
    assert load_settings(environ={}) == Settings()


# -- precedence -----------------------------------------------------------------------


def test_precedence_file_then_env_then_overrides(tmp_path: Path) -> None:
    path = write_toml(
        tmp_path,
        "arm_interval_ms = 10\n"
        "arm_batch_size = 11\n"
        "confirm_batch_size = 12\n"
        'exchange = "from.file"\n',
    )
    env = {
        "TRIGGERHOOK_ARM_BATCH_SIZE": "21",
        "TRIGGERHOOK_CONFIRM_BATCH_SIZE": "22",
        "TRIGGERHOOK_EXCHANGE": "from.env",
    }
    overrides: dict[str, object] = {"confirm_batch_size": 32, "exchange": None}
    settings = load_settings(path, environ=env, overrides=overrides)
    assert settings.arm_interval_ms == 10  # file only
    assert settings.arm_batch_size == 21  # env beats file
    assert settings.confirm_batch_size == 32  # override beats env
    assert settings.exchange == "from.env"  # a None override means "not given"
    assert settings.send_buffer_size == Settings().send_buffer_size  # default


def test_environ_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRIGGERHOOK_ARM_INTERVAL_MS", "77")
    monkeypatch.setenv("TRIGGERHOOK_LOG_LEVEL", "debug")
    settings = load_settings()
    assert settings.arm_interval_ms == 77
    assert settings.log_level == "debug"


def test_env_vars_without_the_prefix_or_unknown_are_ignored() -> None:
    env = {"ARM_INTERVAL_MS": "5", "TRIGGERHOOK_NOT_A_SETTING": "x", "triggerhook_exchange": "y"}
    assert load_settings(environ=env) == Settings()


def test_env_var_names() -> None:
    assert env_var("shard_lease_ms") == "TRIGGERHOOK_SHARD_LEASE_MS"


# -- the TOML file -------------------------------------------------------------------


def test_unknown_toml_key_is_rejected_by_name(tmp_path: Path) -> None:
    path = write_toml(tmp_path, 'exchange = "x"\npoll_interval = 5\nzzz_extra = 1\n')
    with pytest.raises(ConfigError) as info:
        load_settings(path, environ={})
    assert "poll_interval" in str(info.value)
    assert "zzz_extra" in str(info.value)
    assert str(path) in str(info.value)


def test_toml_table_is_an_unknown_key(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "[engine]\narm_interval_ms = 5\n")
    with pytest.raises(ConfigError, match="engine"):
        load_settings(path, environ={})


@pytest.mark.parametrize(
    ("line", "name"),
    [
        ('arm_interval_ms = "5"', "arm_interval_ms"),
        ("arm_interval_ms = 5.0", "arm_interval_ms"),
        ("arm_interval_ms = true", "arm_interval_ms"),
        ("arm_interval_ms = [5]", "arm_interval_ms"),
        ("exchange = 5", "exchange"),
        ("log_level = false", "log_level"),
        ("amqp_url = { host = 'x' }", "amqp_url"),
    ],
)
def test_wrong_toml_types_are_rejected(tmp_path: Path, line: str, name: str) -> None:
    path = write_toml(tmp_path, line + "\n")
    with pytest.raises(ConfigError) as info:
        load_settings(path, environ={})
    message = str(info.value)
    assert name in message
    assert "expected" in message


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "nope.toml", environ={})


def test_invalid_toml_is_a_config_error(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "arm_interval_ms = = 5\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(path, environ={})


# -- environment variables ------------------------------------------------------------


@pytest.mark.parametrize("raw", ["abc", "", "1.5", "5ms", "0x10", "true"])
def test_env_int_coercion_error_names_the_env_var(raw: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(environ={"TRIGGERHOOK_ARM_INTERVAL_MS": raw})
    assert "TRIGGERHOOK_ARM_INTERVAL_MS" in str(info.value)
    assert "integer" in str(info.value)


def test_env_int_allows_surrounding_whitespace() -> None:
    assert load_settings(environ={"TRIGGERHOOK_ARM_INTERVAL_MS": " 42\n"}).arm_interval_ms == 42


def test_env_below_minimum_names_the_env_var() -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(environ={"TRIGGERHOOK_SHARD_LEASE_MS": "999"})
    assert "TRIGGERHOOK_SHARD_LEASE_MS" in str(info.value)
    assert "at least 1000" in str(info.value)


def test_env_strings_are_taken_verbatim() -> None:
    url = "mysql+pymysql://u:p@db:3306/th"
    settings = load_settings(environ={"TRIGGERHOOK_DATABASE_URL": url})
    assert settings.database_url == url


# -- overrides --------------------------------------------------------------------------


def test_unknown_override_is_rejected_by_name() -> None:
    with pytest.raises(ConfigError, match="bogus_knob"):
        load_settings(environ={}, overrides={"bogus_knob": 1})


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("arm_interval_ms", "5"),
        ("arm_interval_ms", True),
        ("arm_interval_ms", 1.0),
        ("exchange", 5),
    ],
)
def test_wrong_override_types_are_rejected(name: str, value: object) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(environ={}, overrides={name: value})
    assert f"--{name.replace('_', '-')}" in str(info.value)


# -- minimums -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", INT_FIELDS)
def test_every_int_setting_has_a_minimum_enforced_from_every_source(
    name: str, tmp_path: Path
) -> None:
    minimum = FIELDS[name].metadata["minimum"]
    assert isinstance(minimum, int), f"{name} has no minimum"
    below = minimum - 1
    with pytest.raises(ConfigError, match=f"at least {minimum}"):
        load_settings(environ={}, overrides={name: below})
    with pytest.raises(ConfigError, match=env_var(name)):
        load_settings(environ={env_var(name): str(below)})
    with pytest.raises(ConfigError, match=name):
        load_settings(write_toml(tmp_path, f"{name} = {below}\n"), environ={})


@pytest.mark.parametrize("name", [n for n in INT_FIELDS if FIELDS[n].metadata["maximum"]])
def test_a_maximum_is_enforced_from_every_source(name: str, tmp_path: Path) -> None:
    maximum = FIELDS[name].metadata["maximum"]
    assert getattr(load_settings(environ={}, overrides={name: maximum}), name) == maximum
    above = maximum + 1
    with pytest.raises(ConfigError, match=f"at most {maximum}"):
        load_settings(environ={}, overrides={name: above})
    with pytest.raises(ConfigError, match=env_var(name)):
        load_settings(environ={env_var(name): str(above)})
    with pytest.raises(ConfigError, match=name):
        load_settings(write_toml(tmp_path, f"{name} = {above}\n"), environ={})
    with pytest.raises(ConfigError, match=f"{name}: must be at most"):
        Settings(**{name: above})


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("confirm_transactions", 1),
        ("max_payload_bytes", 0),
        ("confirm_max_delay_ms", 0),
        ("switch_interval_us", 0),
        ("shutdown_timeout_s", 0),
        ("arm_interval_ms", 1),
        ("arm_batch_size", 1),
        ("max_tasks_in_memory", 1),
    ],
)
def test_minimum_itself_is_accepted(name: str, value: int) -> None:
    assert getattr(load_settings(environ={}, overrides={name: value}), name) == value


def test_arm_ahead_minimum_is_accepted_with_an_interval_under_it() -> None:
    settings = load_settings(environ={}, overrides={"arm_ahead_ms": 2, "arm_interval_ms": 1})
    assert (settings.arm_ahead_ms, settings.arm_interval_ms) == (2, 1)


def test_direct_construction_enforces_minimums_and_types() -> None:
    # The library API is `build(Settings(...))` (README): a Settings built directly
    # must be as valid as one from load_settings; e.g. send_buffer_size=0 would
    # leave the scheduler waiting for room forever.
    wrong = []
    for name in INT_FIELDS:
        minimum = FIELDS[name].metadata["minimum"]
        for bad in (minimum - 1, str(FIELDS[name].default)):
            try:
                Settings(**{name: bad})  # type: ignore[arg-type]
            except ConfigError:
                continue
            except Exception as exc:  # the wrong error is a finding too
                wrong.append(f"{name}={bad!r} raised {type(exc).__name__}")
            else:
                wrong.append(f"{name}={bad!r} accepted")
    assert wrong == [], "Settings(...) with invalid values: " + "; ".join(wrong)


# -- cross-field checks (__post_init__) ----------------------------------------------------


def test_arm_interval_must_be_under_arm_ahead() -> None:
    with pytest.raises(ConfigError, match="arm_interval_ms"):
        Settings(arm_ahead_ms=100, arm_interval_ms=100)
    assert Settings(arm_ahead_ms=100, arm_interval_ms=99).arm_interval_ms == 99


def test_idle_transaction_timeout_must_be_under_the_lease() -> None:
    with pytest.raises(ConfigError, match="database_idle_transaction_timeout_s"):
        Settings(shard_lease_ms=5000, database_idle_transaction_timeout_s=5)
    with pytest.raises(ConfigError, match="database_idle_transaction_timeout_s"):
        load_settings(environ={}, overrides={"shard_lease_ms": 2000})
    assert (
        Settings(shard_lease_ms=2000, database_idle_transaction_timeout_s=1).shard_lease_ms == 2000
    )
    assert (
        Settings(shard_lease_ms=1000, database_idle_transaction_timeout_s=0).shard_lease_ms == 1000
    )


def test_shard_count_is_bounded() -> None:
    with pytest.raises(ConfigError, match="shard_count"):
        Settings(shard_count=4097)
    assert Settings(shard_count=4096).shard_count == 4096


@pytest.mark.parametrize(
    ("old", "hint"),
    [
        ("claim_lease_ms = 30000", "claim_lease_ms is now shard_lease_ms"),
        ("claim_batch_size = 10", "claim_batch_size is now arm_batch_size"),
        ("poll_interval_ms = 10", "poll_interval_ms is now arm_interval_ms"),
        ("preload_window_ms = 5000", "preload_window_ms is gone"),
    ],
)
def test_a_setting_of_the_claim_protocol_is_refused_with_what_replaced_it(
    tmp_path: Path, old: str, hint: str
) -> None:
    path = write_toml(tmp_path, old + "\n")
    with pytest.raises(ConfigError, match="unknown setting") as raised:
        load_settings(path, environ={})
    assert hint in str(raised.value)
    with pytest.raises(ConfigError, match=hint):
        load_settings(environ={}, overrides={old.split(maxsplit=1)[0]: 1})


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("dead_letter_routing_key", ""),
        ("dead_letter_routing_key", "dead letters"),
        ("dead_letter_queue", "déad"),
        ("command_reply_prefix", "reply queue."),
        ("command_allowed_users", "billing,,ops"),
        ("command_allowed_users", "billing, "),
    ],
)
def test_dead_letter_and_command_names_are_checked(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=name):
        Settings(**{name: value})  # type: ignore[arg-type]


def test_optional_names_may_be_empty_and_users_are_a_list() -> None:
    settings = Settings(dead_letter_queue="", command_reply_prefix="")
    assert (settings.dead_letter_queue, settings.command_reply_prefix) == ("", "")
    assert Settings().command_users() == []
    assert Settings(command_allowed_users=" billing , ops").command_users() == ["billing", "ops"]


@pytest.mark.parametrize("level", ["DEBUG", "info", "Warning", "ERROR"])
def test_log_levels_accepted_in_any_case(level: str) -> None:
    assert Settings(log_level=level).log_level == level


@pytest.mark.parametrize("level", ["", "TRACE", "CRITICAL", "verbose", "10"])
def test_bad_log_level_is_rejected(level: str) -> None:
    with pytest.raises(ConfigError, match="log_level"):
        Settings(log_level=level)


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_log_formats(log_format: str) -> None:
    assert Settings().log_format == "text"
    assert load_settings(environ={"TRIGGERHOOK_LOG_FORMAT": log_format}).log_format == log_format


@pytest.mark.parametrize("log_format", ["", "JSON", "logfmt", "Text "])
def test_bad_log_format_is_rejected(log_format: str) -> None:
    with pytest.raises(ConfigError, match="log_format: must be one of text, json"):
        Settings(log_format=log_format)


@pytest.mark.parametrize("instance_id", ["has space", "x" * 65, "slash/no", "ü"])
def test_bad_instance_id_is_rejected(instance_id: str) -> None:
    with pytest.raises(ConfigError, match="instance_id"):
        Settings(instance_id=instance_id)
    with pytest.raises(ConfigError, match="instance_id"):
        load_settings(environ={"TRIGGERHOOK_INSTANCE_ID": instance_id})


@pytest.mark.parametrize("instance_id", ["a", "host-1:worker_2.x", "x" * 64])
def test_good_instance_id_is_used_as_is(instance_id: str) -> None:
    assert Settings(instance_id=instance_id).resolved_instance_id() == instance_id


def test_empty_instance_id_resolves_to_hostname_and_random_suffix() -> None:
    settings = Settings()
    first, second = settings.resolved_instance_id(), settings.resolved_instance_id()
    assert first != second
    for resolved in (first, second):
        assert ID_PATTERN.fullmatch(resolved), resolved
        assert re.fullmatch(rf".+-{os.getpid()}-[0-9a-f]{{6}}", resolved)


@pytest.mark.parametrize(
    ("name", "value"),
    [("exchange", ""), ("exchange", "has space"), ("default_routing_key", "a*b")],
)
def test_bad_exchange_or_routing_key_is_rejected(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=name):
        Settings(**{name: value})  # type: ignore[arg-type]


def test_settings_are_frozen() -> None:
    settings = Settings()
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.exchange = "other"  # type: ignore[misc]


# -- booleans and the HTTP binding rule ----------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("true", True), ("1", True), (" YES ", True), ("on", True), ("false", False), ("0", False)],
)
@pytest.mark.parametrize("name", BOOL_FIELDS)
def test_bool_settings_from_env(name: str, raw: str, expected: bool) -> None:
    assert getattr(load_settings(environ={env_var(name): raw}), name) is expected


@pytest.mark.parametrize("name", BOOL_FIELDS)
def test_bad_bools_are_rejected_from_every_source(name: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=env_var(name)):
        load_settings(environ={env_var(name): "maybe"})
    with pytest.raises(ConfigError, match=name):
        load_settings(write_toml(tmp_path, f"{name} = 1\n"), environ={})
    with pytest.raises(ConfigError, match=name.replace("_", "-")):
        load_settings(environ={}, overrides={name: "true"})
    assert (
        getattr(load_settings(write_toml(tmp_path, f"{name} = false\n"), environ={}), name) is False
    )


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.5", "::", "example.com"])
def test_a_public_http_host_needs_a_token_or_an_explicit_allowance(host: str) -> None:
    with pytest.raises(ConfigError, match="http_host"):
        Settings(http_host=host)
    assert Settings(http_host=host, api_token="t").http_host == host
    assert Settings(http_host=host, http_allow_public_without_token=True).http_host == host
    assert Settings(http_host=host, http_enabled=False).http_host == host


@pytest.mark.parametrize("host", ["0.0.0.0", "example.com"])
def test_a_public_grpc_host_needs_a_token_too(host: str) -> None:
    with pytest.raises(ConfigError, match="grpc_host"):
        Settings(grpc_enabled=True, grpc_host=host)
    assert Settings(grpc_enabled=True, grpc_host=host, api_token="t").grpc_host == host
    assert Settings(grpc_host=host).grpc_host == host  # not served: not checked


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_loopback_hosts_need_no_token(host: str) -> None:
    assert Settings(http_host=host).http_host == host


def test_command_queue_must_be_a_valid_name() -> None:
    with pytest.raises(ConfigError, match="command_queue"):
        Settings(command_queue="bad name")


def test_an_environment_variable_of_the_claim_protocol_is_refused_with_its_new_name() -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings(environ={"TRIGGERHOOK_CLAIM_LEASE_MS": "30000"})
    message = str(raised.value)
    assert "TRIGGERHOOK_CLAIM_LEASE_MS" in message
    assert "claim_lease_ms is now shard_lease_ms" in message


# -- late_policy (issue 14) ---------------------------------------------------------------


def test_late_policy_defaults_to_fire() -> None:
    assert Settings().late_policy == "fire"
    assert Settings().default_late_policy() is FIRE


@pytest.mark.parametrize(
    ("text", "policy"),
    [
        ("fire", FIRE),
        (" fire\n", FIRE),
        ("skip_after_ms=250", LatePolicy(LateKind.SKIP_AFTER, 250)),
        ("skip_after_ms = 250", LatePolicy(LateKind.SKIP_AFTER, 250)),
        ("  skip_after_ms  =  250  ", LatePolicy(LateKind.SKIP_AFTER, 250)),
        ("skip_after_ms=0", LatePolicy(LateKind.SKIP_AFTER, 0)),
        ("skip_after_ms=0250", LatePolicy(LateKind.SKIP_AFTER, 250)),
        ("skip_after_ms=999999999999999", LatePolicy(LateKind.SKIP_AFTER, 999_999_999_999_999)),
    ],
)
def test_late_policy_values(text: str, policy: LatePolicy, tmp_path: Path) -> None:
    assert Settings(late_policy=text).default_late_policy() == policy
    from_env = load_settings(environ={"TRIGGERHOOK_LATE_POLICY": text})
    assert from_env.default_late_policy() == policy
    path = write_toml(tmp_path, f"late_policy = {json.dumps(text)}\n")  # a TOML basic string
    assert load_settings(path, environ={}).default_late_policy() == policy
    assert (
        load_settings(environ={}, overrides={"late_policy": text}).default_late_policy() == policy
    )


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "Fire",
        "never",
        "skip",
        "skip_after_ms",
        "skip_after_ms=",
        "skip_after_ms=-1",  # negative
        "skip_after_ms=+1",
        "skip_after_ms=1234567890123456",  # 16 digits
        "skip_after_ms=1.5",
        "skip_after_ms=1e3",
        "skip_after_ms=0x10",
        "skip_after_ms=1_000",
        "skip_after_ms=1 000",
        "skip_after_ms=\u00b2",  # a digit to Unicode, not a number
        "skip_after_ms=\u0663",  # ARABIC-INDIC DIGIT THREE
        "skip_after_ms=\uff11",  # FULLWIDTH DIGIT ONE
        "skip_after_ms=1=2",
        "skip_before_ms=5",  # unknown name
        "deadline_ms=5",
        "deadline=5",
        "fire=1",
        "SKIP_AFTER_MS=5",
        "skip_after_ms:5",
    ],
)
def test_bad_late_policies_are_refused_naming_the_setting(text: str) -> None:
    with pytest.raises(ConfigError) as info:
        Settings(late_policy=text)
    assert str(info.value).startswith("late_policy:"), info.value
    with pytest.raises(ConfigError) as env:
        load_settings(environ={"TRIGGERHOOK_LATE_POLICY": text})
    assert "late_policy" in str(env.value)
    with pytest.raises(ConfigError, match="late_policy"):
        load_settings(environ={}, overrides={"late_policy": text})


def test_late_policy_must_be_a_string(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="late_policy"):
        load_settings(write_toml(tmp_path, "late_policy = 250\n"), environ={})
    with pytest.raises(ConfigError, match="--late-policy"):
        load_settings(environ={}, overrides={"late_policy": 250})


# -- secrets from files: TRIGGERHOOK_<KEY>_FILE ------------------------------------------------

SECRET_FIELDS = [name for name in FIELDS if is_secret(name)]


def test_the_secret_rule_covers_every_credential_setting() -> None:
    """By name, so that a setting added later is covered without a list to edit."""
    assert {"database_url", "amqp_url", "metrics_url", "api_token", "metrics_password"} <= set(
        SECRET_FIELDS
    )
    assert {"metrics_token", "metrics_scrape_token"} <= set(SECRET_FIELDS)
    assert not is_secret("exchange") and not is_secret("metrics_username")
    assert not is_secret("metrics_require_token")  # a switch, not a credential
    for name in FIELDS:
        text = FIELDS[name].type in ("str", str)
        assert is_secret(name) == (text and name.endswith(("_url", "_token", "_password"))), name
        # A setting named <secret>_file would have the same variable as the secret's file.
        assert not (name.endswith("_file") and is_secret(name[: -len("_file")])), name


def secret_value(name: str) -> str:
    return "mysql://app:s3cret@db:3306/th" if name == "database_url" else f"{name}://u:s3cret@h/"


@pytest.mark.parametrize("name", SECRET_FIELDS)
def test_every_secret_reads_from_its_file(tmp_path: Path, name: str) -> None:
    path = tmp_path / "secret"
    value = secret_value(name) if name.endswith("_url") else "s3cret token"
    path.write_text(value + "\n", encoding="utf-8")  # as `echo` writes it: stripped
    variable = f"{env_var(name)}{FILE_SUFFIX}"
    settings, sources = load_with_sources(environ={variable: str(path)})
    assert getattr(settings, name) == value
    assert sources[name] == f"env file {variable}={path}"


def test_a_secret_file_keeps_inner_newlines_and_drops_only_trailing_ones(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_bytes(b"a b\nc\r\n\n")
    env = {"TRIGGERHOOK_API_TOKEN_FILE": str(path)}
    assert load_settings(environ=env).api_token == "a b\nc"


def test_a_flag_beats_a_secret_file_and_a_file_beats_the_toml(tmp_path: Path) -> None:
    secret = tmp_path / "token"
    secret.write_text("from-file", encoding="utf-8")
    toml = write_toml(tmp_path, 'api_token = "from-toml"\n')
    env = {"TRIGGERHOOK_API_TOKEN_FILE": str(secret)}
    assert load_settings(toml, environ=env).api_token == "from-file"
    assert load_settings(toml, environ=env, overrides={"api_token": "flag"}).api_token == "flag"


def test_a_secret_and_its_file_both_set_is_an_error_naming_both(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("x", encoding="utf-8")
    env = {"TRIGGERHOOK_API_TOKEN": "y", "TRIGGERHOOK_API_TOKEN_FILE": str(path)}
    with pytest.raises(ConfigError) as caught:
        load_settings(environ=env)
    assert "TRIGGERHOOK_API_TOKEN and TRIGGERHOOK_API_TOKEN_FILE" in str(caught.value)


@pytest.mark.parametrize("kind", ["missing", "directory", "not-utf8", "unreadable"])
def test_an_unreadable_secret_file_names_the_variable_and_path(tmp_path: Path, kind: str) -> None:
    path = {"missing": tmp_path / "nope", "directory": tmp_path}.get(kind, tmp_path / "f")
    if kind == "not-utf8":
        path.write_bytes(b"caf\xe9")
    if kind == "unreadable":
        if os.geteuid() == 0:
            pytest.skip("root reads any file")
        path.write_text("x", encoding="utf-8")
        path.chmod(0)
    with pytest.raises(ConfigError) as caught:
        load_settings(environ={"TRIGGERHOOK_AMQP_URL_FILE": str(path)})
    assert "TRIGGERHOOK_AMQP_URL_FILE" in str(caught.value)
    assert str(path) in str(caught.value)


def test_a_file_variable_of_a_setting_that_is_no_secret_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "exchange"
    path.write_text("x", encoding="utf-8")
    with pytest.raises(ConfigError, match="TRIGGERHOOK_EXCHANGE_FILE: only secret settings"):
        load_settings(environ={"TRIGGERHOOK_EXCHANGE_FILE": str(path)})


def test_a_secret_file_value_is_checked_like_the_variable(tmp_path: Path) -> None:
    """Its value goes through the same rules, named by the file variable."""
    path = tmp_path / "url"
    path.write_text("amqp://g:g@h:notaport/%2F\n", encoding="utf-8")
    settings = load_settings(environ={"TRIGGERHOOK_AMQP_URL_FILE": str(path)})
    assert settings.amqp_url == "amqp://g:g@h:notaport/%2F"  # checked where it is parsed


# -- where each value came from: `config show` -------------------------------------------------


def test_sources_name_default_file_env_and_flag(tmp_path: Path) -> None:
    toml = write_toml(tmp_path, 'exchange = "from.file"\narm_batch_size = 7\n')
    env = {"TRIGGERHOOK_ARM_BATCH_SIZE": "8", "TRIGGERHOOK_LOG_LEVEL": "DEBUG"}
    settings, sources = load_with_sources(toml, env, {"log_level": "ERROR", "http_port": None})
    assert set(sources) == set(FIELDS)
    assert sources["exchange"] == f"file {toml}"
    assert sources["arm_batch_size"] == "env TRIGGERHOOK_ARM_BATCH_SIZE"
    assert sources["log_level"] == "flag --log-level"
    assert sources["http_port"] == "default"
    assert (settings.exchange, settings.arm_batch_size, settings.log_level) == (
        "from.file",
        8,
        "ERROR",
    )


def test_render_effective_is_toml_with_secrets_masked_and_sources(tmp_path: Path) -> None:
    secret = tmp_path / "token"
    secret.write_text("tok-s3cret\n", encoding="utf-8")
    env = {
        "TRIGGERHOOK_API_TOKEN_FILE": str(secret),
        "TRIGGERHOOK_AMQP_URL": "amqp://app:url-s3cret@mq:5672/%2F",
        "TRIGGERHOOK_METRICS_PASSWORD": "pw-s3cret",
        "TRIGGERHOOK_METRICS_ORG": 'odd"\\org\t\x7fü',
    }
    settings, sources = load_with_sources(environ=env, overrides={"http_port": 9000})
    text = render_effective(settings, sources)
    assert "s3cret" not in text
    data = tomllib.loads(text)
    assert set(data) == set(FIELDS)
    assert data["api_token"] == "***" and data["metrics_password"] == "***"
    assert data["amqp_url"] == "amqp://app:***@mq:5672/%2F"  # where it points still shows
    assert data["metrics_token"] == ""  # an empty secret shows that it is empty
    assert data["metrics_org"] == 'odd"\\org\t\x7fü'  # escaped, read back as it was
    for name in FIELDS:
        assert data[name] == shown(name, getattr(settings, name)), name
    lines = {line.split(" = ")[0]: line for line in text.splitlines() if " = " in line}
    assert lines["api_token"].endswith(f"# env file TRIGGERHOOK_API_TOKEN_FILE={secret}")
    assert lines["http_port"].endswith("# flag --http-port")
    assert lines["exchange"].endswith("# default")


# -- rate_limits, catch_up_rate (issue 32) ----------------------------------------------------


def test_rate_limits_are_read_in_order_from_any_source(tmp_path: Path) -> None:
    text = "billing.*=200/s, #=20000/s burst 500"
    expected = (RateLimit("billing.*", 200.0, 200), RateLimit("#", 20_000.0, 500))
    from_env = load_settings(environ={"TRIGGERHOOK_RATE_LIMITS": text})
    assert from_env.throttle_limits() == (expected, None)
    path = write_toml(tmp_path, f'rate_limits = "{text}"\ncatch_up_rate = "1000/s"\n')
    assert load_settings(path, environ={}).throttle_limits() == (
        expected,
        RateLimit("#", 1000.0, 1000),
    )
    assert Settings().throttle_limits() == ((), None)  # none by default


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("rate_limits", "billing.*", "rate_limits: 'billing.*': expected"),
        ("rate_limits", "a=1/s, a=2/s", "rate_limits.a: given twice"),
        ("rate_limits", "a b=1/s", "rate_limits.a b: the pattern"),
        ("catch_up_rate", "fast", 'catch_up_rate: must be "N/s"'),
    ],
)
def test_a_bad_rate_is_refused_naming_it(name: str, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings(environ={}, overrides={name: text})
    assert str(raised.value).startswith(message), str(raised.value)


# -- the dedup window: dedup_window_ms (int) and dedup_sweep_s (a float setting) ------------------

DAY_MS = 86_400_000


def test_the_dedup_settings_default_to_no_window_and_a_minute_sweep() -> None:
    settings = Settings()
    assert (settings.dedup_window_ms, settings.dedup_sweep_s) == (0, 60.0)
    assert type(settings.dedup_sweep_s) is float


def test_the_dedup_settings_from_every_source(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "dedup_window_ms = 86400000\ndedup_sweep_s = 30\n")
    from_file = load_settings(path, environ={})
    assert (from_file.dedup_window_ms, from_file.dedup_sweep_s) == (DAY_MS, 30.0)
    assert type(from_file.dedup_sweep_s) is float  # TOML's 30 is an integer: taken as 30.0
    env = {"TRIGGERHOOK_DEDUP_WINDOW_MS": "1500", "TRIGGERHOOK_DEDUP_SWEEP_S": " 0.25\n"}
    from_env = load_settings(path, environ=env)
    assert (from_env.dedup_window_ms, from_env.dedup_sweep_s) == (1500, 0.25)
    flags = {"dedup_window_ms": 0, "dedup_sweep_s": 2.5}
    assert load_settings(path, environ=env, overrides=flags).dedup_sweep_s == 2.5
    assert Settings(dedup_sweep_s=5).dedup_sweep_s == 5.0  # an int, built directly
    assert type(Settings(dedup_sweep_s=5).dedup_sweep_s) is float
    # The most a task may carry (30 days) is the most the setting takes.
    assert Settings(dedup_window_ms=30 * DAY_MS).dedup_window_ms == 30 * DAY_MS


@pytest.mark.parametrize(
    ("variable", "raw", "message"),
    [
        ("TRIGGERHOOK_DEDUP_WINDOW_MS", "-1", "must be at least 0"),
        ("TRIGGERHOOK_DEDUP_WINDOW_MS", str(30 * DAY_MS + 1), "must be at most 2592000000"),
        ("TRIGGERHOOK_DEDUP_WINDOW_MS", "1d", "expected an integer"),
        ("TRIGGERHOOK_DEDUP_SWEEP_S", "0", "must be more than 0"),
        ("TRIGGERHOOK_DEDUP_SWEEP_S", "-5", "must be more than 0"),
        ("TRIGGERHOOK_DEDUP_SWEEP_S", "nan", "expected a finite number"),
        ("TRIGGERHOOK_DEDUP_SWEEP_S", "inf", "expected a finite number"),
        ("TRIGGERHOOK_DEDUP_SWEEP_S", "1e400", "expected a finite number"),
        ("TRIGGERHOOK_DEDUP_SWEEP_S", "soon", "expected a number"),
        ("TRIGGERHOOK_DEDUP_SWEEP_S", "", "expected a number"),
    ],
)
def test_a_bad_dedup_setting_from_the_environment_names_the_variable(
    variable: str, raw: str, message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(environ={variable: raw})
    assert str(info.value).startswith(f"{variable}: {message}"), str(info.value)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("dedup_sweep_s = 0.0", "dedup_sweep_s: must be more than 0"),
        ('dedup_sweep_s = "60"', "dedup_sweep_s: expected a number"),
        ("dedup_sweep_s = true", "dedup_sweep_s: expected a number"),
        ("dedup_sweep_s = nan", "dedup_sweep_s: expected a finite number"),
        ("dedup_window_ms = 1.5", "dedup_window_ms: expected an integer"),
        ("dedup_window_ms = -1", "dedup_window_ms: must be at least 0"),
    ],
)
def test_a_bad_dedup_setting_in_the_file_names_the_key(
    tmp_path: Path, line: str, message: str
) -> None:
    path = write_toml(tmp_path, line + "\n")
    with pytest.raises(ConfigError) as info:
        load_settings(path, environ={})
    assert str(info.value).startswith(f"{path}: {message}"), str(info.value)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"dedup_sweep_s": 0}, "--dedup-sweep-s: must be more than 0"),
        ({"dedup_sweep_s": "1"}, "--dedup-sweep-s: expected a number"),
        ({"dedup_window_ms": 30 * DAY_MS + 1}, "--dedup-window-ms: must be at most"),
    ],
)
def test_a_bad_dedup_flag_names_the_flag(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(environ={}, overrides=overrides)
    assert str(info.value).startswith(message), str(info.value)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0.0, "dedup_sweep_s: must be more than 0"),
        (float("inf"), "dedup_sweep_s: expected a finite number"),
        (True, "dedup_sweep_s: expected a number"),
    ],
)
def test_a_bad_sweep_built_directly_names_the_key(value: object, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        Settings(dedup_sweep_s=value)  # type: ignore[arg-type]
    assert str(info.value).startswith(message), str(info.value)


def test_the_sweep_is_shown_and_flagged_as_a_float(tmp_path: Path) -> None:
    assert "\ndedup_sweep_s = 60.0\n" in render_toml()
    assert "| `dedup_sweep_s` | `TRIGGERHOOK_DEDUP_SWEEP_S` | `--dedup-sweep-s` | float |" in (
        render_reference()
    )
    assert "More than 0." in render_reference()
    settings, sources = load_with_sources(environ={"TRIGGERHOOK_DEDUP_SWEEP_S": "0.5"})
    assert "dedup_sweep_s = 0.5  # env TRIGGERHOOK_DEDUP_SWEEP_S" in render_effective(
        settings, sources
    )
    # What render_toml writes, TOML reads back as the same float.
    assert tomllib.loads(render_toml())["dedup_sweep_s"] == 60.0
