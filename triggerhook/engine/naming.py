"""R1 at start: hold the instance name, taking it over from a dead holder.

``docs/design/ownership.md`` (R1) is the rule; this is its code. A process
registers its name; when a holder's heartbeat has not expired yet it
**watches** the holder's row instead of refusing at once:

* the row changes (the holder renewed, or another process took the name):
  a live holder, :class:`~triggerhook.errors.InstanceNameInUse` (exit 2);
* the holder is provably gone (this host, its pid is no process here or is
  this one's own pid) and has missed a renewal (its heartbeat is older than
  half a lease): taken over at once;
* otherwise (another host, or a live process under its pid, perhaps an
  unrelated one): taken over once its heartbeat expired.

Every takeover is a compare-and-set on the row as read
(:meth:`~triggerhook.interfaces.TaskStore.take_over_name`). Runs on the
thread that starts the engine, before any engine thread: it blocks for at
most one lease (and a watch interval).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from triggerhook.errors import InstanceNameInUse, StoreError
from triggerhook.interfaces import NameHolder, TaskStore

log = logging.getLogger(__name__)

# How often the holder's row is read again while watched: a live holder
# renews every third of a lease, so a refusal comes within that.
WATCH_INTERVAL_S = 0.25
# A wait between two reads is never shorter (no spinning on a store that
# keeps answering the same).
_MIN_WAIT_S = 0.01
# Registering again after the holder's row vanished (it left) this many times.
_TRIES = 5
# (instance, token) of every name an engine of this process holds: a holder
# row with this process's pid and one of these tokens is alive, here.
_HELD_HERE: set[tuple[str, int]] = set()
_HELD_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class Claimant:
    """The process that wants the name: what its ``th_members`` row will say."""

    instance: str
    token: int
    host: str
    pid: int
    lease_ms: int


def pid_gone(pid: int) -> bool:
    """No process has ``pid`` here, or only a zombie (it ended; its parent
    has not reaped it yet). A process of another user exists (EPERM)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)  # signal 0: only asks whether it exists
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):  # no /proc (or hidden): it exists, as far as we know
        return False
    return state in ("Z", "X")


def released(instance: str, token: int) -> None:
    """This process's engine gave the name up (or stopped holding it)."""
    with _HELD_LOCK:
        _HELD_HERE.discard((instance, token))


class NameClaim:
    """Holds ``me.instance`` for ``me.token`` (:meth:`run`), or raises
    :class:`~triggerhook.errors.InstanceNameInUse`. ``is_gone(pid)`` and
    ``wait(seconds)`` are the host's (a test passes its own)."""

    def __init__(
        self,
        store: TaskStore,
        me: Claimant,
        is_gone: Callable[[int], bool] = pid_gone,
        wait: Callable[[float], object] | None = None,
    ) -> None:
        self._store = store
        self._me = me
        self._is_gone = is_gone
        self._wait = wait if wait is not None else threading.Event().wait

    def run(self) -> None:
        me = self._me
        for _ in range(_TRIES):
            try:
                self._store.register(me.instance, me.token, me.host, me.pid, me.lease_ms)
            except InstanceNameInUse:
                holder = self._store.name_holder(me.instance)
                if holder is None or not self._watch(holder):
                    continue  # it left meanwhile: register again
            with _HELD_LOCK:
                _HELD_HERE.add((me.instance, me.token))
            return
        raise StoreError(f"instance name {me.instance!r} kept changing hands; retry")

    def gone(self, holder: NameHolder) -> bool:
        """The holder is provably not a live process: on this host, and its
        pid is no process here, or this process's own under a token no
        engine here holds (a container's new process may get the dead one's)."""
        me = self._me
        if holder.host != me.host:
            return False
        if holder.pid == me.pid:
            with _HELD_LOCK:
                return (me.instance, holder.token) not in _HELD_HERE
        return self._is_gone(holder.pid)

    def take_at_ms(self, holder: NameHolder, gone: bool) -> int:
        """When (database time) the name may be taken from ``holder`` unless
        it renews: a gone holder once it missed a renewal (due every third
        of a lease: its heartbeat is older than half a lease), any other once
        its heartbeat expired."""
        if gone:
            return holder.heartbeat_until_ms - self._me.lease_ms // 2
        return holder.heartbeat_until_ms + 1

    def _watch(self, first: NameHolder) -> bool:
        """Watch ``first``'s row until the name can be taken (True: taken) or
        the row vanished (False); raises InstanceNameInUse once it moves."""
        gone = self.gone(first)
        take_at_ms = self.take_at_ms(first, gone)
        self._say_waiting(first, gone, take_at_ms - first.now_ms)
        current: NameHolder | None = first
        while current is not None:
            if _moved(first, current):
                if current.live:
                    raise InstanceNameInUse(self._me.instance, current.host, current.pid)
                return False  # changed hands and expired again: register as usual
            if current.now_ms >= take_at_ms and self._take(first, gone):
                return True
            left_s = max(_MIN_WAIT_S, (take_at_ms - current.now_ms) / 1000)
            self._wait(min(WATCH_INTERVAL_S, left_s))
            current = self._store.name_holder(self._me.instance)
        return False

    def _take(self, holder: NameHolder, gone: bool) -> bool:
        me = self._me
        if not self._store.take_over_name(
            me.instance, me.token, me.host, me.pid, me.lease_ms, holder
        ):
            return False  # it changed: the next read says how
        why = "gone from this host" if gone else "its heartbeat expired"
        log.warning(
            "took over instance name %r from pid %d on host %r (%s)",
            me.instance,
            holder.pid,
            holder.host,
            why,
        )
        return True

    def _say_waiting(self, holder: NameHolder, gone: bool, wait_ms: int) -> None:
        if wait_ms <= 0:
            return
        if gone:
            what = "which is gone from this host: taking the name over unless it renews within"
        else:
            what = "which may be alive: waiting for its heartbeat to expire, at most"
        log.warning(
            "instance name %r is held by pid %d on host %r, %s %.1f s (not ready meanwhile)",
            self._me.instance,
            holder.pid,
            holder.host,
            what,
            wait_ms / 1000,
        )


def _moved(first: NameHolder, now: NameHolder) -> bool:
    return (now.token, now.heartbeat_until_ms) != (first.token, first.heartbeat_until_ms)
