"""A ``triggerhook run`` daemon serving the HTTP API, for a whole test module.

:func:`api_daemon` creates its own database, exchange and queues (unique
names), starts the daemon with ``--init-db`` on a free port, and removes
everything afterwards. Tests talk to it with plain httpx (status codes and
bodies exactly as on the wire) and read events with :attr:`Api.events`, whose
queue keeps only routing keys matching ``fire.#``: an event sent with any other
routing key is unroutable, so its task stays armed ("firing") while the daemon
retries it — the way to hold a task in the too-late state.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import httpx

from support.amqp import AmqpNames, EventConsumer, delete_topology
from support.daemon import Daemon, DaemonGroup, daemon_env
from support.mysql import temporary_database
from support.names import unique_name

ROUTED = "fire.test"  # routing key of events the test consumer receives


@dataclass
class Api:
    url: str
    daemon: Daemon
    database_url: str
    names: AmqpNames
    events: EventConsumer
    token: str

    def client(self, authorized: bool = True, timeout_s: float = 30.0) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token and authorized else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s)


@contextlib.contextmanager
def api_daemon(mysql_url: str, amqp_url: str, **settings: int | str) -> Iterator[Api]:
    names = AmqpNames(exchange=unique_name(), queue=unique_name())
    events = EventConsumer(amqp_url, names, binding="fire.#")
    with (
        temporary_database(mysql_url, unique_name()) as database_url,
        DaemonGroup() as group,
    ):
        try:
            env = daemon_env(database_url, amqp_url, names.exchange, "api", **settings)
            events.declare()
            daemon = group.start(env, "api", "--init-db")
            daemon.wait_ready()
            url = f"http://127.0.0.1:{env['TRIGGERHOOK_HTTP_PORT']}"
            token = str(settings.get("api_token", ""))
            yield Api(url, daemon, database_url, names, events, token)
        finally:
            events.close()
            group.close()
            delete_topology(amqp_url, names)
