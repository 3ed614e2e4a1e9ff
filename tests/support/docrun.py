"""Running a document's code blocks as a reader would, one after another.

* :class:`Shell`: the commands of a document share one environment and working
  directory, as in one terminal: each runs in its own ``bash -euo pipefail``
  (with ``set -a``: its assignments are exported), and what it leaves behind
  (``env -0``, ``pwd``) is what the next one starts with. A command may also be
  started in the background (:meth:`Shell.start`: ``triggerhook run``, ``dev``, ``tail``).
* :class:`PythonSession`: the Python blocks of a document run in one
  interpreter (the venv's), each ``exec``'d in the namespace the previous ones
  left, as a reader pastes them into one session.
* :class:`DocDaemon`: the ``triggerhook run`` a document's commands talk to,
  started when the first one needs it, with the API token the document's
  environment holds at that moment (restarted when that changes).
* :class:`Step`, :class:`Session`: one command or Python block of a document,
  and running them in order with all of the above.

Only processes started here are ever signalled, by their own pid.
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import select
import shlex
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Self

from support.daemon import Daemon, DaemonGroup, closed_port, daemon_env
from support.waiting import wait_for

# Variables bash sets for itself: not part of what a command leaves behind.
_SHELL_OWN = frozenset({"_", "SHLVL", "PWD", "OLDPWD"})
_BACKGROUND_STOP_S = 30.0
COMMAND_TIMEOUT_S = 90.0
READY_TIMEOUT_S = 30.0
PRINTED_S = 15.0  # a `triggerhook dev` prints the event of a task due in a second


class Shell:
    """The environment and working directory a document's commands share."""

    def __init__(self, env: Mapping[str, str], cwd: Path, scratch: Path) -> None:
        self.env = dict(env)
        self.cwd = cwd
        self._env_file = scratch / "shell.env"
        self._cwd_file = scratch / "shell.cwd"

    def run(self, command: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
        """Run one command to its end; the environment and directory it leaves are kept."""
        self._env_file.unlink(missing_ok=True)
        keep = (
            f"env -0 > {shlex.quote(str(self._env_file))}; pwd > {shlex.quote(str(self._cwd_file))}"
        )
        script = f"trap {shlex.quote(keep)} EXIT\nset -euo pipefail\nset -a\n{command}\n"
        with subprocess.Popen(
            ["bash", "--noprofile", "--norc", "-c", script],
            env=self.env,
            cwd=self.cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group: ended whole on a timeout
        ) as proc:
            try:
                stdout, stderr = proc.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                stdout, stderr = proc.communicate()
                raise AssertionError(
                    f"still running after {timeout_s:.0f}s: {command}\n"
                    f"stdout: {stdout}\nstderr: {stderr}"
                ) from None
        self._keep()
        return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)

    def _keep(self) -> None:
        if self._env_file.exists():
            pairs = self._env_file.read_bytes().decode().split("\0")
            env = dict(pair.split("=", 1) for pair in pairs if "=" in pair)
            self.env = {k: v for k, v in env.items() if k not in _SHELL_OWN}
        if self._cwd_file.exists():
            self.cwd = Path(self._cwd_file.read_text().strip())

    def start(
        self, command: str, overrides: Mapping[str, str], stop_signal: signal.Signals
    ) -> Background:
        """Start a command (a simple one: it is ``exec``'d) in the background;
        ``stop_signal`` is how a reader stops it (Ctrl-C: SIGINT)."""
        return Background(command, {**self.env, **overrides}, self.cwd, stop_signal)


class Background:
    """A long-running command (support/daemon.py's :class:`Daemon` runs it:
    stderr and stdout are read as they come)."""

    def __init__(
        self, command: str, env: Mapping[str, str], cwd: Path, stop_signal: signal.Signals
    ) -> None:
        self.command = command
        self.stop_signal = stop_signal
        script = f"set -euo pipefail\ncd {shlex.quote(str(cwd))}\nexec {command}"
        self._proc = Daemon(
            env, command[:60], command=["bash", "--noprofile", "--norc", "-c", script]
        )
        self._proc.start()

    def output(self) -> str:
        stdout = "\n".join(self._proc.stdout_lines[-20:])
        return f"{self._proc.tail()}\n--- stdout ---\n{stdout}"

    def wait_ready(self, ready: Callable[[Background], bool], timeout_s: float) -> None:
        def check() -> bool:
            if not self._proc.alive():
                raise AssertionError(
                    f"exited ({self._proc.returncode()}) before it was ready: {self.command}\n"
                    f"{self.output()}"
                )
            return ready(self)

        wait_for(check, timeout_s, lambda: f"not ready: {self.command}\n{self.output()}")

    def logged(self, text: str) -> bool:
        """Whether a line on stderr contains ``text``."""
        return self._proc.count(text) > 0

    def printed(self, text: str, start: int = 0) -> bool:
        """Whether a line on stdout from index ``start`` on contains ``text``."""
        return any(text in line for line in self._proc.stdout_lines[start:])

    def mark(self) -> int:
        """The number of stdout lines so far (``start`` for :meth:`printed`)."""
        return len(self._proc.stdout_lines)

    def stop(self) -> int:
        """Send the stop signal and wait for the exit status."""
        self._proc.signal(self.stop_signal)
        try:
            return self._proc.wait_exit(_BACKGROUND_STOP_S)
        except AssertionError:
            self.close()
            raise

    def close(self) -> None:
        """Make sure it is gone (SIGKILL if it still runs)."""
        self._proc.close()


# Run by the venv's Python: exec each block it is sent (one JSON line on stdin)
# in one namespace; answer on the file descriptor given as argv[1].
_DRIVER = """
import json, os, sys, traceback
answers = os.fdopen(int(sys.argv[1]), "w")
namespace = {"__name__": "__main__"}
for line in sys.stdin:
    request = json.loads(line)
    try:
        exec(compile(request["code"], request["name"], "exec"), namespace)
        answer = {"error": None}
    except BaseException:
        answer = {"error": traceback.format_exc()}
    answers.write(json.dumps(answer) + "\\n")
    answers.flush()
"""


class PythonSession:
    """One interpreter for the Python blocks of a document."""

    def __init__(self, env: Mapping[str, str], cwd: Path, log: Path) -> None:
        self._log_path = log
        self._log = log.open("w")
        read_fd, write_fd = os.pipe()
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _DRIVER, str(write_fd)],
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            text=True,
            pass_fds=(write_fd,),
            start_new_session=True,
        )
        os.close(write_fd)
        self._answers = os.fdopen(read_fd)

    def run(self, name: str, code: str, timeout_s: float) -> None:
        """Exec one block; AssertionError with its traceback and output if it raised."""
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps({"name": name, "code": code}) + "\n")
        self._proc.stdin.flush()
        ready, _, _ = select.select([self._answers], [], [], timeout_s)
        line = self._answers.readline() if ready else ""
        if not line:
            raise AssertionError(f"{name}: no answer within {timeout_s:.0f}s\n{self.output()}")
        error = json.loads(line)["error"]
        if error is not None:
            raise AssertionError(f"{name} raised:\n{error}\noutput:\n{self.output()}")

    def output(self) -> str:
        self._log.flush()
        return self._log_path.read_text()[-4000:]

    def close(self) -> None:
        assert self._proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self._proc.stdin.close()
        try:
            self._proc.wait(20.0)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(10.0)
        self._answers.close()
        self._log.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class DocDaemon:
    """The daemon a document talks to, on the port its commands are pointed at."""

    def __init__(
        self, group: DaemonGroup, database_url: str, amqp_url: str, exchange: str, port: int
    ) -> None:
        self._group = group
        self._database_url = database_url
        self._amqp_url = amqp_url
        self._exchange = exchange
        self.port = port
        self._daemon: Daemon | None = None
        self._token = ""
        self._starts = 0

    def ensure(self, token: str) -> None:
        """Running, with this API token ("" for none)."""
        if self._daemon is not None and self._daemon.alive() and token == self._token:
            return
        self.stop()
        self._starts += 1
        env = daemon_env(
            self._database_url,
            self._amqp_url,
            self._exchange,
            f"docs-{self._starts}",
            http_port=self.port,
            api_token=token,
        )
        self._daemon = self._group.start(env, f"docs-daemon-{self._starts}", "--init-db")
        self._daemon.wait_ready(30.0)
        self._token = token

    def stop(self) -> None:
        """Stopped (SIGTERM: exit 0), if it runs."""
        if self._daemon is not None and self._daemon.alive():
            assert self._daemon.terminate() == 0, self._daemon.tail()

    def tail(self) -> str:
        return self._daemon.tail() if self._daemon is not None else "(no daemon started)"


# -- a document's steps, and running them ----------------------------------------------------


class StepKind(enum.Enum):
    SHELL = "shell"
    BACKGROUND = "background"
    PYTHON = "python"
    NOT_RUN = "not run"


class Needs(enum.Enum):
    """What must run before a step."""

    NOTHING = "nothing"
    SERVER = "an HTTP API on the document's port"  # the daemon, or a `triggerhook dev`
    DEPLOYMENT = "the daemon, on MariaDB and RabbitMQ"


@dataclass(frozen=True)
class LongRunning:
    """How a long-running command is checked: it must become ready (``ready``
    holds) within a deadline and exit 0 on ``stop``. ``port``: the HTTP port
    it gets: its own (``run``: stopped once ready), the document's (``dev``:
    it serves the commands after it until the document ends or one needs the
    deployment), or none."""

    ready: Callable[[Background, int], bool]
    stop: signal.Signals
    port: str  # "own", "document" or ""


@dataclass(frozen=True)
class Step:
    doc: str
    line: int
    kind: StepKind
    source: str  # the command as shown (one line), or the Python block's first line
    code: str  # what runs, before the substitutions
    reason: str = ""
    exit_status: int = 0
    needs: Needs = Needs.NOTHING
    background: LongRunning | None = None
    printed: str = ""  # what a `triggerhook dev` serving the port prints after it

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: {self.source}"


def readyz(_: Background, port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def tailing(proc: Background, _: int) -> bool:
    return proc.logged("tailing exchange")


@dataclass
class Session:
    """A document's commands run so far: their shell, their daemon, the Python
    interpreter of their blocks, and a ``triggerhook dev`` serving their port."""

    doc: str
    shell: Shell
    daemon: DocDaemon
    substitutions: Sequence[tuple[str, str]]  # (shown, $template of the test's value)
    values: dict[str, str]  # the template's values
    scratch: Path
    python: PythonSession | None = None
    server: Background | None = None

    def code(self, step: Step) -> str:
        text = step.code
        for old, new in self.substitutions:
            text = text.replace(old, Template(new).substitute(self.values))
        return text

    def run(self, step: Step) -> None:
        self._prepare(step.needs)
        if step.kind is StepKind.SHELL:
            self._command(step)
        elif step.kind is StepKind.BACKGROUND:
            self._background(step)
        elif step.kind is StepKind.PYTHON:
            self._python(step)

    def _prepare(self, needs: Needs) -> None:
        if needs is Needs.DEPLOYMENT:
            self.stop_server()
        if needs is Needs.NOTHING or (needs is Needs.SERVER and self.server is not None):
            return
        self.daemon.ensure(self.shell.env.get("TRIGGERHOOK_API_TOKEN", ""))

    def _command(self, step: Step) -> None:
        mark = self.server.mark() if self.server is not None else 0
        result = self.shell.run(self.code(step), COMMAND_TIMEOUT_S)
        if result.returncode != step.exit_status:
            raise AssertionError(
                f"{step}\nexit status {result.returncode}, documented {step.exit_status}\n"
                f"ran: {self.code(step)}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}\n"
                f"{self.server.output() if self.server else self.daemon.tail()}"
            )
        if step.printed:
            server = self.server
            assert server is not None, f"{step}: no `triggerhook dev` runs to print its event"
            wait_for(
                lambda: server.printed(step.printed, mark),
                PRINTED_S,
                lambda: (
                    f"{step}: `{server.command}` did not print {step.printed!r}\n{server.output()}"
                ),
            )

    def _background(self, step: Step) -> None:
        check = step.background
        assert check is not None
        port = self.daemon.port
        overrides = {}
        if check.port == "own":
            port = closed_port()
            overrides["TRIGGERHOOK_HTTP_PORT"] = str(port)
        elif check.port == "document":
            self.stop_server()
            self.daemon.stop()
        proc = self.shell.start(self.code(step), overrides, check.stop)
        try:
            proc.wait_ready(lambda p: check.ready(p, port), READY_TIMEOUT_S)
        except BaseException:
            proc.close()
            raise
        if check.port == "document":
            self.server = proc  # serves the next commands
        else:
            _stop(proc)

    def stop_server(self) -> None:
        """Stop the ``triggerhook dev`` serving the document's port, if one does."""
        if self.server is not None:
            proc, self.server = self.server, None
            _stop(proc)

    def _python(self, step: Step) -> None:
        if self.python is None:
            self.python = PythonSession(self.shell.env, self.shell.cwd, self.scratch / "python.log")
        self.python.run(str(step), self.code(step), COMMAND_TIMEOUT_S)

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
        if self.python is not None:
            self.python.close()


def _stop(proc: Background) -> None:
    """Stop a long-running command as a reader would (Ctrl-C, SIGTERM): exit 0."""
    try:
        code = proc.stop()
        assert code == 0, (
            f"{proc.command}: exit status {code} after {proc.stop_signal.name}\n{proc.output()}"
        )
    finally:
        proc.close()
