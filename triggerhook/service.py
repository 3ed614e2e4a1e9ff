"""The daemon (``triggerhook run``): the engine, the HTTP API and the AMQP
command consumer, stopped gracefully on SIGTERM/SIGINT.

Processes: with ``api_processes`` = 0 all of it runs in one; otherwise
:class:`Service` runs the engine and supervises the API processes, each an
:class:`ApiService` serving the interfaces (:mod:`triggerhook.processes`).

Threads: the main thread runs the uvloop event loop (HTTP API, signal
handling, supervision); the engine, the command consumer and the webhook
bridge (its consumers and delivery threads: in each API process, or in the
one process without them) run their own threads; blocking calls from the
loop go to a small thread pool.

Start-up: READY (sd_notify) is sent only once :meth:`Service.readiness` has
no reasons, i.e. when ``/readyz`` answers 200 (engine running, publisher and
command consumer connected, database reachable with the current schema). A
daemon that is not ready within ``READY_WARN_AFTER_S`` says why (a WARNING
and systemd's STATUS=, then again every ``READY_WARN_EVERY_S``) and keeps
waiting rather than exiting: it is built to ride out a database or broker
outage and catch up, and while waiting it already holds its shards and takes
requests. The bound on a start that never completes is the supervisor's
(systemd's ``TimeoutStartSec``, a container's readiness probe), which can
restart it; a fatal failure (a thread died, the HTTP port is taken) still
exits 1 at once.

Shutdown order: stop taking requests (HTTP, then commands; both finish what is
in flight; then the webhook bridge; the API processes, when there are any),
then stop the engine (fire what is armed, release the shards).
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
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import uvloop

from triggerhook.api.commands import CommandConsumer
from triggerhook.api.http import HttpApi
from triggerhook.app import Figures, Health, TriggerHook
from triggerhook.errors import SchemaError, StoreError, StoreReadOnly, StoreUnavailable
from triggerhook.logs import redact
from triggerhook.processes import REPORT_INTERVAL_S, ApiProcesses, EngineLink
from triggerhook.ratelimit import RateLimitedLog
from triggerhook.sdnotify import Notifier
from triggerhook.webhook.bridge import WebhookBridge

if TYPE_CHECKING:  # grpc is imported by the processes that serve it only
    from triggerhook.api.grpc.server import GrpcApi

log = logging.getLogger(__name__)

EXIT_OK, EXIT_FAILURE = 0, 1
_SUPERVISE_INTERVAL_S = 0.2
# Between readiness probes while waiting to send READY, doubling up to the
# maximum: a quick READY on a normal start, one database query a second
# during a long outage.
_READY_PROBE_FIRST_S = 0.05
_READY_PROBE_MAX_S = 1.0
# The start-up bound (see the module doc): not ready by then, say why.
READY_WARN_AFTER_S = 10.0
READY_WARN_EVERY_S = 60.0
# An API process's stop beyond shutdown_timeout_s: its HTTP runner's and
# command consumer's own grace.
_API_STOP_GRACE_S = 7.0
# A failing dependency's raw error is logged at most this often per kind of
# failure (/readyz may be probed every second).
_DETAIL_LOG_EVERY_S = 60.0

# Readiness reasons name the dependency and the kind of failure only: the raw
# error (host names, ports, server messages) goes to the log, not to /readyz.
# ``{store}``: the store's name (``mysql``; ``sqlite`` in dev mode); ``{kind}``:
# a refusal's (StoreReadOnly.kind: read-only, out of space).
_REFUSED = "{store}: {kind} (writes refused)"
_STORE_REASONS: tuple[tuple[type[Exception], str], ...] = (
    (StoreReadOnly, _REFUSED),
    (StoreUnavailable, "{store}: unreachable"),
    (SchemaError, "{store}: schema missing or not current (`triggerhook db status` says which)"),
    (StoreError, "{store}: query failed"),
)
_STORE_REASON_OTHER = "{store}: check failed"


# How long the gRPC API's calls in flight may take to finish at a stop (as the
# HTTP runner's shutdown timeout).
_GRPC_GRACE_S = 5.0


class _CannotListen(Exception):
    """An interface could not bind its address."""

    def __init__(self, interface: str, address: str, error: OSError) -> None:
        super().__init__(f"{interface}: cannot listen on {address}")
        self.interface = interface
        self.address = address
        self.error = error


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
        # Silence allowed: every engine thread beats at least every second,
        # idle or retrying through an outage (Worker.stalled); a whole interval
        # (and at least 2 s) without a beat means a wedged thread.
        if self._responsive(max(self.interval_s, 2.0)):
            self._notifier.watchdog()
        else:
            self.withheld += 1
            log.error("engine unresponsive: systemd watchdog not pinged")


def _store_reason(exc: Exception, store: str) -> str:
    for kind, reason in _STORE_REASONS:
        if isinstance(exc, kind):
            return reason.format(store=store, kind=getattr(exc, "kind", ""))
    return _STORE_REASON_OTHER.format(store=store)


def _refusal_reason(health: Health, store: str) -> list[str]:
    """The reason the database refusing the engine's writes gives, if it does."""
    refusal = health.store_refusal
    return [] if refusal is None else [_REFUSED.format(store=store, kind=refusal)]


class Service:
    """Runs the daemon's parts for one run; :meth:`run` returns the exit code.

    Built by :func:`triggerhook.wiring.build_daemon`: the library façade first,
    then the interfaces (:meth:`attach`), which report to :meth:`readiness`
    and :meth:`fail` and block on :attr:`executor`.
    """

    def __init__(
        self,
        hook: TriggerHook,
        shutdown_timeout_s: float,
        processes: ApiProcesses | None = None,
        store_name: str = "mysql",
    ) -> None:
        """``processes``: the API processes to start and supervise (None: the
        interfaces, if any, are :meth:`attach`-ed to this process);
        ``store_name``: the database's name in readiness reasons."""
        self.hook = hook
        self._store_name = store_name
        self.processes = processes
        self._shutdown_timeout_s = shutdown_timeout_s
        self.executor = ThreadPoolExecutor(max_workers=8, thread_name_prefix="th-pool")
        self._failure: str | None = None  # the detail, for the log
        self._failure_reason: str | None = None  # the readiness reason: no detail
        self._failed = threading.Event()
        # A failing dependency's raw error, logged once a minute per reason
        # (probes run on pool threads, and often).
        self._details = RateLimitedLog(log, _DETAIL_LOG_EVERY_S)
        self.commands: CommandConsumer | None = None
        self.http: HttpApi | None = None
        self.webhooks: WebhookBridge | None = None
        self.grpc: GrpcApi | None = None
        self._notifier = Notifier()
        self._watchdog = Watchdog(self._notifier, self._responsive)

    def run(self) -> int:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(self._main())

    def attach(
        self,
        http: HttpApi | None,
        commands: CommandConsumer | None,
        grpc: GrpcApi | None = None,
    ) -> None:
        """The interfaces to serve (None: that interface is off)."""
        self.http = http
        self.commands = commands
        self.grpc = grpc

    def attach_webhooks(self, webhooks: WebhookBridge) -> None:
        """The webhook bridge (where the interfaces run: wiring._attach_webhooks)."""
        self.webhooks = webhooks

    def fail(self, name: str, exc: BaseException) -> None:
        """A fatal failure of ``name`` (a thread of an interface): stop, exit 1."""
        self._fail(f"thread {name} failed: {exc!r}", f"{name}: failed")

    def _fail(self, failure: str, reason: str) -> None:
        if self._failure is None:
            self._failure = failure
            self._failure_reason = reason
        self._failed.set()

    def _responsive(self, max_silence_s: float) -> bool:
        alive = self.processes is None or self.processes.alive()
        return alive and self.hook.responsive(max_silence_s)

    def readiness(self) -> list[str]:
        """Why the daemon is not ready (empty: ready). Blocking: checks the
        database. Each reason names a dependency and its kind of failure, never
        the raw error (logged instead, rate-limited)."""
        webhooks = self.webhooks
        reasons = []
        if webhooks is not None and not webhooks.is_connected():
            reasons.append("rabbitmq: webhook bridge not connected")
        if self.processes is None:
            return self.engine_reasons() + reasons + self.own_reasons()
        # The API processes check the same database: their reports say so.
        return self.engine_reasons() + reasons + self.processes.reasons()

    def engine_reasons(self) -> list[str]:
        """Why the engine cannot fire (empty: it can). Does not block."""
        reasons = []
        health = self.hook.health()
        if not health.alive:
            # Health.failure is "thread <name> failed: <error>": the name only.
            failure = health.failure
            reasons.append(f"engine: {failure.partition(':')[0] if failure else 'not running'}")
        if not health.clock_bounded:
            reasons.append("clock: the database's time is not known well enough to fire by")
        if not health.publisher_connected:
            reasons.append("rabbitmq: publisher not connected")
        return reasons + _refusal_reason(health, self._store_name)

    def own_reasons(self) -> list[str]:
        """Why this process's interfaces and database are not ready. Blocking."""
        reasons = []
        if self.commands is not None and not self.commands.is_connected():
            reasons.append("rabbitmq: command consumer not connected")
        if self._failure_reason:
            reasons.append(self._failure_reason)
        try:
            self.hook.check_store()
        except Exception as exc:  # a probe answers, whatever the store raised
            reason = _store_reason(exc, self._store_name)
            detail = redact(str(exc) or type(exc).__name__)
            self._details.warning(reason, "readiness: %s: %s", reason, detail)
            reasons.append(reason)
        return reasons

    async def _main(self) -> int:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        self._handle_signals(loop, stop)
        # Off the loop: R1 may watch a live-looking holder of the instance name
        # for up to a lease, and the loop meanwhile handles signals (and, in an
        # API process, sends its beats).
        await loop.run_in_executor(self.executor, self.hook.start)
        tending = asyncio.ensure_future(self._tend(stop))
        try:
            await self._start_interfaces()
        except _CannotListen as exc:
            log.error("cannot listen on %s: %s", exc.address, exc.error.strerror or exc.error)
            self.fail(exc.interface, exc.error)
        log.info("triggerhook running", extra={"instance": self.hook.instance_id})
        await self._await_ready(stop)
        while not self._must_stop(stop):
            self._watchdog.tick(time.monotonic())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), _SUPERVISE_INTERVAL_S)
        self._notifier.stopping("stopping: firing what is armed, releasing shards")
        tending.cancel()
        return await self._shutdown()

    async def _tend(self, stop: asyncio.Event) -> None:
        """Every ``REPORT_INTERVAL_S`` while running: :meth:`tick`."""
        while not stop.is_set():
            self.tick(time.monotonic())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), REPORT_INTERVAL_S)

    def tick(self, now_s: float) -> None:
        """The API processes get the engine's state; one that ended stops us."""
        if self.processes is None:
            return
        failure = self.processes.tick(now_s, self.engine_reasons(), self._figures)
        if failure is not None:
            self._fail(failure, "api processes: one exited")

    def _figures(self) -> Figures:
        """The engine's figures (with the API processes' writes, see
        :meth:`Engine.count_also`) and the API processes' request totals."""
        figures = self.hook.figures()
        if self.processes is None:
            return figures
        return replace(figures, totals={**figures.totals, **self.processes.http.counters()})

    def _must_stop(self, stop: asyncio.Event) -> bool:
        return stop.is_set() or self._failed.is_set() or self.hook.health().failure is not None

    async def _await_ready(self, stop: asyncio.Event) -> None:
        """Send READY once :meth:`readiness` has no reasons (probed off the
        loop); give up at a stop signal or a fatal failure. No watchdog pings
        meanwhile: systemd's watchdog starts once start-up completed."""
        started_s = time.monotonic()
        warn_at_s = started_s + READY_WARN_AFTER_S
        pause_s = _READY_PROBE_FIRST_S
        while not self._must_stop(stop):
            reasons = await self._probe(stop)
            if reasons is None:  # stopped while probing
                return
            if not reasons:
                self._notifier.ready(f"running as {self.hook.instance_id}")
                waited_ms = round((time.monotonic() - started_s) * 1000)
                log.info("triggerhook ready", extra={"waited_ms": waited_ms})
                return
            now_s = time.monotonic()
            if now_s >= warn_at_s:
                warn_at_s = now_s + READY_WARN_EVERY_S
                why = "; ".join(reasons)
                self._notifier.status(f"starting, not ready: {why}")
                log.warning("not ready after %.0f s, still waiting: %s", now_s - started_s, why)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), pause_s)
            pause_s = min(_READY_PROBE_MAX_S, pause_s * 2)

    async def _probe(self, stop: asyncio.Event) -> list[str] | None:
        """:meth:`readiness` on a pool thread; None if a stop came first (a
        probe blocked on an unanswering database must not delay the stop)."""
        loop = asyncio.get_running_loop()
        probe = loop.run_in_executor(self.executor, self.readiness)
        stopped = asyncio.ensure_future(stop.wait())
        either: set[asyncio.Future[Any]] = {probe, stopped}
        try:
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
        return probe.result() if probe.done() else None

    async def _start_interfaces(self) -> None:
        if self.processes is not None:
            self.processes.start()
            self.hook.observe_http(self.processes.http)
        if self.commands is not None:
            self.commands.start()
        if self.webhooks is not None:
            self.webhooks.start()
        if self.http is not None:
            self.hook.observe_http(self.http.stats)
            try:
                await self.http.start()
            except OSError as exc:
                raise _CannotListen("http", self.http.address, exc) from None
        if self.grpc is not None:
            try:
                self.grpc.start()  # binds at once; its calls run on threads of its own
            except OSError as exc:
                raise _CannotListen("grpc", self.grpc.address, exc) from None

    async def _shutdown(self) -> int:
        """Within one ``shutdown_timeout_s`` for the whole stop (plus the HTTP
        runner's and the metrics' own few seconds): interfaces, then engine."""
        loop = asyncio.get_running_loop()
        deadline_s = time.monotonic() + self._shutdown_timeout_s
        if self.http is not None:
            await self.http.stop()
        if self.grpc is not None:  # calls in flight finish, up to its grace
            await loop.run_in_executor(self.executor, self.grpc.stop, _GRPC_GRACE_S)
        if self.commands is not None:
            consumer = self.commands
            await loop.run_in_executor(self.executor, consumer.stop, _left(deadline_s))
        if self.webhooks is not None:  # what is in flight stays unacked: delivered again
            bridge = self.webhooks
            await loop.run_in_executor(self.executor, bridge.stop, _left(deadline_s))
        if self.processes is not None:
            # Their own stop is bounded by the same timeout, plus their HTTP
            # runner's and command consumer's few seconds of grace.
            budget_s = _left(deadline_s) + _API_STOP_GRACE_S
            stopped = await loop.run_in_executor(self.executor, self.processes.stop, budget_s)
            if not stopped:
                self._fail("an API process did not stop cleanly", "api processes: failed")
        clean = await loop.run_in_executor(self.executor, self.hook.stop, _left(deadline_s))
        self.hook.close()
        self.executor.shutdown(wait=False)
        failure = self.hook.health().failure
        if failure is not None:
            log.error("exiting after a fatal engine failure: %s", failure)
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
                log.warning("second signal: exiting at once; shards are taken over after the lease")
                os._exit(128 + signum)
            log.info("signal %s: stopping gracefully", signal.Signals(signum).name)
            stop.set()

        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, on_signal, signum)


class ApiService(Service):
    """An API process (:mod:`triggerhook.processes`): the interfaces over an
    engine that only writes; the firing process's state comes through
    ``link``, and this one's goes back every ``REPORT_INTERVAL_S``. It sends
    systemd nothing (the firing process does) and stops, exiting 1, when the
    firing process is gone."""

    def __init__(
        self, hook: TriggerHook, shutdown_timeout_s: float, link: EngineLink, sole: bool
    ) -> None:
        super().__init__(hook, shutdown_timeout_s)
        self.link = link
        self.sole = sole  # the only API process: its request counters are the daemon's

    def engine_reasons(self) -> list[str]:
        """The firing process's, as it last said, and this one's write path
        (a refusal both see is named once)."""
        return list(dict.fromkeys(self.link.engine_reasons() + self._write_path()))

    def _write_path(self) -> list[str]:
        health = self.hook.health()
        refused = _refusal_reason(health, self._store_name)
        if health.alive:
            return refused
        failure = health.failure
        return [f"api: {failure.partition(':')[0] if failure else 'not running'}", *refused]

    def figures(self) -> Figures:
        """What ``/v1/status`` and ``/metrics`` show: the firing process's
        figures, with every API process's request counters added up. Until
        the firing process has had this one's first report, this one's own
        counters stand in (so a scrape right after start finds them); the
        sole API process shows its own, which are the sums, as they are now."""
        figures = self.link.figures() or self.hook.figures()
        own = self._http_totals()
        if self.sole:  # its own counters are the daemon's, and live
            return replace(figures, totals={**figures.totals, **own})
        return replace(figures, totals={**own, **figures.totals})

    def _http_totals(self) -> dict[str, int]:
        http = self.http
        return http.counters() if http is not None else {}

    async def _main(self) -> int:
        beating = asyncio.ensure_future(self._beat())
        try:
            return await super()._main()
        finally:
            beating.cancel()

    async def _beat(self) -> None:
        """This process's sign of life, sent by the event loop itself every
        ``REPORT_INTERVAL_S`` from its start to its end (stopping included):
        the firing process kills and replaces an API process whose beats stop
        (hung: ``processes.HUNG_AFTER_S``)."""
        while True:
            self.link.beat()
            await asyncio.sleep(REPORT_INTERVAL_S)

    async def _tend(self, stop: asyncio.Event) -> None:
        self.link.start(on_gone=lambda: self._fail("the firing process is gone", "engine: gone"))
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            await loop.run_in_executor(self.executor, self._report)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), REPORT_INTERVAL_S)

    def _report(self) -> None:
        """This process's readiness and request figures, to the firing process
        (a pool thread: the readiness check queries the database). The reasons
        are its ``/readyz``'s, the engine's state as this process last had it
        included: READY waits until every API process would answer 200."""
        reasons = self.readiness()
        stats = self.http.stats if self.http is not None else None
        self.link.report(reasons, stats, self._http_totals(), self.hook.engine.counters())
