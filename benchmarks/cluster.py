"""The local cluster of ``scripts/cluster up --no-daemons`` as the benchmarks
use it (:mod:`benchmarks.instances`): its servers' URLs and processes, a
database and a quorum queue of a scenario's own on it, and ``k`` daemons
started together on them, their shards spread, stopped together.

The cluster is three Galera nodes behind HAProxy (127.0.0.1:3310, one writer
at a time) and three RabbitMQ nodes (5681-5683), all on this machine; the
default MariaDB and RabbitMQ are not used. Each daemon gets its own instance
name and HTTP port, every broker node in its ``amqp_url`` (daemon i's own
node, ((i - 1) mod 3) + 1, first) and ``amqp_queue_type = quorum``. Spread:
every shard owned, by the k daemons, none above its fair share
(``ceil(shards / k)``; docs/design/ownership.md, R2).

The CPU groups (:class:`GroupMeter`): *daemons* (every daemon process and its
children), *Galera* (the three mariadbd), *Galera writer* (galera1, part of
Galera), *RabbitMQ* (the three beam.smp), *RabbitMQ node 1* (part of it: the
events queue's leader), *HAProxy*, *consumer*, *load generator* (this
process), and *machine* (all of the machine's busy CPU, /proc/stat). Found
through /proc (a RabbitMQ node's name is in its environment only: root).
"""

from __future__ import annotations

import logging
import math
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace

from benchmarks.common import (
    AMQP_URL_VARIABLE,
    DATABASE_URL_VARIABLE,
    CpuMeter,
    Place,
    admin_connection,
    child_pids,
    isolated,
    query,
    wait_until,
)
from benchmarks.http import Daemon, answers_ready, free_port
from triggerhook import Settings

log = logging.getLogger(__name__)

# The CPU meter's groups.
DAEMONS, GALERA, WRITER, RABBITMQ = "daemons", "Galera", "Galera writer", "RabbitMQ"
RABBIT_1, HAPROXY = "RabbitMQ node 1", "HAProxy"
CONSUMER, LOAD, MACHINE = "consumer", "load generator", "machine"


def daemons_text(k: int) -> str:
    return f"{k} daemon{'s' if k != 1 else ''}"


# scripts/_cluster.sh: HAProxy before the Galera nodes, the RabbitMQ nodes'
# ports, the cluster's own daemons' HTTP ports (not to run beside these).
CLUSTER_DATABASE_URL = "mysql://root:@127.0.0.1:3310/triggerhook"
CLUSTER_AMQP_PORTS = (5681, 5682, 5683)
CLUSTER_DAEMON_PORTS = (8091, 8092, 8093)
# How a report names them.
SERVERS = (
    "three Galera nodes (MariaDB 10.11, galera-4) behind HAProxy `127.0.0.1:3310`, "
    "three RabbitMQ nodes on 5681-5683 (quorum queues), all on this machine "
    "(scripts/cluster up --no-daemons; buffer pool 64 MiB a node)"
)
READY_TIMEOUT_S = 60
# Shards spread: the joiners acquire what is free, the first daemon drains what
# exceeds its fair share at its next round (a third of the lease, 3.3 s by
# default) and releases a shard once none of its tasks is in memory.
SPREAD_TIMEOUT_S = 90
STOP_TIMEOUT_S = 60

# The CPU meter's groups; those with figures, and their keys' names.
DAEMONS, GALERA, WRITER, RABBITMQ = "daemons", "Galera", "Galera writer", "RabbitMQ"
RABBIT_1, HAPROXY = "RabbitMQ node 1", "HAProxy"
CONSUMER, LOAD, MACHINE = "consumer", "load generator", "machine"

# -- the cluster ---------------------------------------------------------------------


def _node_url(port: int) -> str:
    return f"amqp://guest:guest@127.0.0.1:{port}/%2F"


def amqp_urls(i: int) -> str:
    """Every broker node for daemon ``i`` (1-based): node ((i - 1) mod 3) + 1
    first, then the others in order (as scripts/_cluster.sh gives them)."""
    own = CLUSTER_AMQP_PORTS[(i - 1) % len(CLUSTER_AMQP_PORTS)]
    others = [port for port in CLUSTER_AMQP_PORTS if port != own]
    return " ".join(_node_url(port) for port in (own, *others))


@contextmanager
def on_cluster() -> Iterator[None]:
    """The benchmarks' servers (:func:`benchmarks.common.database_url`,
    ``amqp_url``: their connections, the consumer process) are the cluster's
    while the scenario runs: the proxy and the first broker node."""
    saved = {name: os.environ.get(name) for name in (DATABASE_URL_VARIABLE, AMQP_URL_VARIABLE)}
    os.environ[DATABASE_URL_VARIABLE] = CLUSTER_DATABASE_URL
    os.environ[AMQP_URL_VARIABLE] = _node_url(CLUSTER_AMQP_PORTS[0])
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def check_cluster() -> None:
    members = cluster_pids()
    found = {group: len(members.get(group, ())) for group in (GALERA, RABBITMQ, HAPROXY)}
    if found != {GALERA: 3, RABBITMQ: 3, HAPROXY: 1}:
        raise RuntimeError(
            f"cluster processes found: {found}; is it up (scripts/cluster up --no-daemons)? "
            "Their /proc entries are read as root (as scripts/cluster runs)"
        )
    if any(_listening(port) for port in CLUSTER_DAEMON_PORTS):
        raise RuntimeError(
            "the cluster's own daemons run beside these (scripts/cluster up without "
            "--no-daemons): stop them (scripts/cluster stop daemon N)"
        )
    db = admin_connection()
    db.close()


_GALERA_NODE = re.compile(r"--defaults-file=\S*/galera([1-3])/my\.cnf")
_RABBIT_NODE = re.compile(r"RABBITMQ_NODENAME=rbt([1-3])@localhost")


def _proc_text(pid: str, name: str) -> str:
    try:
        with open(f"/proc/{pid}/{name}", "rb") as file:
            return file.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _member(pid: str) -> tuple[str, int] | None:
    """(group, node number) of a cluster server process; None for the others."""
    comm = _proc_text(pid, "comm").strip()
    if comm == "mariadbd":
        found = _GALERA_NODE.search(_proc_text(pid, "cmdline"))
        return (GALERA, int(found.group(1))) if found else None
    if comm == "beam.smp":  # the node's name is in its environment only
        found = _RABBIT_NODE.search(_proc_text(pid, "environ"))
        return (RABBITMQ, int(found.group(1))) if found else None
    if comm == "haproxy" and "/haproxy/haproxy.cfg" in _proc_text(pid, "cmdline"):
        return HAPROXY, 1
    return None


def cluster_pids() -> dict[str, tuple[int, ...]]:
    """The cluster's server processes by group (from /proc), node 1 first;
    ``Galera writer``: the node HAProxy sends every connection to while it is
    up; ``RabbitMQ node 1``: the events queue's leader (declared through it)
    and the consumer's node."""
    found: dict[str, list[tuple[int, int]]] = {}
    for entry in os.listdir("/proc"):
        member = _member(entry) if entry.isdigit() else None
        if member is not None:
            found.setdefault(member[0], []).append((member[1], int(entry)))
    groups = {group: tuple(pid for _, pid in sorted(nodes)) for group, nodes in found.items()}
    for group, node_1 in ((GALERA, WRITER), (RABBITMQ, RABBIT_1)):
        if groups.get(group):
            groups[node_1] = groups[group][:1]
    return groups


# -- the database and the queues ---------------------------------------------------------


@contextmanager
def cluster_place() -> Iterator[Place]:
    """A fresh database, and exchange + quorum queue, on the cluster (under
    :func:`on_cluster`), dropped afterwards."""
    with isolated(replace(Settings(log_level="WARNING"), amqp_queue_type="quorum")) as place:
        yield place


# -- the daemons -----------------------------------------------------------------------------


def _instance(i: int) -> str:
    return f"bench-instances-{i}"


def _spawn(settings: Settings, i: int, port: int) -> subprocess.Popen[bytes]:
    """Daemon ``i`` (1-based) on the scenario's database and exchange."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIGGERHOOK_")}
    env.update(
        TRIGGERHOOK_DATABASE_URL=settings.database_url,
        TRIGGERHOOK_AMQP_URL=amqp_urls(i),
        TRIGGERHOOK_AMQP_QUEUE_TYPE="quorum",
        TRIGGERHOOK_EXCHANGE=settings.exchange,
        TRIGGERHOOK_INSTANCE_ID=_instance(i),
        TRIGGERHOOK_HTTP_PORT=str(port),
        TRIGGERHOOK_COMMAND_QUEUE=f"{settings.exchange}.commands",
        TRIGGERHOOK_DEAD_LETTER_QUEUE=settings.dead_letter_queue,
        TRIGGERHOOK_LOG_LEVEL="WARNING",
    )
    return subprocess.Popen([sys.executable, "-m", "triggerhook", "run"], env=env)


def _free_ports(k: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < k:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


def _wait_ready(proc: subprocess.Popen[bytes], url: str) -> None:
    def ready() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"a daemon exited with status {proc.returncode} before ready")
        return answers_ready(url)

    wait_until(ready, READY_TIMEOUT_S, "daemon ready", step_s=0.1)


def _stop_all(procs: Sequence[subprocess.Popen[bytes]]) -> list[int]:
    """SIGTERM to every daemon at once (not one after another: the others would
    take over the shards of each one stopped), then their exit statuses."""
    for proc in procs:
        proc.terminate()
    codes = []
    for proc in procs:
        try:
            codes.append(proc.wait(STOP_TIMEOUT_S))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            codes.append(-9)
    return codes


def spread(owners: dict[str, int], names: Sequence[str], shards: int) -> bool:
    """Every shard owned, by exactly ``names``, none above its fair share."""
    if set(owners) != set(names) or sum(owners.values()) != shards:
        return False
    return max(owners.values()) <= math.ceil(shards / len(names))


_OWNERS = (
    "SELECT owner, COUNT(*) FROM th_shards WHERE owner IS NOT NULL"
    " AND lease_until_ms > ROUND(UNIX_TIMESTAMP(NOW(3)) * 1000) GROUP BY owner"
)


def _owners(place: Place) -> dict[str, int]:
    return {str(owner): int(count) for owner, count in query(place.name, _OWNERS)}


def _wait_spread(place: Place, k: int) -> float:
    """Seconds until the shards were spread over the ``k`` daemons."""
    [(shards,)] = query(place.name, "SELECT COUNT(*) FROM th_shards")
    names = [_instance(i) for i in range(1, k + 1)]
    started_s = time.monotonic()
    try:
        wait_until(
            lambda: spread(_owners(place), names, int(shards)),
            SPREAD_TIMEOUT_S,
            "shards spread",
            step_s=0.25,
        )
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}; owners: {_owners(place)}") from None
    return time.monotonic() - started_s


@contextmanager
def cluster_daemons(place: Place, k: int) -> Iterator[list[Daemon]]:
    """``k`` daemons started together, ready and holding their shares; each
    must exit with status 0 at the end."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        ports = _free_ports(k)
        for i, port in enumerate(ports, 1):
            procs.append(_spawn(place.settings, i, port))
        urls = [f"http://127.0.0.1:{port}" for port in ports]
        for proc, url in zip(procs, urls, strict=True):
            _wait_ready(proc, url)
        log.warning(
            "benchmark instances: shards spread over %s, %.1f s after all were ready",
            daemons_text(k),
            _wait_spread(place, k),
        )
        yield [Daemon(url, proc.pid) for proc, url in zip(procs, urls, strict=True)]
    finally:
        codes = _stop_all(procs)
    if any(codes):  # only reached when the scenario itself went through
        raise RuntimeError(f"daemons exited with statuses {codes}")


# -- CPU ---------------------------------------------------------------------------------------


def _machine_busy_s() -> float:
    """Busy CPU seconds of the whole machine so far (every CPU; /proc/stat)."""
    with open("/proc/stat") as stat:
        fields = [int(f) for f in stat.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


class GroupMeter(CpuMeter):
    """A :class:`CpuMeter` of the scenario's groups only (not the default
    servers the base adds), plus ``machine``: all of the machine's busy CPU."""

    def __init__(self, groups: dict[str, int | tuple[int, ...]]) -> None:
        super().__init__(groups, servers=False)
        self._machine_before_s = 0.0

    def start(self) -> None:
        super().start()
        self._machine_before_s = _machine_busy_s()

    def stop(self) -> None:
        super().stop()
        self.used[MACHINE] = _machine_busy_s() - self._machine_before_s

    def cores(self, group: str) -> float:
        return self.used[group] / self.wall_s if self.wall_s > 0 else 0.0


def meter(daemons: Sequence[Daemon], consumer_pid: int) -> GroupMeter:
    pids = tuple(pid for d in daemons for pid in (d.pid, *child_pids(d.pid)))
    groups: dict[str, int | tuple[int, ...]] = {DAEMONS: pids, **cluster_pids()}
    groups.update({CONSUMER: consumer_pid, LOAD: os.getpid()})
    return GroupMeter(groups)
