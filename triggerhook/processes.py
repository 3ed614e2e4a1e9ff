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
  latencies)``: why the API process's ``/readyz`` does not answer 200 (the
  engine's state as it last had it included), its request and write
  counters (totals since it started), and its request latencies since the
  last report; the firing process adds them to its figures and metrics. And
  ``("beat",)`` every ``REPORT_INTERVAL_S``, sent by its event loop itself
  (not a pool thread, which may wait on the database): its sign of life.

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

Failures: an API process that exits (or closes its channel) makes the
firing process stop gracefully and exit 1 (its supervisor restarts the
daemon: systemd's ``Restart=``); when the firing process is gone (end of file
on the socket) the API processes stop. A report older than ``STALE_S`` counts
as "not ready". An API process that is **hung** — no beat for ``HUNG_AFTER_S``
(none within ``FIRST_BEAT_S`` of its start), or it stopped reading its
channel in the middle of a message — is killed (SIGKILL) and replaced by a
new one under the same index: its prefetched commands go back to the queue
as its broker connection dies, and the new one takes them. More than
``MAX_REPLACEMENTS`` replacements within ``REPLACEMENT_WINDOW_S`` stop the
daemon (exit 1). The silence is counted only while the firing process itself
runs: after its own pause (a stopped VM) every API process gets a fresh bound.
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
from collections import deque
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
# An API process that sent no beat for this long is hung (it beats every
# REPORT_INTERVAL_S: 40 beats missed; a GC pause or a busy loop takes far
# less), or sent none this long after it was started (Python's start, the
# imports, the settings: a few seconds even on a loaded machine).
HUNG_AFTER_S = 10.0
FIRST_BEAT_S = 30.0
# Replacing hung API processes more often than this stops the daemon instead.
MAX_REPLACEMENTS = 3
REPLACEMENT_WINDOW_S = 600.0
# Supervision rounds this far apart mean the firing process itself was paused
# (or starved): the API processes' silence is counted afresh from then.
_OWN_PAUSE_S = 2.0
# What systemd hands the main process only: a child must not notify in its name.
_PARENT_ONLY_ENV = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID")
_KILL_WAIT_S = 5.0
# A process that dies closes its channel as it goes, which the link thread may
# see before the reaper has its exit status: this long for the status, so the
# failure says how it died (a signal, a crash) rather than only "closed".
_EXIT_WAIT_S = 1.0
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

    def report(self, serial: int, totals: dict[str, int], latencies_ms: bytes) -> None:
        """``serial``: the reporting process's (a replaced one's last totals
        stay in the sums, which therefore never go down)."""
        self._totals[serial] = totals
        self.latency.extend(array.array("d", latencies_ms))

    def counters(self) -> dict[str, int]:
        return _summed(self._totals)


@dataclass
class _Member:
    """One API process, as the firing process sees it. Its reaper thread
    waits for it to exit (a blocking ``waitpid``: no polling, which under a
    faked clock, as the clock tests run, can fail) and sets ``exited``.
    ``serial``: unique per process started, where ``index`` is its slot."""

    index: int
    serial: int
    proc: subprocess.Popen[bytes]
    conn: Connection
    started_s: float  # monotonic
    reasons: list[str] = field(default_factory=lambda: ["starting"])
    reported_s: float | None = None  # monotonic, of the last report
    beat_s: float | None = None  # monotonic, of the last beat
    connected: bool = True
    stuck: bool = False  # stopped reading its channel in the middle of a message
    killed_as_hung: bool = False  # SIGKILLed: replaced once it exited
    exited: threading.Event = field(default_factory=threading.Event)
    # Set by its link thread when it stops reading: its channel is closed only
    # after that, or the thread's blocked recv would fail on a closed (or
    # reused) file descriptor.
    unread: threading.Event = field(default_factory=threading.Event)

    def close_channel(self) -> None:
        """Close its channel once its link thread stopped reading it (the
        process exited: the thread reads the end of the stream); a link
        thread still reading after the wait gets a closed channel."""
        self.unread.wait(_KILL_WAIT_S)
        self.conn.close()

    def reap(self) -> None:
        def wait() -> None:
            self.proc.wait()
            self.exited.set()

        name = f"th-api-reaper-{self.index}"
        threading.Thread(target=wait, name=name, daemon=True).start()

    def code(self) -> int | None:
        """Its exit status once it exited (negative: the signal that ended it)."""
        return self.proc.returncode if self.exited.is_set() else None

    def hung(self, now_s: float) -> str | None:
        """Why it counts as hung at ``now_s`` (monotonic), or None."""
        if self.stuck:
            return "it stopped reading its channel"
        if self.beat_s is None:
            if now_s - self.started_s > FIRST_BEAT_S:
                return f"no sign of life {now_s - self.started_s:.1f} s after its start"
            return None
        if now_s - self.beat_s > HUNG_AFTER_S:
            return f"no sign of life for {now_s - self.beat_s:.1f} s"
        return None

    def count_from(self, now_s: float) -> None:
        """Count its silence from ``now_s`` (the firing process was paused)."""
        self.started_s = max(self.started_s, now_s)
        if self.beat_s is not None:
            self.beat_s = max(self.beat_s, now_s)


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
        self._engine_totals: dict[int, dict[str, int]] = {}  # by serial
        self._members: list[_Member] = []  # by index
        self._next_report_s = 0.0
        self._serials = 0
        self._last_tick_s: float | None = None
        self._replaced_s: deque[float] = deque()  # when hung ones were killed (monotonic)

    def start(self) -> None:
        for index in range(self._count):
            self._members.append(self._spawn(index))

    def _spawn(self, index: int) -> _Member:
        self._serials += 1
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
        member = _Member(index, self._serials, proc, conn, time.monotonic())
        member.reap()
        name = f"th-api-link-{index}"
        threading.Thread(target=self._read, args=(member,), name=name, daemon=True).start()
        return member

    def _read(self, member: _Member) -> None:
        """The member's link thread: its messages until it hangs up. (A thread
        of its own, not the event loop's reader: the loop would make the
        socket non-blocking, and a large report arrives in pieces.)"""
        try:
            self._read_until_gone(member)
        finally:
            member.unread.set()

    def _read_until_gone(self, member: _Member) -> None:
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
            if kind == "beat":
                member.beat_s = time.monotonic()
            elif kind == "soon":
                self._wake_armer()
            elif kind == "state":
                _, reasons, http_totals, engine_totals, latencies = message
                member.reasons = list(reasons)
                member.reported_s = time.monotonic()
                self.http.report(member.serial, http_totals, latencies)
                self._engine_totals[member.serial] = engine_totals

    def engine_totals(self) -> dict[str, int]:
        """The API processes' engine counters (their writes), added up."""
        return _summed(self._engine_totals)

    def tick(self, now_s: float, reasons: list[str], figures: Callable[[], Figures]) -> str | None:
        """Every supervision round (``now_s``: monotonic): replace hung API
        processes, send the engine's state when it is due; the failure to stop
        for (an API process exited or closed its channel; too many hung), if any."""
        self._notice_own_pause(now_s)
        for slot, member in enumerate(self._members):
            failure = self._supervise(slot, member, now_s)
            if failure is not None:
                return failure
        if now_s >= self._next_report_s:
            self._next_report_s = now_s + REPORT_INTERVAL_S
            self._send_all(("engine", reasons, figures()))
        return None

    def _notice_own_pause(self, now_s: float) -> None:
        last_s, self._last_tick_s = self._last_tick_s, now_s
        if last_s is not None and now_s - last_s > _OWN_PAUSE_S:
            log.warning(
                "the firing process looked at its API processes %.1f s after the last time "
                "(paused or starved?): their silence counts from now",
                now_s - last_s,
            )
            for member in self._members:
                member.count_from(now_s)

    def _supervise(self, slot: int, member: _Member, now_s: float) -> str | None:
        if member.killed_as_hung:
            if member.exited.is_set():  # its sockets are closed: start the next one
                member.close_channel()
                self._members[slot] = self._spawn(member.index)
            return None
        code = member.code()
        if code is None and not member.connected and member.exited.wait(_EXIT_WAIT_S):
            code = member.code()  # it closed its channel as it died: say how it died
        if code is not None:
            return f"API process {member.index} exited with status {code}"
        if not member.connected:
            return f"API process {member.index} closed its channel"
        why = member.hung(now_s)
        return None if why is None else self._kill_hung(member, why, now_s)

    def _kill_hung(self, member: _Member, why: str, now_s: float) -> str | None:
        """SIGKILL a hung API process (it is replaced once it exited); the
        failure to stop for when too many were lately."""
        self._replaced_s.append(now_s)
        while now_s - self._replaced_s[0] > REPLACEMENT_WINDOW_S:
            self._replaced_s.popleft()
        if len(self._replaced_s) > MAX_REPLACEMENTS:
            return (
                f"API process {member.index} hung ({why}), the {len(self._replaced_s)}th "
                f"in {REPLACEMENT_WINDOW_S:.0f} s: not replacing it again"
            )
        log.error(
            "API process %d is hung (%s): killing it and starting another",
            member.index,
            why,
            extra={"pid": member.proc.pid},
        )
        member.killed_as_hung = True
        member.proc.kill()  # SIGKILL, also to a stopped process; it is ours, not reaped yet
        return None

    def _send_all(self, message: tuple[Any, ...]) -> None:
        for member in self._members:
            if not member.connected or member.stuck or not room_to_send(member.conn):
                continue  # gone, or paused: skip
            try:
                member.conn.send(message)
            except (BrokenPipeError, ConnectionResetError):  # it hung up: exiting
                member.connected = False
            except OSError:  # it stopped reading for long, maybe mid-message: hung
                member.stuck = True

    def reasons(self) -> list[str]:
        """Why the API processes are not ready, as each last reported (empty:
        every one's ``/readyz`` answers 200)."""
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
        """Every API process runs, or is being replaced (hung: killed)."""
        return all(
            m.killed_as_hung or (not m.exited.is_set() and m.connected) for m in self._members
        )

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
            # One killed as hung was being replaced: no fault of this stop.
            clean &= member.killed_as_hung or member.code() in (0, -signal.SIGTERM)
            member.close_channel()
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

    def beat(self) -> None:
        """This process's sign of life; called by its event loop (the firing
        process replaces an API process whose beats stop: ``HUNG_AFTER_S``).
        Never waits: while another thread sends, this beat is skipped."""
        self._send(("beat",), wait=False)

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

    def _send(self, message: tuple[Any, ...], wait: bool = True) -> None:
        if not self._send_lock.acquire(blocking=wait):
            return
        try:
            if not self._room():
                return
            self._conn.send(message)
        except OSError as exc:  # hung up, or it stopped reading: the stream may be cut
            log.error("cannot tell the firing process: %r; stopping", exc)
            self._on_gone()
        finally:
            self._send_lock.release()

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
