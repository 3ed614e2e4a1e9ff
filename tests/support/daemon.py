"""Run the real ``triggerhook`` daemon and CLI as separate processes.

* :class:`Daemon`: ``python -m triggerhook run`` with settings in ``TRIGGERHOOK_*``
  environment variables; stderr (the log) is read by a background thread into
  :attr:`Daemon.lines`, so tests can wait for a log line with a deadline.
* :class:`DaemonGroup`: starts daemons and makes sure none outlives the test
  (killed with SIGKILL on exit if still running).
* :func:`run_cli`: one CLI invocation, with a timeout.
* :class:`TaskTable`: reads ``th_tasks`` of a test database directly.
* :func:`schedule_tasks`: stores tasks through an in-process, never started
  :class:`triggerhook.TriggerHook` (a database client only).
* :func:`wait_until`: poll a condition until a deadline.
* :meth:`Daemon.pause` / :meth:`Daemon.resume`: SIGSTOP / SIGCONT, returning
  once the kernel reports every thread of the process stopped / running.

Only processes started here are ever signalled, by their own pid.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

from support.amqp import EventConsumer, Received
from support.mysql import ARMED_IDS, MARK_FIRING, connect
from support.waiting import wait_for

# Settings every test daemon gets unless the test overrides them: short knobs
# keep the tests fast (see Settings for the meaning of each).
FAST_SETTINGS: dict[str, int | str] = {
    "shard_lease_ms": 2000,
    "database_idle_transaction_timeout_s": 1,
    "shutdown_timeout_s": 5,
    "log_level": "INFO",
}

_LOG_TAIL = 40
_KILL_WAIT_S = 10.0


# Below Linux's ephemeral range (net.ipv4.ip_local_port_range, 32768-60999 by
# default): no outgoing connection is given such a port, so one picked here is
# still free when a daemon binds it a second later. (An ephemeral port was
# once taken in between by the daemon's own connection to the database.)
_PORTS = range(20000, 32768)


def closed_port() -> int:
    """A local TCP port nothing listens on (tried free, then closed), outside
    the ephemeral range."""
    rng = random.Random()
    for _ in range(200):
        port = rng.choice(_PORTS)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {_PORTS.start}-{_PORTS.stop - 1}")


def base_env() -> dict[str, str]:
    """The test process's environment without any TRIGGERHOOK_* variable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIGGERHOOK_")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def settings_env(**settings: int | str) -> dict[str, str]:
    """``TRIGGERHOOK_<NAME>`` variables for the given settings."""
    return {f"TRIGGERHOOK_{name.upper()}": str(value) for name, value in settings.items()}


def daemon_env(
    database_url: str,
    amqp_url: str,
    exchange: str,
    instance_id: str,
    **overrides: int | str,
) -> dict[str, str]:
    """Environment for a test daemon: FAST_SETTINGS, then ``overrides``.

    The daemon's HTTP API gets a free port and its command queue is named after
    the test's exchange (``<exchange>.commands``, deleted with the exchange).
    """
    settings: dict[str, int | str] = {
        **FAST_SETTINGS,
        "database_url": database_url,
        "amqp_url": amqp_url,
        "exchange": exchange,
        "instance_id": instance_id,
        "http_port": closed_port(),
        "command_queue": f"{exchange}.commands",
        "dead_letter_queue": f"{exchange}.dead",
        **overrides,
    }
    return {**base_env(), **settings_env(**settings)}


def triggerhook_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "triggerhook", *args]


def run_cli(
    args: Sequence[str], env: Mapping[str, str], timeout_s: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m triggerhook ARGS`` to completion; stdout/stderr captured as text."""
    return subprocess.run(
        triggerhook_command(*args),
        env=dict(env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


class Daemon:
    """One ``triggerhook run`` process (or ``command``, e.g. an installed
    script's ``dev``). Use through :class:`DaemonGroup` (or as a context
    manager) so it is always reaped."""

    def __init__(
        self,
        env: Mapping[str, str],
        name: str = "daemon",
        args: Sequence[str] = (),
        command: Sequence[str] | None = None,
    ):
        self.name = name
        self._env = dict(env)
        self._command = list(command) if command is not None else triggerhook_command("run")
        self._args = list(args)
        self._proc: subprocess.Popen[str] | None = None
        self._cond = threading.Condition()
        self._lines: list[str] = []
        self._stdout: list[str] = []
        self._readers: list[threading.Thread] = []

    @property
    def env(self) -> dict[str, str]:
        """The environment the daemon runs with (its settings as TRIGGERHOOK_*)."""
        return dict(self._env)

    # -- lifecycle ----------------------------------------------------------------

    def start(self) -> Self:
        if self._proc is not None:
            raise RuntimeError(f"{self.name} was started already")
        self._proc = subprocess.Popen(
            [*self._command, *self._args],
            env=self._env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
            start_new_session=True,  # a Ctrl-C at the terminal reaches only pytest
        )
        assert self._proc.stdout is not None and self._proc.stderr is not None
        self._readers = [
            threading.Thread(
                target=self._read,
                args=(self._proc.stderr, self._lines),
                name=f"{self.name}-stderr",
                daemon=True,
            ),
            threading.Thread(
                target=self._read,
                args=(self._proc.stdout, self._stdout),
                name=f"{self.name}-stdout",
                daemon=True,
            ),
        ]
        for reader in self._readers:
            reader.start()
        return self

    def _read(self, stream: IO[str], into: list[str]) -> None:
        for line in stream:
            with self._cond:
                into.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    @property
    def proc(self) -> subprocess.Popen[str]:
        if self._proc is None:
            raise RuntimeError(f"{self.name} has not been started")
        return self._proc

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def http_url(self) -> str:
        """Base URL of the daemon's HTTP API (``TRIGGERHOOK_HTTP_PORT`` on loopback)."""
        return f"http://127.0.0.1:{self._env['TRIGGERHOOK_HTTP_PORT']}"

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def returncode(self) -> int | None:
        return self.proc.poll()

    def signal(self, signum: int) -> None:
        """Send ``signum`` to this process (only if it has not been reaped)."""
        if self.alive():
            os.kill(self.pid, signum)

    def thread_states(self) -> list[str]:
        """The state letter (``/proc/<pid>/task/*/stat``) of each of the process's
        threads: ``T`` stopped by a signal, ``R``/``S``/``D`` running or waiting;
        empty once the process is gone."""
        states = []
        for stat in Path(f"/proc/{self.pid}/task").glob("*/stat"):
            with contextlib.suppress(OSError):  # a thread that just ended
                # "pid (comm) state ...": comm may hold spaces and parentheses.
                states.append(stat.read_text().rsplit(")", 1)[1].split()[0])
        return states

    def tcp_ports(self) -> set[int]:
        """Local ports of the process's TCP sockets (from /proc: its socket fds,
        looked up in its network namespace's tcp tables). A database session's
        ``host`` in the processlist is ``127.0.0.1:<one of these>``."""
        inodes = set()
        for fd in Path(f"/proc/{self.pid}/fd").iterdir():
            with contextlib.suppress(OSError):  # closed meanwhile
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[len("socket:[") : -1])
        ports = set()
        for table in ("tcp", "tcp6"):
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{self.pid}/net/{table}").read_text().splitlines()[1:]:
                    fields = line.split()  # sl local rem st queues tr retrnsmt uid timeout inode
                    if fields[9] in inodes:
                        ports.add(int(fields[1].rsplit(":", 1)[1], 16))
        return ports

    def stopped(self) -> bool:
        """Every thread of the (live) process is stopped (SIGSTOP, not yet SIGCONT)."""
        states = self.thread_states()
        return self.alive() and bool(states) and all(s == "T" for s in states)

    def pause(self, timeout_s: float = 5.0) -> None:
        """SIGSTOP the process and wait until every thread of it is stopped: it
        runs no code, its sockets and database sessions stay open (a process
        frozen as if by a long GC pause or a suspended VM)."""
        if not self.alive():
            raise AssertionError(f"{self.name} is not running\n{self.tail()}")
        os.kill(self.pid, signal.SIGSTOP)
        wait_for(
            self.stopped,
            timeout_s,
            lambda: f"{self.name} not stopped: {self.thread_states()}",
            interval_s=0.005,
        )

    def resume(self, timeout_s: float = 5.0) -> None:
        """SIGCONT a paused process and wait until none of its threads is stopped."""
        if not self.alive():
            raise AssertionError(f"{self.name} is not running\n{self.tail()}")
        os.kill(self.pid, signal.SIGCONT)
        wait_for(
            lambda: "T" not in self.thread_states(),
            timeout_s,
            lambda: f"{self.name} still stopped: {self.thread_states()}",
            interval_s=0.005,
        )

    def wait_exit(self, timeout_s: float, readers: bool = True) -> int:
        """Wait for the process to end (and, with ``readers``, for its log
        readers to finish); AssertionError (with the log tail) on timeout."""
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.name} still running after {timeout_s:.1f}s\n{self.tail()}"
            ) from None
        if readers:
            self._join_readers()
        return code

    def terminate(self, timeout_s: float = 15.0) -> int:
        """SIGTERM (graceful stop) and wait for the exit code."""
        self.signal(signal.SIGTERM)
        return self.wait_exit(timeout_s)

    def kill9(self) -> int:
        """SIGKILL and wait for the exit code (-9). Not for its log readers:
        its API processes, which outlive it until they see it gone, hold the
        log pipes open meanwhile (seconds on a loaded machine, in which the
        dead one's leases may run out); :meth:`close` joins them."""
        self.signal(signal.SIGKILL)
        return self.wait_exit(_KILL_WAIT_S, readers=False)

    def close(self) -> None:
        """Make sure the process is gone (SIGKILL if it still runs) and reaped."""
        if self._proc is None:
            return
        if self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(_KILL_WAIT_S)
        self._join_readers()

    def _join_readers(self) -> None:
        for reader in self._readers:
            reader.join(5.0)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- the log ------------------------------------------------------------------

    @property
    def lines(self) -> list[str]:
        """A copy of the stderr lines read so far."""
        with self._cond:
            return list(self._lines)

    @property
    def stdout_lines(self) -> list[str]:
        with self._cond:
            return list(self._stdout)

    def mark(self) -> int:
        """The number of log lines so far: pass as ``start`` to wait for later lines."""
        with self._cond:
            return len(self._lines)

    def count(self, substring: str, start: int = 0) -> int:
        with self._cond:
            return sum(substring in line for line in self._lines[start:])

    def wait_for_line(
        self, substring: str | Iterable[str], timeout_s: float, start: int = 0
    ) -> str:
        """The first log line from index ``start`` on containing ``substring`` (or
        any of several). AssertionError with the log tail on timeout, or at once if
        the process exited without printing it."""
        wanted = [substring] if isinstance(substring, str) else list(substring)
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                for line in self._lines[start:]:
                    if any(w in line for w in wanted):
                        return line
                start = max(start, len(self._lines))
                exited = self._proc is not None and self._proc.poll() is not None
                if exited and not any(r.is_alive() for r in self._readers):
                    raise AssertionError(
                        f"{self.name} exited ({self._proc.poll() if self._proc else None}) "
                        f"without logging {wanted!r}\n{self._tail_locked()}"
                    )
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"{self.name} did not log {wanted!r} within {timeout_s:.1f}s\n"
                        f"{self._tail_locked()}"
                    )
                # Short waits: also notice the process exiting.
                self._cond.wait(min(left, 0.2))

    def wait_ready(self, timeout_s: float = 20.0) -> None:
        """Wait until the engine runs, the publisher is connected and (unless
        turned off) the HTTP API listens and the command consumer consumes."""
        self.wait_for_line("engine started", timeout_s)
        self.wait_for_line("publishing to exchange", timeout_s)
        if self._enabled("HTTP_ENABLED"):
            self.wait_for_line("http api listening", timeout_s)
        if self._enabled("COMMANDS_ENABLED"):
            self.wait_for_line("consuming commands from queue", timeout_s)

    def _enabled(self, setting: str) -> bool:
        value = self._env.get(f"TRIGGERHOOK_{setting}", "true")
        return value.strip().lower() not in ("0", "false", "no", "off")

    def tail(self, count: int = _LOG_TAIL) -> str:
        with self._cond:
            return self._tail_locked(count)

    def _tail_locked(self, count: int = _LOG_TAIL) -> str:
        shown = self._lines[-count:]
        return f"--- last {len(shown)} log lines of {self.name} ---\n" + "\n".join(shown)


class DaemonGroup:
    """Starts daemons; on exit kills every one still running and writes each
    log tail to stderr (pytest shows it when the test failed)."""

    def __init__(self) -> None:
        self.daemons: list[Daemon] = []

    def start(self, env: Mapping[str, str], name: str = "daemon", *args: str) -> Daemon:
        daemon = Daemon(env, name=name, args=args)
        self.daemons.append(daemon)
        return daemon.start()

    def close(self) -> None:
        for daemon in self.daemons:
            daemon.close()
        for daemon in self.daemons:
            sys.stderr.write(daemon.tail(200) + "\n")

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class TaskTable:
    """Direct reads of ``th_tasks`` (autocommit: every query sees the latest commits)."""

    def __init__(self, database_url: str) -> None:
        self._conn: Any = connect(database_url)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def query(self, statement: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        with self._conn.cursor() as cur:
            cur.execute(statement, params)
            return list(cur.fetchall())

    def count(self) -> int:
        return int(self.query("SELECT COUNT(*) FROM th_tasks")[0][0])

    def ids(self) -> set[str]:
        return {str(row[0]) for row in self.query("SELECT id FROM th_tasks")}

    def armed_ids(self) -> set[str]:
        """The rows armed now (committed to fire), by their shards' marks."""
        return {str(row[0]) for row in self.query(ARMED_IDS)}

    def shards(self) -> dict[int, tuple[str | None, int, int]]:
        """shard -> (owner, epoch, lease_until_ms) of every shard row."""
        rows = self.query("SELECT shard, owner, epoch, lease_until_ms FROM th_shards")
        return {int(r[0]): (r[1], int(r[2]), int(r[3])) for r in rows}

    def owner_counts(self) -> dict[str | None, int]:
        """owner -> how many shards it holds (None: free)."""
        rows = self.query("SELECT owner, COUNT(*) FROM th_shards GROUP BY owner")
        return {r[0]: int(r[1]) for r in rows}

    def members(self) -> dict[str, int]:
        """instance -> heartbeat_until_ms of every th_members row."""
        rows = self.query("SELECT instance, heartbeat_until_ms FROM th_members")
        return {str(r[0]): int(r[1]) for r in rows}

    def mark_firing(self, task_id: str) -> None:
        """Make the row look armed by another instance (as if being published
        there): cancel and reschedule must then answer too late."""
        with self._conn.cursor() as cur:
            changed = cur.execute(MARK_FIRING[0], (task_id,))
            cur.execute(MARK_FIRING[1], (task_id,))
        assert changed == 1, f"no row {task_id!r} to mark firing"
        assert task_id in self.armed_ids(), f"{task_id!r} not armed"

    def locking_transactions(self, client_ports: set[int]) -> list[tuple[Any, ...]]:
        """Open InnoDB transactions holding locks, of the sessions connected from
        these local ports (see :meth:`Daemon.tcp_ports`): (session id, host,
        transaction state, lock structs, rows locked, started)."""
        rows = self.query(
            "SELECT p.ID, p.HOST, t.trx_state, t.trx_lock_structs, t.trx_rows_locked,"
            " t.trx_started FROM information_schema.INNODB_TRX t"
            " JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id"
            " WHERE t.trx_lock_structs > 0"
        )
        return [r for r in rows if str(r[1]).rsplit(":", 1)[-1] in {str(p) for p in client_ports}]


def schedule_tasks(
    database_url: str, tasks: Sequence[tuple[str, int]], payload: bytes = b""
) -> None:
    """Store ``(id, due_ms)`` tasks in one transaction through a TriggerHook that is
    never started (a plain database client, its own instance id): nothing is armed."""
    from triggerhook import Settings, TaskSpec, build

    hook = build(Settings(database_url=database_url, instance_id="test-client"))
    try:
        hook.schedule_many(
            [TaskSpec(id=task_id, at_ms=due, payload=payload) for task_id, due in tasks]
        )
    finally:
        hook.close()


def spread(prefix: str, count: int, first_ms: int, last_ms: int) -> list[tuple[str, int]]:
    """``count`` task ids ``<prefix>-<n>`` with due times spread evenly over
    ``[first_ms, last_ms]``."""
    step = (last_ms - first_ms) / max(1, count - 1)
    return [(f"{prefix}-{n}", first_ms + int(n * step)) for n in range(count)]


def collect_ids(
    consumer: EventConsumer, expected: Iterable[str], timeout_s: float, quiet_s: float = 0.5
) -> list[Received]:
    """Consume until every expected message id was seen (or ``timeout_s``), then
    until nothing arrived for ``quiet_s``; returns everything received, duplicates
    included. Check completeness with :func:`missing_ids`."""
    missing = set(expected)
    received: list[Received] = []
    deadline = time.monotonic() + timeout_s
    while missing:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        batch = consumer.collect(len(missing), timeout_s=min(left, 1.0))
        received.extend(batch)
        missing.difference_update(e.message_id for e in batch if e.message_id is not None)
    received.extend(consumer.drain_quiet(quiet_s))
    return received


def missing_ids(expected: Iterable[str], received: Iterable[Received]) -> set[str]:
    return set(expected) - {e.message_id for e in received if e.message_id is not None}


def duplicates(received: Iterable[Received]) -> dict[str, int]:
    """message id -> number of extra deliveries, for ids received more than once."""
    counts = Counter(e.message_id or "" for e in received)
    return {task_id: n - 1 for task_id, n in counts.items() if n > 1}


def fired_ms(event: Received) -> int:
    value = event.headers["x-fired-ms"]
    assert isinstance(value, int), event
    return value


def report(text: str) -> None:
    """A line for the test log (shown with ``pytest -s`` or when the test fails)."""
    sys.stderr.write(f"[report] {text}\n")


class OwnerSampler:
    """Records which instances held shards, polling th_shards every
    ``interval_s`` in a thread (a context manager)."""

    def __init__(self, database_url: str, interval_s: float = 0.05) -> None:
        self.seen: set[str] = set()
        self._database_url = database_url
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="owner-sampler", daemon=True)

    def _run(self) -> None:
        with TaskTable(self._database_url) as reader:
            while not self._stop.wait(self._interval_s):
                self.seen.update(k for k in reader.owner_counts() if k is not None)

    def __enter__(self) -> OwnerSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(10)
