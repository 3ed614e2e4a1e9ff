"""A MariaDB server of the test's own, for what must not touch the shared one
(``SET GLOBAL read_only``, say): a data directory made by ``mariadb-install-db``
in a temporary directory, ``mariadbd`` on a free loopback port, stopped and
deleted at the end. About half a second to start on the project's machine
(small InnoDB files: 8 MiB of redo log, a 32 MiB buffer pool).

Use one per test module (:func:`private_mariadb` as a module-scoped fixture's
body). Root connects over TCP without a password; :meth:`PrivateMariaDB.add_user`
makes the ordinary users a test needs. Only the process started here is ever
signalled, by its own pid.
"""

from __future__ import annotations

import contextlib
import getpass
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pymysql

from support.daemon import closed_port
from support.waiting import wait_until

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
_INSTALL_TIMEOUT_S = 60.0
# Small files: the server starts and stops in about a second.
_SERVER_OPTIONS = (
    "--innodb-log-file-size=8M",
    "--innodb-buffer-pool-size=32M",
    "--innodb-data-file-path=ibdata1:12M:autoextend",
)
_BINARIES = ("mariadb-install-db", "mariadbd")
_SBIN = ("/usr/sbin", "/usr/local/sbin")


def binaries() -> dict[str, str] | None:
    """Where ``mariadb-install-db`` and ``mariadbd`` are, or None if either is missing."""
    found = {}
    for name in _BINARIES:
        path = shutil.which(name) or next(
            (f"{d}/{name}" for d in _SBIN if Path(d, name).is_file()), None
        )
        if path is None:
            return None
        found[name] = path
    return found


@dataclass
class PrivateMariaDB:
    """A running private server: ``url`` is root's (``mysql://root:@127.0.0.1:port``)."""

    port: int
    directory: Path
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"mysql://root:@127.0.0.1:{self.port}"

    def execute(self, *statements: str) -> None:
        """Run ``statements`` as root, each committed."""
        conn = pymysql.connect(**self._kwargs("root", ""))
        try:
            with conn.cursor() as cur:
                for statement in statements:
                    cur.execute(statement)
        finally:
            conn.close()

    def query(self, statement: str) -> list[tuple[Any, ...]]:
        conn = pymysql.connect(**self._kwargs("root", ""))
        try:
            with conn.cursor() as cur:
                cur.execute(statement)
                return list(cur.fetchall())
        finally:
            conn.close()

    def add_user(self, user: str, password: str, database: str) -> str:
        """A user with every privilege on ``database`` and none beyond it (no
        SUPER, no READ ONLY ADMIN: ``read_only`` binds it); its URL there."""
        self.execute(
            f"CREATE USER '{user}'@'%' IDENTIFIED BY '{password}'",
            f"GRANT ALL PRIVILEGES ON `{database}`.* TO '{user}'@'%'",
        )
        return f"mysql://{user}:{password}@127.0.0.1:{self.port}/{database}"

    def log_tail(self, count: int = 20) -> str:
        path = self.directory / "error.log"
        lines = path.read_text(errors="replace").splitlines() if path.exists() else []
        return "\n".join(lines[-count:])

    def _kwargs(self, user: str, password: str) -> dict[str, Any]:
        return {
            "host": "127.0.0.1",
            "port": self.port,
            "user": user,
            "password": password,
            "autocommit": True,
            "connect_timeout": 2,
        }

    def answers(self) -> bool:
        try:
            self.query("SELECT 1")
        except pymysql.err.MySQLError:
            return False
        return True


@contextlib.contextmanager
def private_mariadb() -> Iterator[PrivateMariaDB]:
    """Install, start and (afterwards) stop and delete a private MariaDB server.
    AssertionError naming its log when it does not answer in ``START_TIMEOUT_S``."""
    found = binaries()
    assert found is not None, f"{' and '.join(_BINARIES)} are needed (Debian: mariadb-server)"
    directory = Path(tempfile.mkdtemp(prefix="th-mariadb-"))
    data = directory / "data"
    try:
        subprocess.run(
            [
                found["mariadb-install-db"],
                "--no-defaults",
                f"--datadir={data}",
                f"--user={getpass.getuser()}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                *_SERVER_OPTIONS,
            ],
            check=True,
            capture_output=True,
            stdin=subprocess.DEVNULL,
            timeout=_INSTALL_TIMEOUT_S,
        )
        with _server(found["mariadbd"], directory, data) as server:
            yield server
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@contextlib.contextmanager
def _server(mariadbd: str, directory: Path, data: Path) -> Iterator[PrivateMariaDB]:
    port = closed_port()
    process = subprocess.Popen(
        [
            mariadbd,
            "--no-defaults",
            f"--datadir={data}",
            f"--port={port}",
            "--bind-address=127.0.0.1",
            f"--socket={directory / 'mariadbd.sock'}",
            f"--pid-file={directory / 'mariadbd.pid'}",
            f"--log-error={directory / 'error.log'}",
            f"--user={getpass.getuser()}",  # mariadbd refuses to run as root without it
            "--skip-name-resolve",
            *_SERVER_OPTIONS,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    server = PrivateMariaDB(port, directory, process)
    try:
        _wait_until_it_answers(server)
        yield server
    finally:
        _stop(process)


def _wait_until_it_answers(server: PrivateMariaDB) -> None:
    def settled() -> bool:
        return server.process.poll() is not None or server.answers()

    if not wait_until(settled, START_TIMEOUT_S, 0.05) or server.process.poll() is not None:
        raise AssertionError(
            f"private mariadbd on port {server.port} did not answer "
            f"(exit code {server.process.poll()}):\n{server.log_tail()}"
        )


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()  # SIGTERM: a clean shutdown
    try:
        process.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(STOP_TIMEOUT_S)
