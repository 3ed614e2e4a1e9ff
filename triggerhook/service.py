"""The daemon (``triggerhook run``): the engine, the HTTP API and the AMQP
command consumer in one process, stopped gracefully on SIGTERM/SIGINT.

Threads: the main thread runs the uvloop event loop (HTTP API, signal
handling, supervision); the engine and the command consumer run their own
threads; blocking calls from the loop go to a small thread pool.

Shutdown order: stop taking requests (HTTP, then commands; both finish what is
in flight), then stop the engine (fire what is armed, release claims).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import uvloop

from triggerhook.api.commands import CommandConsumer
from triggerhook.api.http import HttpApi
from triggerhook.app import TriggerHook
from triggerhook.errors import TriggerHookError
from triggerhook.sdnotify import Notifier
from triggerhook.settings import Settings

log = logging.getLogger(__name__)

EXIT_OK, EXIT_FAILURE = 0, 1
_SUPERVISE_INTERVAL_S = 0.2


def _left(deadline_s: float) -> float:
    return max(0.0, deadline_s - time.monotonic())


class Watchdog:
    """Pings systemd's watchdog (``WatchdogSec=``) at half its timeout, but only
    while the engine is responsive: a dead or wedged engine thread stops the
    pings, and systemd restarts the daemon."""

    def __init__(self, notifier: Notifier, responsive: Callable[[float], bool]) -> None:
        self._notifier = notifier
        self._responsive = responsive
        timeout_s = notifier.watchdog_s
        self.interval_s = None if timeout_s is None else timeout_s / 2
        self._next_s = 0.0
        self.withheld = 0

    def tick(self, now_s: float) -> None:
        if self.interval_s is None or now_s < self._next_s:
            return
        self._next_s = now_s + self.interval_s
        # Silence allowed: the timed threads beat every second; a whole
        # interval (and at least 2 s) without a beat means a wedged thread.
        if self._responsive(max(self.interval_s, 2.0)):
            self._notifier.watchdog()
        else:
            self.withheld += 1
            log.error("engine unresponsive: systemd watchdog not pinged")


class Service:
    """Owns the daemon's parts for one run; :meth:`run` returns the exit code."""

    def __init__(self, hook: TriggerHook, settings: Settings) -> None:
        self.hook = hook
        self.settings = settings
        self._executor = ThreadPoolExecutor(max_workers=8, thread_name_prefix="th-pool")
        self._failure: str | None = None
        self._failed = threading.Event()
        self.commands: CommandConsumer | None = None
        self.http: HttpApi | None = None
        self._notifier = Notifier()
        self._watchdog = Watchdog(self._notifier, hook.engine.responsive)

    def run(self) -> int:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(self._main())

    def _fail(self, name: str, exc: BaseException) -> None:
        if self._failure is None:
            self._failure = f"thread {name} failed: {exc!r}"
        self._failed.set()

    def readiness(self) -> list[str]:
        """Why the daemon is not ready (empty: ready). Blocking: checks the database."""
        reasons = []
        engine = self.hook.engine
        if not engine.alive():
            reasons.append(f"engine: {engine.failure or 'not running'}")
        if not engine.publisher.is_connected():
            reasons.append("rabbitmq: publisher not connected")
        if self.commands is not None and not self.commands.is_connected():
            reasons.append("rabbitmq: command consumer not connected")
        if self._failure:
            reasons.append(self._failure)
        try:
            self.hook.check_store()
        except TriggerHookError as exc:
            reasons.append(f"mysql: {exc}")
        return reasons

    async def _main(self) -> int:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        self._handle_signals(loop, stop)
        self.hook.start()
        try:
            await self._start_interfaces()
        except OSError as exc:
            log.error(
                "cannot listen on %s:%s: %s",
                self.settings.http_host,
                self.settings.http_port,
                exc.strerror or exc,
            )
            self._fail("http", exc)
        log.info("triggerhook running", extra={"instance": self.hook.instance_id})
        if not self._failed.is_set():
            self._notifier.ready(f"running as {self.hook.instance_id}")
        engine_failed = self.hook.engine.failed
        while not (stop.is_set() or engine_failed.is_set() or self._failed.is_set()):
            self._watchdog.tick(time.monotonic())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), _SUPERVISE_INTERVAL_S)
        self._notifier.stopping("stopping: firing what is armed, releasing claims")
        return await self._shutdown()

    async def _start_interfaces(self) -> None:
        if self.settings.commands_enabled:
            self.commands = CommandConsumer(self.hook, self.settings, self._fail)
            self.commands.start()
        if self.settings.http_enabled:
            self.http = HttpApi(self.hook, self.settings, self.readiness, self._executor)
            self.hook.observe_http(self.http.stats)
            await self.http.start()

    async def _shutdown(self) -> int:
        """Within one ``shutdown_timeout_s`` for the whole stop (plus the HTTP
        runner's and the metrics' own few seconds): interfaces, then engine."""
        loop = asyncio.get_running_loop()
        deadline_s = time.monotonic() + self.settings.shutdown_timeout_s
        if self.http is not None:
            await self.http.stop()
        if self.commands is not None:
            consumer = self.commands
            await loop.run_in_executor(self._executor, consumer.stop, _left(deadline_s))
        clean = await loop.run_in_executor(self._executor, self.hook.stop, _left(deadline_s))
        self.hook.close()
        self._executor.shutdown(wait=False)
        engine = self.hook.engine
        if engine.failed.is_set():
            log.error("exiting after a fatal engine failure: %s", engine.failure)
            return EXIT_FAILURE
        if self._failed.is_set():
            log.error("exiting after a fatal failure: %s", self._failure)
            return EXIT_FAILURE
        if not clean:
            log.warning("stopped with unpublished tasks; they were released for others to fire")
        log.info("triggerhook stopped")
        return EXIT_OK

    @staticmethod
    def _handle_signals(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
        def on_signal(signum: int) -> None:
            if stop.is_set():
                log.warning("second signal: exiting at once; claims expire after the lease")
                os._exit(128 + signum)
            log.info("signal %s: stopping gracefully", signal.Signals(signum).name)
            stop.set()

        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, on_signal, signum)
