"""The watchdog's rule (issue 29, defect 5): systemd's watchdog is pinged only
while every engine thread makes progress — scheduler, armer, publisher,
confirmer and shard keeper — and a thread that is idle, or retrying through a
database outage, still does. A real :class:`Engine` over the fakes
(``support.fakes``); one thread at a time is wedged on a store call that
never returns (or a lock it cannot get), and the pings on a real notify
socket stop until it moves again."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from support.fakes import FakeClock, FakePublisher, FakeStore
from support.notify import NotifySocket
from support.waiting import wait_for

from triggerhook.domain.task import Task
from triggerhook.engine.engine import Engine, EngineConfig
from triggerhook.errors import StoreUnavailable
from triggerhook.runtime import progress
from triggerhook.runtime.worker import Worker
from triggerhook.sdnotify import Notifier
from triggerhook.service import Watchdog

# WATCHDOG_USEC of 2 s: a ping is due every second, and a thread silent for
# 2 s (the Watchdog's floor) counts as wedged.
WATCHDOG_USEC = 2_000_000
SILENCE_S = 2.0


@dataclass
class Rig:
    engine: Engine
    store: FakeStore
    publisher: FakePublisher
    watchdog: Watchdog
    sock: NotifySocket
    now_s: float = 1000.0  # the ticks' own time: a ping is due at every tick

    def pinged(self) -> bool:
        """One watchdog round: True when it pinged systemd."""
        before = self.sock.count("WATCHDOG")
        withheld = self.watchdog.withheld
        self.now_s += 1.0
        self.watchdog.tick(self.now_s)
        if self.watchdog.withheld > withheld:
            return False
        assert self.sock.wait_for("WATCHDOG", before + 1, timeout_s=5)
        return True


def _config(lease_ms: int) -> EngineConfig:
    return EngineConfig(
        instance="wd",
        max_tasks_in_memory=1000,
        send_buffer_size=100,
        arm_ahead_ms=200,
        arm_interval_ms=25,
        arm_batch_size=100,
        shard_lease_ms=lease_ms,
        lease_margin_ms=100,
        confirm_batch_size=10,
        confirm_max_delay_ms=10,
        schedule_batch_size=10,
        commit_queue_max=100,
        shutdown_timeout_s=2.0,
    )


@contextlib.contextmanager
def _rig(lease_ms: int) -> Iterator[Rig]:
    clock = FakeClock()
    store = FakeStore(clock.now_ms, shard_count=4)
    publisher = FakePublisher()
    engine = Engine(_config(lease_ms), store, clock, lambda *_: publisher)
    with NotifySocket() as sock:
        notifier = Notifier({"NOTIFY_SOCKET": sock.path, "WATCHDOG_USEC": str(WATCHDOG_USEC)})
        rig = Rig(engine, store, publisher, Watchdog(notifier, engine.responsive), sock)
        engine.start()
        try:
            wait_for(lambda: len(engine.shards) == 4, 10, "the keeper took no shards")
            yield rig
        finally:
            engine.stop(2.0)


@pytest.fixture
def rig() -> Iterator[Rig]:
    # Keeper rounds every second: a wedged store call is met at once.
    with _rig(lease_ms=3000) as made:
        yield made


class Gate:
    """A store call that blocks until opened (a wedge, not a slow database:
    the fake store is no database connection, so nothing excuses the wait)."""

    def __init__(self) -> None:
        self.opened = threading.Event()
        self.entered = threading.Event()

    def wrap(self, call: Callable[..., object]) -> Callable[..., object]:
        def blocked(*args: object, **kwargs: object) -> object:
            self.entered.set()
            self.opened.wait(30)
            return call(*args, **kwargs)

        return blocked


def _wedge_store(method: str) -> Callable[[Rig, Gate], None]:
    def wedge(rig: Rig, gate: Gate) -> None:
        setattr(rig.store, method, gate.wrap(getattr(rig.store, method)))
        if method == "delete_fired":  # the confirmer calls it once a confirm came
            rig.engine.confirmer.confirmed([Task("t1", 1, "rk", b"")])

    return wedge


def _wedge_scheduler(rig: Rig, gate: Gate) -> None:
    """Hold the scheduler's lock: its loop cannot go round."""

    def hold() -> None:
        with rig.engine.scheduler._cond:
            gate.entered.set()
            gate.opened.wait(30)

    threading.Thread(target=hold, daemon=True).start()


def _wedge_publisher(rig: Rig, gate: Gate) -> None:
    rig.publisher.wedged = True
    gate.entered.set()

    def unwedge() -> None:
        gate.opened.wait(30)
        rig.publisher.wedged = False

    threading.Thread(target=unwedge, daemon=True).start()


WEDGES = {
    "th-shards": _wedge_store("heartbeat"),
    "th-armer": _wedge_store("arm"),
    "th-confirmer": _wedge_store("delete_fired"),
    "th-scheduler": _wedge_scheduler,
    "th-publisher": _wedge_publisher,
}


@pytest.mark.parametrize("thread", list(WEDGES))
def test_no_ping_while_one_engine_thread_makes_no_progress(
    rig: Rig, thread: str, caplog: pytest.LogCaptureFixture
) -> None:
    assert rig.pinged()
    gate = Gate()
    WEDGES[thread](rig, gate)
    try:
        assert gate.entered.wait(10), f"{thread} never reached the wedge"
        wait_for(
            lambda: thread in rig.engine.stalled(SILENCE_S),
            10,
            lambda: f"{thread} still counts as progressing: {rig.engine.stalled(SILENCE_S)}",
        )
        assert rig.engine.stalled(SILENCE_S) == [thread]  # only that one
        assert not rig.pinged()
        assert not rig.pinged()  # for as long as it stays wedged
        assert f"no progress for over 2 s: {thread}" in caplog.text
    finally:
        gate.opened.set()
    wait_for(lambda: not rig.engine.stalled(SILENCE_S), 10, "it never moved again")
    assert rig.pinged()


def test_an_idle_engine_keeps_getting_pinged() -> None:
    # A 30 s lease: the keeper's rounds are 10 s apart; it beats while it waits.
    with _rig(lease_ms=30_000) as rig:
        deadline_s = time.monotonic() + 2.5 * SILENCE_S
        while time.monotonic() < deadline_s:
            assert rig.pinged(), rig.engine.stalled(SILENCE_S)
            threading.Event().wait(0.5)
        assert rig.watchdog.withheld == 0


def test_a_thread_retrying_through_a_database_outage_is_making_progress() -> None:
    # Back-offs of up to 5 s (a 30 s lease), longer than the silence allowed:
    # a thread beats while it backs off.
    with _rig(lease_ms=30_000) as rig:
        rig.store.fail_next("heartbeat", *[StoreUnavailable("down")] * 1000)
        rig.engine.keeper.wake()
        # From the 8th failure on, each back-off is 2.5-5 s (its cap, 5 s, halved by jitter).
        wait_for(lambda: rig.engine.keeper.transient_errors >= 8, 30, "no long back-off")
        deadline_s = time.monotonic() + 2.5 * SILENCE_S
        while time.monotonic() < deadline_s:
            assert rig.pinged(), rig.engine.stalled(SILENCE_S)
            threading.Event().wait(0.5)


class _InDatabase(Worker):
    """A thread inside one database call that does not return (yet)."""

    def __init__(self) -> None:
        super().__init__("th-test", lambda _name, _exc: None)
        self.inside = threading.Event()
        self.done = threading.Event()

    def run(self) -> None:
        outer = progress.call_begins()
        self.inside.set()
        self.done.wait(30)
        progress.call_ends(outer)


def test_a_thread_waiting_in_a_database_call_is_stalled_only_past_the_calls_bound() -> None:
    worker = _InDatabase()
    worker.start()
    try:
        assert worker.inside.wait(5)
        now_s = time.monotonic()
        assert not worker.stalled(now_s + 10 * SILENCE_S, SILENCE_S)
        assert worker.stalled(now_s + progress.DATABASE_CALL_MAX_S + 1, SILENCE_S)
    finally:
        worker.done.set()
        worker.join(5)
    assert progress.waiting_since(worker._thread.ident if worker._thread else None) is None
