"""The documents' code blocks run (issue 15, item 8: docs that run).

Every code block of README.md, docs/*.md and client/README.md is read at test
time (support/docblocks.py), so an edited document is tested as it now is.
Each Python block and each shell command either runs here, in document order,
against the real MariaDB and RabbitMQ, or is listed in :data:`NOT_RUN` with why
it cannot run on this machine and which test covers it instead; the first two
tests check that of every block, statically. Data blocks (JSON, TOML, YAML,
output, diagrams) are not run.

One test per document, so later blocks see what earlier ones did (schedule,
then get): its commands share one shell environment and working directory
(support/docrun.py), its Python blocks one interpreter. A document runs in a
scratch directory of links to the repository's files (what it writes, such as
scripts/compose-env's .env, stays there), with ``.venv/bin`` first on PATH
(behind stand-ins for pip, which must not touch that venv), ``HOME`` a scratch
home whose ``.my.cnf`` names the test's MariaDB account, and the daemon's
settings as ``TRIGGERHOOK_*`` variables: a fresh database, the local broker
under a unique exchange and queues, and an HTTP port of its own. The daemon
starts when the first step needs it (:class:`Needs`), with the API token the
document's environment holds then (restarted when that changes); a
``triggerhook dev`` the document starts serves its port instead until a step
needs the daemon.

A command runs as shown except as the tables say: :data:`SUBSTITUTIONS`
(addresses and placeholders become the test's), :data:`REWRITES`,
:data:`BEFORE` (what the prose asks for first), :data:`ENVIRONMENT` (what a
document takes for granted, such as the daemon's token). Each command's exit status is
asserted (0 unless :data:`EXIT_STATUS` says otherwise); ``curl`` gets
``--fail-with-body``, so an HTTP error fails it. Long-running commands
(``triggerhook run``, ``dev``, ``tail`` without ``--count``) must become ready
within a deadline and stop with status 0 on SIGTERM or Ctrl-C; where a
document says an event appears on ``triggerhook dev``'s output,
:data:`PRINTED` checks that it does.
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import signal
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from support.amqp import AmqpNames, delete_topology
from support.daemon import DaemonGroup, base_env, closed_port, settings_env
from support.docblocks import REPO, Block, Kind, commands, documents, extract, program
from support.docrun import (
    DocDaemon,
    LongRunning,
    Needs,
    Session,
    Shell,
    Step,
    StepKind,
    readyz,
    tailing,
)
from support.mysql import temporary_database
from support.names import unique_name

_VENV_BIN = str(Path(sys.executable).parent)  # first on the documents' PATH

_DOCKER = (
    "no Docker engine on this machine: tests/integration/test_deploy.py validates compose.yaml "
    "with `docker compose config`, lints the Dockerfile and runs its build-stage RUN lines and "
    "its entrypoint against the test services"
)
_SYSTEM_WIDE = (
    "installs system-wide as root (/opt, /etc, a systemd unit) and needs systemd as PID 1: "
    "tests/integration/test_deploy.py and test_systemd.py verify the unit and run its ExecStart "
    "with its environment file"
)
_REINSTALL = (
    "would reinstall into the venv the tests run from (scripts/_venv.sh installs ./client "
    "editable); tests/integration/test_client_install.py pip-installs ./client into a fresh venv"
)
_REINSTALL_DEV = (
    "would reinstall the daemon and the client into the venv the tests run from (scripts/_venv.sh "
    "installs both editable); tests/integration/test_dev_mode.py pip-installs ./client and . "
    "into a fresh venv and runs its `triggerhook dev`"
)

# (b) What is not run here: (document, the start of the command, or the first
# line of the Python block) -> why, and what tests it instead.
NOT_RUN: dict[tuple[str, str], str] = {
    ("README.md", "scripts/run"): "starts local services and a daemon in the foreground until "
    "Ctrl-C; its parts are scripts/_services.sh (used by every test run) and `triggerhook run`",
    ("README.md", "scripts/test"): "the whole test suite, this test included",
    ("README.md", "scripts/sim"): "the simulator's long runs (minutes each); "
    "tests/sim/test_sim.py runs the same runs CI-sized, over each store",
    ("docs/operations.md", "scripts/cluster"): "starts three MariaDB and three RabbitMQ "
    "nodes, HAProxy and three daemons (and kills some); tests/cluster/test_cluster.py runs "
    "`up`, `kill` and `down`",
    ("README.md", "scripts/compose-env && docker compose"): _DOCKER,
    ("README.md", "python -m benchmarks"): "a full benchmark run against placeholder servers; "
    "tests/integration/test_benchmarks_quick.py runs `--quick` on the test services",
    ("docs/deployment.md", "docker build"): _DOCKER,
    ("docs/deployment.md", "docker run"): _DOCKER,
    ("docs/deployment.md", "docker compose up"): _DOCKER,
    ("docs/deployment.md", "docker compose ps"): _DOCKER,
    ("docs/deployment.md", "python3 -m venv /opt"): _SYSTEM_WIDE,
    ("docs/deployment.md", "/opt/triggerhook/venv/bin/pip"): _SYSTEM_WIDE,
    ("docs/deployment.md", "install "): _SYSTEM_WIDE,
    ("docs/deployment.md", "editor "): "interactive: opens an editor on the installed files",
    ("docs/deployment.md", "systemd-run "): _SYSTEM_WIDE,
    ("docs/deployment.md", "systemctl "): _SYSTEM_WIDE,
    ("docs/deployment.md", "journalctl "): _SYSTEM_WIDE,
    ("docs/grafana.md", "docker run"): "no Docker engine on this machine: "
    "tests/integration/test_grafana.py runs Grafana with these provisioning files",
    ("docs/grafana.md", "sudo "): "installs into a Grafana package's directories as root; "
    "tests/integration/test_grafana.py provisions a real Grafana from the same files",
    ("docs/api.md", "channel.basic_publish("): "a fragment of a pika publisher (`channel`, "
    "`body` are the caller's; `user_id` needs a RabbitMQ user `billing`): "
    "tests/integration/test_command_auth.py sends both kinds of command",
    ("docs/api.md", "pip install"): _REINSTALL,
    ("docs/api.md", "curl -i -X POST localhost:8080/v1/tasks"): "the create of an id that "
    "fired within its dedup window: it needs the first one to have fired (a queue bound to "
    "its routing key, and a wait); tests/integration/test_dedup_window.py makes both creates "
    "against a daemon and checks the 409 already_fired answer and its fired_ms",
    ("docs/api.md", "grpcurl "): "grpcurl (a Go program) is not installed here, nor is "
    "the gRPC API enabled on the documents' daemon; tests/unit/test_grpc_api.py calls the "
    "same methods through a real gRPC client and lists them by reflection, as grpcurl does",
    ("client/README.md", "pip install"): _REINSTALL,
    ("client/README.md", "from triggerhook_client import NotFound"): "GrpcClient needs the "
    "gRPC API, which the documents' daemon does not enable; tests/unit/test_grpc_client.py "
    "calls every method of GrpcClient against a served gRPC API, its errors included",
    ("docs/dev.md", "pip install ./client ."): _REINSTALL_DEV,
}

# Commands whose documented exit status is not 0: (document, start) -> status.
EXIT_STATUS: dict[tuple[str, str], int] = {}

# Commands the prose asks for before a block, run before it: (document, start
# of the block or command) -> command.
BEFORE: dict[tuple[str, str], str] = {
    # "the database needs its schema first: `triggerhook db init`, once"
    ("README.md", "from triggerhook import Settings, TaskSpec, build"): (
        "triggerhook --database-url mysql://root:@127.0.0.1:3306/triggerhook db init"
    ),
}

# What the `triggerhook dev` serving the document prints within PRINTED_S (support/docrun.py)
# after a command, where the document says an event appears there.
PRINTED: dict[tuple[str, str], str] = {
    (
        "README.md",
        "curl -X POST localhost:8080/v1/tasks -H 'Content-Type: application/json' -d '{\"delay",
    ): '"payload": "hello"',
    ("docs/dev.md", "curl -X POST localhost:8080/v1/tasks"): '"id": "hello-1"',
    ("docs/dev.md", "triggerhook --url http://127.0.0.1:8080 schedule --id hello-2"): (
        '"id": "hello-2"'
    ),
}

# The documents' addresses and placeholders -> the test's values ($port: the
# document's daemon; $database, $exchange: its database's name, its exchange;
# $fresh_database_url: a database of its own, empty, as a library user's first
# run meets it). Applied in order.
SUBSTITUTIONS: list[tuple[str, str]] = [
    ("localhost:8080", "127.0.0.1:$port"),
    ("127.0.0.1:8080", "127.0.0.1:$port"),
    # The library example's engine publishes to the test's exchange, not the
    # broker's default one (which the test would leave behind).
    (
        'Settings(database_url="mysql://root:@127.0.0.1:3306/triggerhook")',
        'Settings(database_url="$fresh_database_url", exchange="$exchange", '
        'dead_letter_queue="$exchange.dead")',
    ),
    ("mysql://root:@127.0.0.1:3306/triggerhook", "$fresh_database_url"),
    # The file the systemd install puts there (docs/deployment.md) is this one.
    ("/etc/triggerhook/triggerhook.toml", "config/triggerhook.toml"),
    # The deployment's database is named triggerhook; here it is the test's.
    ("--single-transaction triggerhook ", "--single-transaction $database "),
]

# What a document takes for granted of the deployment, as environment variables.
ENVIRONMENT: dict[str, dict[str, str]] = {
    # Its examples pass token="s3cret": the daemon's token, so it is checked.
    "client/README.md": {"TRIGGERHOOK_API_TOKEN": "s3cret"},
}

# Commands run differently from how they are shown: (start -> replacement).
REWRITES: list[tuple[str, str]] = [
    # Both are installed in the tests' venv (editable), and must stay so: the
    # install is left out, the rest runs. (_REINSTALL_DEV: what tests it.)
    ("pip install ./client . && ", ""),
    # The compose service's command runs here, against the document's daemon.
    ("docker compose exec triggerhook ", ""),
    # An HTTP error answer fails the command (curl exits 22) and shows the body.
    ("curl ", "curl -sS --fail-with-body --max-time 30 "),
]

# triggerhook subcommands that go to the deployment (MariaDB, or the broker for
# tail) unless given --url, and the rest of them.
DEPLOYMENT_SUBCOMMANDS = frozenset(
    {"schedule", "reschedule", "cancel", "get", "list", "count", "tail"}
)
CLI_SUBCOMMANDS = DEPLOYMENT_SUBCOMMANDS | {"db", "config", "run", "dev", "status"}
# Shell built-ins the documents use (no program on PATH for them).
BUILTINS = frozenset({"set", "export", "cd", ".", "source", "echo", "printf", "unset"})
# Programs that would change the venv the tests run from: never run (the
# scratch PATH has stand-ins for them that fail).
GUARDED = ("pip", "pip3")


def _long_running(words: list[str]) -> LongRunning | None:
    sub = _subcommand(words)
    if sub == "run":
        return LongRunning(readyz, signal.SIGTERM, port="own")
    if sub == "dev":
        return LongRunning(readyz, signal.SIGINT, port="document")
    if sub == "tail" and "--count" not in words:
        return LongRunning(tailing, signal.SIGINT, port="")
    return None


def _words(command: str) -> list[str]:
    """The words of a command as the shell splits them (roughly, if unbalanced:
    bash then reports it when the command runs)."""
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()


def _subcommand(words: list[str]) -> str:
    if not words or words[0] != "triggerhook":
        return ""
    return next((word for word in words[1:] if word in CLI_SUBCOMMANDS), "")


def _listed(table: Mapping[tuple[str, str], object], doc: str, text: str) -> list[tuple[str, str]]:
    """The keys of ``table`` that name this document and a start of ``text``."""
    return [key for key in table if key[0] == doc and text.startswith(key[1])]


def _rewrite(text: str) -> str:
    for start, replacement in REWRITES:
        if text.startswith(start):
            text = replacement + text[len(start) :]
    return text


def _needs(code: str, words: list[str]) -> Needs:
    sub = _subcommand(words)
    through_http = "--url" in words or sub == "status"
    if (sub in DEPLOYMENT_SUBCOMMANDS and not through_http) or program(code) == "mysqldump":
        return Needs.DEPLOYMENT
    if through_http or "localhost:8080" in code or "127.0.0.1:8080" in code:
        return Needs.SERVER
    return Needs.NOTHING


def _shell_step(doc: str, line: int, source: str, code: str) -> Step:
    skipped = _listed(NOT_RUN, doc, source)
    if skipped:
        return Step(doc, line, StepKind.NOT_RUN, source, code, reason=NOT_RUN[skipped[0]])
    code = _rewrite(code)
    words = _words(_rewrite(source))
    status = [EXIT_STATUS[key] for key in _listed(EXIT_STATUS, doc, source)]
    printed = [PRINTED[key] for key in _listed(PRINTED, doc, source)]
    background = _long_running(words)
    return Step(
        doc,
        line,
        StepKind.BACKGROUND if background else StepKind.SHELL,
        source,
        code,
        exit_status=status[0] if status else 0,
        needs=_needs(code, words),
        background=background,
        printed=printed[0] if printed else "",
    )


def _python_step(doc: str, block: Block) -> Step:
    skipped = _listed(NOT_RUN, doc, block.first_line)
    return Step(
        doc,
        block.line,
        StepKind.NOT_RUN if skipped else StepKind.PYTHON,
        block.first_line,
        block.text,
        reason=NOT_RUN[skipped[0]] if skipped else "",
        needs=Needs.SERVER if ":8080" in block.text else Needs.NOTHING,
    )


@functools.cache
def plan(doc: str) -> tuple[Step, ...]:
    """The document's steps in order: each command and Python block, run or not."""
    steps: list[Step] = []
    for block in extract(REPO / doc):
        if block.kind is Kind.PYTHON:
            steps.extend(_before(doc, block.line, block.first_line))
            steps.append(_python_step(doc, block))
        elif block.kind is Kind.SHELL:
            for command in commands(block):
                steps.extend(_before(doc, command.line, command.summary))
                steps.append(_shell_step(doc, command.line, command.summary, command.text))
    return tuple(steps)


def _before(doc: str, line: int, source: str) -> list[Step]:
    return [
        _shell_step(doc, line, BEFORE[key], BEFORE[key]) for key in _listed(BEFORE, doc, source)
    ]


DOCS = [path.relative_to(REPO).as_posix() for path in documents()]
RUN_DOCS = [doc for doc in DOCS if any(s.kind is not StepKind.NOT_RUN for s in plan(doc))]


# -- the meta-tests: every command is run or listed ----------------------------------------


def _unrunnable(step: Step, path: str) -> str | None:
    """Why a step the test means to run could not run here, or None."""
    if step.kind is StepKind.PYTHON:
        try:
            compile(step.code, str(step), "exec")
        except SyntaxError as exc:
            return f"not Python: {exc}"
        return None
    first = _words(_rewrite(step.source))
    while first and "=" in first[0] and not first[0].startswith("-"):
        first = first[1:]  # VAR=value cmd
    name = first[0] if first else ""
    if name in GUARDED:
        return f"{name} would install into the tests' venv: list it in NOT_RUN"
    if name in BUILTINS or shutil.which(name, path=path) or (REPO / name).is_file():
        return None
    return f"no program {name!r} here: run it or list it in NOT_RUN"


def test_every_command_and_python_block_is_run_or_listed() -> None:
    path = f"{_VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    problems = []
    for doc in DOCS:
        for step in plan(doc):
            if len(_listed(NOT_RUN, doc, step.source)) > 1:
                problems.append(f"{step}: matches several NOT_RUN entries")
            why = None if step.kind is StepKind.NOT_RUN else _unrunnable(step, path)
            if why:
                problems.append(f"{step}: {why}")
    assert not problems, "\n".join(problems)
    assert RUN_DOCS, "no document has a command or Python block to run"


def test_tables_have_no_stale_entries() -> None:
    steps = [step for doc in DOCS for step in plan(doc)]
    sources = {(step.doc, step.source) for step in steps}

    def used(key: tuple[str, str]) -> bool:
        return any(doc == key[0] and source.startswith(key[1]) for doc, source in sources)

    stale = [f"NOT_RUN {key}" for key in NOT_RUN if not used(key)]
    stale += [f"EXIT_STATUS {key}" for key in EXIT_STATUS if not used(key)]
    stale += [f"PRINTED {key}" for key in PRINTED if not used(key)]
    stale += [f"BEFORE {key}" for key in BEFORE if not used(key)]
    stale += [f"ENVIRONMENT {doc!r}" for doc in ENVIRONMENT if doc not in RUN_DOCS]
    codes = [step.code for step in steps if step.kind is not StepKind.NOT_RUN]
    stale += [
        f"SUBSTITUTIONS {old!r}" for old, _ in SUBSTITUTIONS if not any(old in c for c in codes)
    ]
    stale += [
        f"REWRITES {start!r}"
        for start, _ in REWRITES
        if not any(source.startswith(start) for _, source in sources)
    ]
    assert not stale, "entries matching no block of any document:\n" + "\n".join(stale)


# -- running a document ----------------------------------------------------------------------


# Not linked into the scratch directory: what a document's commands would read
# or write there as their own (compose's secrets, the dev store's file).
_NOT_LINKED = frozenset({".git", ".venv", ".env"})
_NOT_LINKED_PREFIX = "triggerhook-dev.sqlite3"  # and its -wal, -shm


def _scratch_copy(into: Path) -> Path:
    """A directory of links to the repository's files: commands that name
    repository paths find them, and what they write stays here."""
    into.mkdir()
    for entry in REPO.iterdir():
        name = entry.name
        if name not in _NOT_LINKED and not name.startswith(_NOT_LINKED_PREFIX):
            (into / entry.name).symlink_to(entry)
    return into


def _guards(into: Path) -> Path:
    """A directory of stand-ins for GUARDED programs, which fail saying why."""
    into.mkdir()
    for name in GUARDED:
        stand_in = into / name
        stand_in.write_text(
            f"#!/bin/sh\necho \"{name} would install into the tests' venv: list the command in "
            'NOT_RUN (tests/integration/test_docs.py)" >&2\nexit 97\n'
        )
        stand_in.chmod(0o755)
    return into


def _home(into: Path, mysql_url: str) -> Path:
    """A home whose ~/.my.cnf holds the test's MariaDB account (mysqldump's)."""
    into.mkdir()
    server = urlsplit(mysql_url)
    (into / ".my.cnf").write_text(
        "[client]\n"
        f"host={server.hostname or '127.0.0.1'}\nport={server.port or 3306}\n"
        f"user={server.username or 'root'}\npassword={server.password or ''}\n"
    )
    return into


@pytest.fixture
def session(
    request: pytest.FixtureRequest,
    database_url: str,
    mysql_url: str,
    amqp_url: str,
    tmp_path: Path,
) -> Iterator[Session]:
    doc: str = request.param
    names = AmqpNames(exchange=unique_name(), queue=unique_name())
    port = closed_port()
    env = {
        **base_env(),
        "PATH": os.pathsep.join(
            [str(_guards(tmp_path / "guards")), _VENV_BIN, os.environ.get("PATH", "")]
        ),
        "HOME": str(_home(tmp_path / "home", mysql_url)),
        **settings_env(
            database_url=database_url,
            amqp_url=amqp_url,
            exchange=names.exchange,
            command_queue=names.commands,
            dead_letter_queue=names.dead_letters,
            http_port=port,
        ),
        **ENVIRONMENT.get(doc, {}),
    }
    shell = Shell(env, _scratch_copy(tmp_path / "work"), tmp_path)
    with (
        temporary_database(mysql_url, unique_name()) as fresh_database_url,
        DaemonGroup() as group,
    ):
        values = {
            "port": str(port),
            "exchange": names.exchange,
            "database": database_url.rsplit("/", 1)[1],
            "fresh_database_url": fresh_database_url,
        }
        daemon = DocDaemon(group, database_url, amqp_url, names.exchange, port)
        session = Session(doc, shell, daemon, SUBSTITUTIONS, values, tmp_path)
        try:
            yield session
        finally:
            session.close()
            group.close()
            delete_topology(amqp_url, names)


@pytest.mark.parametrize("session", RUN_DOCS, indirect=True, ids=RUN_DOCS)
def test_document_runs(session: Session) -> None:
    """Every step runs; a failed one is reported with the others at the end
    (later steps may fail because of it: fix the first first)."""
    steps = plan(session.doc)
    failures = []
    for step in steps:
        try:
            session.run(step)
        except AssertionError as exc:
            failures.append(str(exc))
    try:
        session.stop_server()
    except AssertionError as exc:
        failures.append(str(exc))
    assert not failures, f"{len(failures)} failed:\n\n" + "\n\n".join(failures)
    assert any(step.kind is not StepKind.NOT_RUN for step in steps)
