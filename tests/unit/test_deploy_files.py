"""The deployment files' structure: the Dockerfile's stages, user, health
check and entrypoint; the build context; compose.yaml's health checks,
dependencies, volumes and secrets; the systemd unit's service settings and
sandbox. tests/integration/test_deploy.py runs the real tools on them."""

from __future__ import annotations

import re
import shlex
import tomllib
from typing import Any

import pytest
import yaml
from support.deploy import (
    COMPOSE_FILE,
    ENV_EXAMPLE,
    INSTALLED_VENV,
    REPO,
    UNIT_ENV_EXAMPLE,
    dockerignored,
    read_dockerfile,
    read_env_file,
    read_unit,
    systemd_seconds,
    unit_value,
    unit_values,
)

from triggerhook.cli import EXIT_USAGE
from triggerhook.settings import FIELDS, Settings, load_settings

SECRET_NAME = re.compile(r"PASS|TOKEN|SECRET", re.IGNORECASE)
# ${VAR}, ${VAR:?message}, ${VAR:-default}; not $${VAR} (left to the container).
VARIABLE = re.compile(r"(?<!\$)\$\{(\w+)(?:(:?[-?])([^}]*))?\}")
# The longest graceful stop (deploy/triggerhook.service explains the sum).
STOP_BUDGET_S = Settings().shutdown_timeout_s + 30


# -- Dockerfile --------------------------------------------------------------------


def test_dockerfile_builds_in_stages_from_one_pinned_base() -> None:
    dockerfile = read_dockerfile()
    assert [s.name for s in dockerfile.stages] == ["build", "runtime"]
    bases = {stage.base for stage in dockerfile.stages}
    # One base for both: the venv built in one stage runs in the other.
    assert len(bases) == 1, bases
    assert re.fullmatch(r"python:3\.11\.\d+-slim-\w+", bases.pop())


def test_runtime_stage_runs_as_the_unprivileged_user_it_creates() -> None:
    final = read_dockerfile().final
    apt, useradd = final.runs()  # the client library mysqlclient needs, then the user
    assert apt.startswith("apt-get update") and "libmariadb3" in apt
    uid = re.search(r"--uid (\d+)", useradd)
    assert uid and "--system" in useradd and "--shell /usr/sbin/nologin" in useradd
    user = final.one("USER").text
    assert user == f"{uid[1]}:{uid[1]}" and int(uid[1]) != 0  # numeric: runAsNonRoot can tell
    keywords = [i.keyword for i in final.instructions]
    last = {k: i for i, k in enumerate(keywords)}
    assert keywords.index("USER") > max(last["RUN"], last["COPY"])


def test_runtime_stage_holds_only_the_venv_and_the_config() -> None:
    dockerfile = read_dockerfile()
    build, final = dockerfile.stage("build"), dockerfile.final
    assert build.env()["VIRTUAL_ENV"] == INSTALLED_VENV
    copies = final.copies()
    from_build = [c for c in copies if c.from_stage == "build"]
    assert [(c.sources, c.dest) for c in from_build] == [([INSTALLED_VENV], INSTALLED_VENV)]
    local = [c for c in copies if c.from_stage is None]
    assert [(c.sources, c.dest) for c in local] == [
        (["config/triggerhook.toml"], "/etc/triggerhook/triggerhook.toml")
    ]
    # Runtime dependencies only, pinned; the venv without pip.
    build_tools, wheel, venv = build.runs()
    assert "libmariadb-dev" in build_tools  # mysqlclient compiles against it
    assert "pip wheel" in wheel and "-c constraints.txt" in wheel and "[dev]" not in wheel
    assert "[mysqlclient]" in wheel and "mysqlclient-" in venv
    assert "--without-pip" in venv and "--no-index" in venv
    # Of Debian's packages, the runtime gets the client library only, without apt's lists.
    apt = [run for run in final.runs() if "apt-get" in run]
    assert len(apt) == 1 and "install -y --no-install-recommends libmariadb3 &&" in apt[0]
    assert apt[0].endswith("rm -rf /var/lib/apt/lists/*")
    # Nothing installed at run time; the base's pip itself is removed (tests/container
    # checks the built image).
    assert not any(re.search(r"pip (install|wheel)", run) for run in final.runs())
    assert "pip uninstall --yes" in final.runs()[1]


def test_image_settings_entrypoint_healthcheck_and_stop_signal() -> None:
    dockerfile = read_dockerfile()
    final = dockerfile.final
    env = final.env()
    assert env["TRIGGERHOOK_CONFIG"] == "/etc/triggerhook/triggerhook.toml"
    assert env["PATH"].startswith(f"{INSTALLED_VENV}/bin:")
    assert set(env) - {"VIRTUAL_ENV", "PATH", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED"} <= {
        f"TRIGGERHOOK_{name.upper()}" for name in FIELDS
    } | {"TRIGGERHOOK_CONFIG"}
    assert final.exec_form("ENTRYPOINT") == ["triggerhook"]
    assert final.exec_form("CMD") == ["run"]
    assert final.one("STOPSIGNAL").text == "SIGTERM"
    options, command = dockerfile.healthcheck()
    assert command[:2] == ["python", "-c"] and "/healthz" in command[2]
    assert {"interval", "timeout", "start-period", "retries"} <= set(options)


def test_image_carries_the_oci_labels_of_this_release() -> None:
    final = read_dockerfile().final
    labels = dict(word.split("=", 1) for word in shlex.split(final.one("LABEL").text))
    args = dict(arg.text.split("=", 1) for arg in final.all("ARG"))
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    oci = "org.opencontainers.image."
    assert labels[oci + "title"] == project["name"]
    assert labels[oci + "licenses"] == project["license"]  # an SPDX expression
    assert labels[oci + "version"] == "${VERSION}" and args["VERSION"] == project["version"]
    assert labels[oci + "revision"] == "${REVISION}" and "REVISION" in args
    assert labels[oci + "description"]


def test_dockerfile_carries_no_secret() -> None:
    dockerfile = read_dockerfile()
    values = dict(dockerfile.args)
    for stage in dockerfile.stages:
        values.update(stage.env())
        for arg in stage.all("ARG"):
            key, _, default = arg.text.partition("=")
            values[key] = default
    for key, value in values.items():
        assert not (SECRET_NAME.search(key) and value), f"{key} has a value in the Dockerfile"
        assert not re.search(r"://[^/@\s]*:[^/@\s]*@", value), f"{key} holds credentials"


def test_build_context_is_what_the_dockerfile_copies() -> None:
    dockerfile = read_dockerfile()
    sources = [
        s
        for stage in dockerfile.stages
        for c in stage.copies()
        if not c.from_stage
        for s in c.sources
    ]
    assert sources, "no COPY from the context"
    for source in sources:
        assert (REPO / source).exists(), source
        assert not dockerignored(source), f"{source} is copied but .dockerignore leaves it out"
    assert not dockerignored("triggerhook/service.py")
    for private in (
        ".env",
        ".git/HEAD",
        ".venv/bin/python",
        "tests/conftest.py",
        "benchmarks/http.py",
    ):
        assert dockerignored(private), f".dockerignore lets {private} into the build context"
    assert dockerignored("triggerhook/__pycache__/app.cpython-311.pyc")


# -- compose.yaml ------------------------------------------------------------------


def _compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(data, dict)
    return data


def _services() -> dict[str, dict[str, Any]]:
    services = _compose()["services"]
    assert set(services) == {"mysql", "rabbitmq", "influxdb", "grafana", "triggerhook"}
    return services  # type: ignore[no-any-return]


def test_compose_services_are_health_checked_and_wait_for_each_other() -> None:
    services = _services()
    for name, service in services.items():
        if name == "triggerhook":
            assert service["build"] == "."  # its health check: the image's HEALTHCHECK
            assert read_dockerfile(REPO / "Dockerfile").final.all("HEALTHCHECK")
        else:
            assert service["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL"), name
            assert re.fullmatch(r"[\w./-]+:\d[\w.-]*", service["image"]), f"{name}: pin a version"
    expected = {
        "triggerhook": {"mysql", "rabbitmq", "influxdb"},
        "grafana": {"influxdb"},
    }
    for name, service in services.items():
        depends = service.get("depends_on", {})
        assert set(depends) == expected.get(name, set()), name
        for dependency, how in depends.items():
            assert how == {"condition": "service_healthy"}, f"{name} -> {dependency}"


def test_compose_keeps_data_in_named_volumes() -> None:
    compose = _compose()
    declared = set(compose["volumes"])
    used: set[str] = set()
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            source, _target, *mode = volume.split(":")
            if source.startswith("./"):  # only Grafana's provisioning, read-only
                assert name == "grafana" and mode == ["ro"] and (REPO / source).is_dir(), volume
            else:
                assert source in declared, f"{name}: {source} is not a named volume"
                used.add(source)
    assert used == declared


def test_compose_secrets_come_from_env_example_only() -> None:
    text = COMPOSE_FILE.read_text()
    example = read_env_file(ENV_EXAMPLE)
    referenced = {m[1] for m in VARIABLE.finditer(text)}
    assert referenced <= set(example), f"not in .env.example: {referenced - set(example)}"
    secrets = {name for name in example if SECRET_NAME.search(name)}
    assert secrets and all(example[name] == "" for name in secrets), "no default secrets"
    for match in VARIABLE.finditer(text):
        if match[1] in secrets:  # required, never defaulted
            assert match[2] == ":?", f"{match[0]}: use ${{{match[1]}:?...}}"
    for name, service in _services().items():
        for key, raw in service.get("environment", {}).items():
            value = str(raw)
            if SECRET_NAME.search(key):
                assert VARIABLE.fullmatch(value), f"{name}: {key} is a literal"
            for password in re.findall(r"://[^:/@\s]+:([^@\s]+)@", value):
                assert VARIABLE.fullmatch(password), f"{name}: {key} holds a literal password"
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name}: {port} is published beyond loopback"


def _variable(value: str) -> str:
    match = VARIABLE.search(value)
    assert match, value
    return match[1]


def test_compose_services_agree_on_names_and_credentials() -> None:
    services = _services()
    mysql = services["mysql"]["environment"]
    rabbit = services["rabbitmq"]["environment"]
    influx = services["influxdb"]["environment"]
    grafana = services["grafana"]["environment"]
    hook = services["triggerhook"]["environment"]
    assert set(hook) <= {f"TRIGGERHOOK_{name.upper()}" for name in FIELDS}
    database = re.fullmatch(
        r"mysql\+mysqldb://(\w+):(\$\{[^}]+\})@mysql:3306/(\w+)", hook["TRIGGERHOOK_DATABASE_URL"]
    )
    assert database, hook["TRIGGERHOOK_DATABASE_URL"]
    assert (database[1], database[3]) == (mysql["MYSQL_USER"], mysql["MYSQL_DATABASE"])
    assert _variable(database[2]) == _variable(mysql["MYSQL_PASSWORD"])
    amqp = re.fullmatch(
        r"amqp://(\w+):(\$\{[^}]+\})@rabbitmq:5672/%2F", hook["TRIGGERHOOK_AMQP_URL"]
    )
    assert amqp and amqp[1] == rabbit["RABBITMQ_DEFAULT_USER"]
    assert _variable(amqp[2]) == _variable(rabbit["RABBITMQ_DEFAULT_PASS"])
    assert hook["TRIGGERHOOK_METRICS_URL"] == grafana["INFLUXDB_URL"] == "http://influxdb:8086"
    assert (
        hook["TRIGGERHOOK_METRICS_DATABASE"]
        == grafana["INFLUXDB_DATABASE"]
        == influx["INFLUXDB_DB"]
    )
    assert hook["TRIGGERHOOK_METRICS_USERNAME"] == influx["INFLUXDB_WRITE_USER"]
    assert _variable(hook["TRIGGERHOOK_METRICS_PASSWORD"]) == _variable(
        influx["INFLUXDB_WRITE_USER_PASSWORD"]
    )
    assert grafana["INFLUXDB_USER"] == influx["INFLUXDB_READ_USER"]
    assert _variable(grafana["INFLUXDB_PASSWORD"]) == _variable(
        influx["INFLUXDB_READ_USER_PASSWORD"]
    )


def test_compose_grafana_gets_what_its_provisioning_reads() -> None:
    grafana = _services()["grafana"]
    provisioning = REPO / "grafana" / "provisioning"
    wanted = {
        m[1] for path in provisioning.rglob("*.yaml") for m in VARIABLE.finditer(path.read_text())
    }
    assert wanted and wanted <= set(grafana["environment"]), wanted
    mounts = dict(v.split(":")[:2] for v in grafana["volumes"])
    assert mounts["./grafana/provisioning"] == "/etc/grafana/provisioning"
    provider = yaml.safe_load((provisioning / "dashboards" / "triggerhook.yaml").read_text())
    assert mounts["./grafana/dashboards"] == provider["providers"][0]["options"]["path"]


def test_compose_daemon_stops_gracefully_and_runs_confined() -> None:
    hook = _services()["triggerhook"]
    assert hook["command"] == ["run", "--init-db"]
    assert hook["init"] is True
    assert systemd_seconds(hook["stop_grace_period"]) >= STOP_BUDGET_S
    assert hook["read_only"] is True and hook["cap_drop"] == ["ALL"]
    assert "no-new-privileges:true" in hook["security_opt"]


# -- systemd -------------------------------------------------------------------------


def test_unit_is_a_notify_service_with_watchdog_and_restart() -> None:
    unit = read_unit()
    assert unit_value(unit, "Service", "Type") == "notify"
    assert unit_value(unit, "Service", "NotifyAccess") == "main"
    # The daemon pings at half WatchdogSec, and only while every engine thread
    # beat within max(half, 2 s): leave room for a few missed beats.
    assert systemd_seconds(unit_value(unit, "Service", "WatchdogSec")) >= 10
    assert unit_value(unit, "Service", "Restart") == "on-failure"
    assert unit_value(unit, "Service", "RestartPreventExitStatus") == str(EXIT_USAGE)
    assert unit_value(unit, "Service", "KillSignal") == "SIGTERM"
    assert systemd_seconds(unit_value(unit, "Service", "TimeoutStopSec")) >= STOP_BUDGET_S
    assert unit_value(unit, "Install", "WantedBy") == "multi-user.target"


def test_unit_reads_the_config_and_the_environment_file() -> None:
    unit = read_unit()
    assert unit_value(unit, "Service", "ExecStart") == (
        f"{INSTALLED_VENV}/bin/triggerhook --config /etc/triggerhook/triggerhook.toml run"
    )
    assert unit_value(unit, "Service", "EnvironmentFile") == "-/etc/triggerhook/triggerhook.env"
    for assignment in unit_values(unit, "Service", "Environment"):
        key = assignment.partition("=")[0]
        assert (
            key == "PYTHONDONTWRITEBYTECODE" or key.removeprefix("TRIGGERHOOK_").lower() in FIELDS
        )


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("DynamicUser", "yes"),
        ("NoNewPrivileges", "yes"),
        ("CapabilityBoundingSet", ""),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("PrivateDevices", "yes"),
        ("ProtectKernelTunables", "yes"),
        ("ProtectKernelModules", "yes"),
        ("ProtectKernelLogs", "yes"),
        ("ProtectControlGroups", "yes"),
        ("RestrictAddressFamilies", "AF_INET AF_INET6 AF_UNIX"),
        ("RestrictNamespaces", "yes"),
        ("MemoryDenyWriteExecute", "yes"),
        ("LockPersonality", "yes"),
        ("SystemCallArchitectures", "native"),
    ],
)
def test_unit_sandbox_setting(key: str, value: str) -> None:
    assert unit_value(read_unit(), "Service", key) == value


def test_unit_system_call_filter_allows_services_only() -> None:
    filters = unit_values(read_unit(), "Service", "SystemCallFilter")
    assert filters == ["@system-service", "~@privileged @resources"]


def test_unit_env_example_holds_valid_settings() -> None:
    values = read_env_file(UNIT_ENV_EXAMPLE)
    assert {"TRIGGERHOOK_DATABASE_URL", "TRIGGERHOOK_AMQP_URL"} <= set(values)
    settings = load_settings(REPO / "config" / "triggerhook.toml", values)
    assert settings.database_url == values["TRIGGERHOOK_DATABASE_URL"]
    # Secrets stay commented out or placeholders: nothing real ships.
    assert "CHANGE-ME" in settings.database_url and "CHANGE-ME" in settings.amqp_url
