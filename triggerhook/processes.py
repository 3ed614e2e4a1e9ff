"""``triggerhook run`` as several processes: one fires, the others serve the API.

With ``api_processes`` = N ≥ 1 (and the HTTP API or the command queue on):

* the **firing process**, the one started (systemd's main PID): the engine
  (shards, arming, firing, publishing, confirming) and the metrics. It starts
  the API processes, watches them, sends READY and the watchdog pings;
* N **API processes** (``python -m triggerhook api-process``): the HTTP API
  (several share ``http_port`` through ``SO_REUSEPORT``) and the AMQP command
  consumer, over an engine that only writes (:mod:`triggerhook.engine.engine`).

Their Python work runs under their own interpreter lock, so a burst of
requests cannot hold up a fire. They share the database (a task is a row, as
between instances) and, per API process, a socket pair carrying pickled
tuples (parent and child only: nothing else can connect):

* firing → API: first ``("settings", Settings)``; then, every
  ``REPORT_INTERVAL_S``, ``("engine", reasons, figures)``: why the engine is not
  ready (empty: it is) and what ``/v1/status`` and ``/metrics`` show;
* API → firing: ``("soon",)`` right after a commit wrote a row due within
  ``arm_ahead_ms + arm_interval_ms``, so that the armer runs a pass at once,
  as it does for the firing process's own writes; and every
  ``REPORT_INTERVAL_S`` ``("state", reasons, http_totals, engine_totals,
  latencies)``: why the API process is not ready, its request and write
  counters (totals since it started), and its request latencies since the
  last report; the firing process adds them to its figures and metrics.

Threads: in the firing process, per API process a link thread reading its
messages and a reaper waiting for its exit; in an API process, one link
thread reading the engine's state. A side whose peer stopped reading (a
paused process: SIGSTOP, a stopped VM) skips its messages while the
socket's buffer is filling (they are periodic state, or a hint) rather than
wait, and sends again once the peer reads. (Waiting, it gave the link up
once its buffer was full: an idle daemon paused for 90 s exited after the
pause; one paused for 30 s did not.) Sends are blocking with a 1 s timeout
(``SO_SNDTIMEO``) behind that check: a message bigger than the room left
can still give the link up.

Failures: an API process that exits (or whose link breaks) makes the firing
process stop gracefully and exit 1 (its supervisor restarts the daemon:
systemd's ``Restart=``); when the firing process is gone (end of file on the
socket) the API processes stop. A report older than ``STALE_S`` counts as
"not ready".
"""

from __future__ import annotations

import array
import logging
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from triggerhook.app import Figures
from triggerhook.runtime.counters import RequestStats, add_totals
from triggerhook.settings import Settings

log = logging.getLogger(__name__)

REPORT_INTERVAL_S = 0.25
STALE_S = 5.0
# What systemd hands the main process only: a child must not notify in its name.
_PARENT_ONLY_ENV = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID")
_KILL_WAIT_S = 5.0
_SEND_TIMEOUT = struct.pack("ll", 1, 0)  # struct timeval: 1 s


def room_to_send(conn: Connection) -> bool:
    """Whether a message sent on ``conn`` now is taken at once: a Unix stream
    socket polls writable while at most a quarter of its send buffer is in
    flight (and when the peer hung up: the send then fails, as it should)."""
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLOUT)
    return bool(poller.poll(0))


def api_command(channel_fd: int, index: int, log_format: str = "text") -> list[str]:
    """The command line of an API process (``triggerhook api-process``); it
    logs in ``log_format`` from its start, before the settings reach it."""
    return [
        sys.executable,
        "-m",
        "triggerhook",
        "api-process",
        "--channel-fd",
        str(channel_fd),
        "--index",
        str(index),
        "--log-format",
        log_format,
    ]


def _summed(per_process: dict[int, dict[str, int]]) -> dict[str, int]:
    summed: dict[str, int] = {}
    for totals in list(per_process.values()):  # a copy: the link threads add to it
        add_totals(summed, totals)
    return summed


class SummedRequestStats(RequestStats):
    """The API processes' request figures, added up, as the metrics read them:
    counters are the sum of each process's latest totals; latencies are
    recorded as the reports bring them. The link threads write, the
    metrics thread reads (dict and list operations, atomic under the GIL)."""

    def __init__(self) -> None:
        super().__init__()
        self._totals: dict[int, dict[str, int]] = {}

    def report(self, index: int, totals: dict[str, int], latencies_ms: bytes) -> None:
        self._totals[index] = totals
        self.latency.extend(array.array("d", latencies_ms))

    def counters(self) -> dict[str, int]:
        return _summed(self._totals)


@dataclass
class _Member:
    """One API process, as the firing process sees it. Its reaper thread
    waits for it to exit (a blocking ``waitpid``: no polling, which under a
    faked clock, as the clock tests run, can fail) and sets ``exited``."""

    index: int
    proc: subprocess.Popen[bytes]
    conn: Connection
    reasons: list[str] = field(default_factory=lambda: ["starting"])
    reported_s: float | None = None  # monotonic, of the last report
    connected: bool = True
    exited: threading.Event = field(default_factory=threading.Event)

    def reap(self) -> None:
        def wait() -> None:
            self.proc.wait()
            self.exited.set()

        name = f"th-api-reaper-{self.index}"
        threading.Thread(target=wait, name=name, daemon=True).start()

    def code(self) -> int | None:
        """Its exit status once it exited (negative: the signal that ended it)."""
        return self.proc.returncode if self.exited.is_set() else None


class ApiProcesses:
    """The firing process's side: starts, watches and stops the API processes.

    Called on the event loop's thread; each API process's messages are read
    by a thread of its own (``th-api-link-<index>``), which wakes the armer and
    keeps the member's latest report (plain assignments, atomic under the GIL).
    """

    def __init__(
        self,
        settings: Settings,
        count: int,
        wake_armer: Callable[[], None],
        http: SummedRequestStats,
    ) -> None:
        self._settings = settings
        self._count = count
        self._wake_armer = wake_armer
        self.http = http
        self._engine_totals: dict[int, dict[str, int]] = {}
        self._members: list[_Member] = []
        self._next_report_s = 0.0

    def start(self) -> None:
        for index in range(self._count):
            self._members.append(self._spawn(index))

    def _spawn(self, index: int) -> _Member:
        ours, theirs = socket.socketpair()
        for end in (ours, theirs):
            # A send blocked this long (the other side stopped reading, its
            # buffer is full) fails: that side gives the link up, not waits.
            end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _SEND_TIMEOUT)
        env = {k: v for k, v in os.environ.items() if k not in _PARENT_ONLY_ENV}
        with theirs:
            proc = subprocess.Popen(
                api_command(theirs.fileno(), index, self._settings.log_format),
                pass_fds=[theirs.fileno()],
                env=env,
            )
        conn = Connection(ours.detach())
        conn.send(("settings", self._settings))
        log.info("API process %d started", index, extra={"pid": proc.pid})
        member = _Member(index, proc, conn)
        member.reap()
        name = f"th-api-link-{index}"
        threading.Thread(target=self._read, args=(member,), name=name, daemon=True).start()
        return member

    def _read(self, member: _Member) -> None:
        """The member's link thread: its messages until it hangs up. (A thread
        of its own, not the event loop's reader: the loop would make the
        socket non-blocking, and a large report arrives in pieces.)"""
        while True:
            try:
                message = member.conn.recv()
            except Exception as exc:  # end of file; or a broken stream: either way, gone
                if not isinstance(exc, EOFError):
                    log.error("API process %d: its channel broke: %r", member.index, exc)
                member.connected = False
                member.reasons = ["gone"]
                return
            kind = message[0]
            if kind == "soon":
                self._wake_armer()
            elif kind == "state":
                _, reasons, http_totals, engine_totals, latencies = message
                member.reasons = list(reasons)
                member.reported_s = time.monotonic()
                self.http.report(member.index, http_totals, latencies)
                self._engine_totals[member.index] = engine_totals

    def engine_totals(self) -> dict[str, int]:
        """The API processes' engine counters (their writes), added up."""
        return _summed(self._engine_totals)

    def tick(self, now_s: float, reasons: list[str], figures: Callable[[], Figures]) -> str | None:
        """Every supervision round: send the engine's state when it is due; the
        failure to stop for (an API process exited or hung up), if any."""
        for member in self._members:
            code = member.code()
            if code is not None:
                return f"API process {member.index} exited with status {code}"
            if not member.connected:
                return f"API process {member.index} closed its channel or stopped reading it"
        if now_s >= self._next_report_s:
            self._next_report_s = now_s + REPORT_INTERVAL_S
            self._send_all(("engine", reasons, figures()))
        return None

    def _send_all(self, message: tuple[Any, ...]) -> None:
        for member in self._members:
            if member.connected and room_to_send(member.conn):  # else: paused, skip
                try:
                    member.conn.send(message)
                except OSError:  # it hung up, or stopped reading for long
                    member.connected = False

    def reasons(self) -> list[str]:
        """Why the API processes are not ready (empty: every one is)."""
        now_s = time.monotonic()
        out: list[str] = []
        for member in self._members:
            name = f"api process {member.index}"
            if member.reported_s is None or now_s - member.reported_s > STALE_S:
                reasons = ["starting"] if member.reported_s is None else ["not reporting"]
            else:
                reasons = member.reasons
            out += [f"{name}: {reason}" for reason in reasons]
        return out

    def alive(self) -> bool:
        return all(not m.exited.is_set() and m.connected for m in self._members)

    def stop(self, timeout_s: float) -> bool:
        """SIGTERM to each (it finishes what is in flight), waiting up to
        ``timeout_s``; then SIGKILL. True when every one exited with 0.
        Blocking: call off the event loop."""
        for member in self._members:
            if not member.exited.is_set():
                member.proc.send_signal(signal.SIGTERM)
        deadline_s = time.monotonic() + timeout_s
        clean = True
        for member in self._members:
            if not member.exited.wait(max(0.0, deadline_s - time.monotonic())):
                log.error("API process %d did not stop in time: killed", member.index)
                member.proc.kill()
                member.exited.wait(_KILL_WAIT_S)
            # Killed by that SIGTERM: it had not installed its handler, so it
            # had not started serving (its handlers come before its interfaces).
            clean &= member.code() in (0, -signal.SIGTERM)
            member.conn.close()
        return clean


class EngineLink:
    """An API process's side of its socket to the firing process.

    A reader thread (``th-engine-link``) keeps the engine's latest state;
    sends are thread-safe (the committers' threads send ``soon``, the event
    loop its reports). ``on_gone`` is called once, on the reader's thread,
    when the firing process hangs up.
    """

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._send_lock = threading.Lock()
        self._reasons: list[str] = ["engine: not reporting yet"]
        self._figures: Figures | None = None
        self._reported_s: float | None = None
        self._thread: threading.Thread | None = None
        self._on_gone: Callable[[], None] = _nothing
        self._skipping = False  # the firing process stopped reading: sends skipped

    @classmethod
    def from_fd(cls, fd: int) -> EngineLink:
        return cls(Connection(fd))

    def settings(self) -> Settings:
        """The first message: the firing process's settings."""
        kind, settings = self._conn.recv()
        if kind != "settings" or not isinstance(settings, Settings):
            raise RuntimeError(f"expected the settings first, got {kind!r}")
        return settings

    def start(self, on_gone: Callable[[], None]) -> None:
        self._on_gone = on_gone
        self._thread = threading.Thread(
            target=self._read, args=(on_gone,), name="th-engine-link", daemon=True
        )
        self._thread.start()

    def _read(self, on_gone: Callable[[], None]) -> None:
        while True:
            try:
                kind, reasons, figures = self._conn.recv()
            except Exception as exc:  # end of file; or a broken stream: either way, gone
                detail = "" if isinstance(exc, EOFError) else f" ({exc!r})"
                log.error("the firing process is gone%s: stopping", detail)
                on_gone()
                return
            if kind == "engine":
                self._reasons, self._figures = list(reasons), figures
                self._reported_s = time.monotonic()

    def soon(self) -> None:
        """A row due soon was committed: the firing process's armer should look."""
        self._send(("soon",))

    def report(
        self,
        reasons: list[str],
        http: RequestStats | None,
        http_totals: dict[str, int],
        engine_totals: dict[str, int],
    ) -> None:
        """This process's readiness reasons, its totals, and the request
        latencies since the last report (taken from ``http``)."""
        taken = array.array("d", http.latency.take() if http is not None else [])
        # Skipped, the latencies are dropped: kept, they would grow while it is paused.
        self._send(("state", reasons, http_totals, engine_totals, taken.tobytes()))

    def _room(self) -> bool:
        """Whether the firing process reads its channel (else: skip, and say
        so once)."""
        room = room_to_send(self._conn)
        if room == self._skipping:
            self._skipping = not room
            if room:
                log.info("the firing process reads its channel again")
            else:
                log.warning("the firing process stopped reading its channel (paused?)")
        return room

    def _send(self, message: tuple[Any, ...]) -> None:
        with self._send_lock:
            if not self._room():
                return
            try:
                self._conn.send(message)
            except OSError as exc:  # hung up, or it stopped reading: the stream may be cut
                log.error("cannot tell the firing process: %r; stopping", exc)
                self._on_gone()

    def engine_reasons(self) -> list[str]:
        """Why the engine is not ready, as it last said (empty: ready)."""
        reported_s = self._reported_s
        if reported_s is not None and time.monotonic() - reported_s > STALE_S:
            return ["engine: not reporting"]
        return list(self._reasons)

    def figures(self) -> Figures | None:
        """The engine's figures as last reported (None before the first)."""
        return self._figures


def _nothing() -> None:
    pass
