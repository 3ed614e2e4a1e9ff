"""R1 at start (:mod:`triggerhook.engine.naming`): a name held by a dead
process is taken over, one held by a live one is refused, with the store's
"database" clock faked: each wait of the claim moves it on, and the holder
renews (or not) as the test says."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from support.fakes import FakeClock, FakeStore

from triggerhook.engine.naming import Claimant, NameClaim, released
from triggerhook.errors import InstanceNameInUse
from triggerhook.interfaces import NameHolder

LEASE_MS = 10_000
HERE, ELSEWHERE = "host-1", "host-2"
MY_PID, DEAD_PID, LIVE_PID = 500, 400, 300


class World:
    """A store, its clock, and a holder that renews every third of a lease
    while ``renewing`` (a live process) as the claim's waits move time on."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.store = FakeStore(self.clock.now_ms)
        self.renewing = False
        self.waited_s: list[float] = []
        self._next_renewal_ms = self.clock.now + LEASE_MS / 3

    def hold(self, host: str, pid: int, token: int = 1, age_ms: float = 0) -> None:
        """The holder registered (or last renewed) ``age_ms`` ago."""
        self.clock.advance(-age_ms)
        self.store.register("trigger-1", token, host, pid, LEASE_MS)
        self.clock.advance(age_ms)
        self._next_renewal_ms = self.clock.now - age_ms + LEASE_MS / 3

    def wait(self, seconds: float) -> bool:
        self.waited_s.append(seconds)
        self.clock.advance(seconds * 1000)
        if self.renewing and self.clock.now >= self._next_renewal_ms:
            assert self.store.heartbeat("trigger-1", 1, LEASE_MS)
            self._next_renewal_ms = self.clock.now + LEASE_MS / 3
        return False

    def claim(self, token: int = 2, is_gone: Callable[[int], bool] | None = None) -> NameClaim:
        me = Claimant("trigger-1", token, HERE, MY_PID, LEASE_MS)
        return NameClaim(self.store, me, is_gone or (lambda pid: pid == DEAD_PID), self.wait)

    def holder(self) -> NameHolder:
        holder = self.store.name_holder("trigger-1")
        assert holder is not None
        return holder


@pytest.fixture
def world() -> World:
    return World()


def test_a_free_name_is_registered_without_waiting(world: World) -> None:
    world.claim().run()
    assert world.holder().token == 2 and world.waited_s == []


def test_a_holder_gone_from_this_host_that_missed_a_renewal_is_taken_over_at_once(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    world.hold(HERE, DEAD_PID, age_ms=6_000)  # crashed; restarted after RestartSec=5s
    world.claim().run()
    holder = world.holder()
    assert (holder.token, holder.pid) == (2, MY_PID)
    assert world.waited_s == []
    assert "took over instance name 'trigger-1' from pid 400" in caplog.text
    assert "gone from this host" in caplog.text


def test_a_gone_holder_is_taken_over_once_it_missed_a_renewal(world: World) -> None:
    start_ms = world.clock.now
    world.hold(HERE, DEAD_PID, age_ms=1_000)  # killed a second ago, restarted at once
    world.claim().run()
    assert world.holder().token == 2
    waited_ms = world.clock.now - start_ms
    # Half a lease after its last renewal: 4 s more, within a watch interval.
    assert LEASE_MS / 2 - 1_000 <= waited_ms <= LEASE_MS / 2 - 1_000 + 300, waited_ms
    assert max(world.waited_s) <= 0.25


def test_a_gone_looking_holder_that_renews_is_live_and_refused(world: World) -> None:
    # Same host name, pid not here: another container with the same --hostname.
    world.hold(HERE, DEAD_PID)
    world.renewing = True
    with pytest.raises(InstanceNameInUse) as raised:
        world.claim().run()
    assert (raised.value.host, raised.value.pid) == (HERE, DEAD_PID)
    assert world.holder().token == 1
    assert sum(world.waited_s) <= LEASE_MS / 3000 + 0.25  # seen at its next renewal


def test_this_processs_own_pid_under_a_foreign_token_is_gone(world: World) -> None:
    world.hold(HERE, MY_PID, age_ms=6_000)  # a container's restart: the same pid again
    world.claim(is_gone=lambda pid: False).run()
    assert world.holder().token == 2 and world.waited_s == []


def test_a_name_an_engine_of_this_process_holds_is_not_gone(world: World) -> None:
    world.claim(token=1).run()  # held here, by token 1
    try:
        world.renewing = True
        with pytest.raises(InstanceNameInUse) as raised:
            world.claim(token=2, is_gone=lambda pid: True).run()
        assert raised.value.pid == MY_PID
    finally:
        released("trigger-1", 1)


def test_a_live_pid_on_this_host_is_waited_out_until_its_heartbeat_expires(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    # The pid is a live process, perhaps an unrelated one that reused it: not
    # provably free, but it does not renew, so the name is taken at expiry.
    start_ms = world.clock.now
    world.hold(HERE, LIVE_PID, age_ms=1_000)
    world.claim().run()
    assert world.holder().token == 2
    assert LEASE_MS - 1_000 < world.clock.now - start_ms <= LEASE_MS - 1_000 + 300
    assert "waiting for its heartbeat to expire, at most 9.0 s" in caplog.text
    assert "its heartbeat expired" in caplog.text


def test_a_holder_on_another_host_is_waited_out_and_refused_once_it_renews(
    world: World,
) -> None:
    world.hold(ELSEWHERE, DEAD_PID)  # its pid says nothing here
    world.renewing = True
    with pytest.raises(InstanceNameInUse) as raised:
        world.claim().run()
    assert (raised.value.host, raised.value.pid) == (ELSEWHERE, DEAD_PID)
    assert world.holder().token == 1


def test_of_two_processes_restarting_under_the_name_one_takes_it(world: World) -> None:
    world.hold(HERE, DEAD_PID, age_ms=6_000)
    store = world.store
    real_take = store.take_over_name

    def first_beaten_to_it(
        instance: str, token: int, host: str, pid: int, lease_ms: int, holder: NameHolder
    ) -> bool:
        # The other process's compare-and-set, on the same row as read, lands first.
        assert real_take(instance, 9, host, 901, lease_ms, holder)
        return real_take(instance, token, host, pid, lease_ms, holder)

    store.take_over_name = first_beaten_to_it  # type: ignore[method-assign]
    with pytest.raises(InstanceNameInUse) as raised:
        world.claim().run()
    assert raised.value.pid == 901
    assert world.holder().token == 9


def test_a_holder_that_leaves_while_watched_frees_the_name(world: World) -> None:
    world.hold(ELSEWHERE, LIVE_PID)

    def wait(seconds: float) -> bool:
        world.store.leave("trigger-1", 1)  # a graceful stop
        return world.wait(seconds)

    me = Claimant("trigger-1", 2, HERE, MY_PID, LEASE_MS)
    NameClaim(world.store, me, lambda pid: False, wait).run()
    assert world.holder().token == 2
