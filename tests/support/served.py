"""The HTTP API over the in-memory store, served in-process for a unit test:
the engine runs (single writes go through its group commit) over a
:class:`~support.fakes.FakeStore`, a clock that stands still and a publisher
that never publishes; a scenario talks to it through aiohttp's
``TestServer``/``TestClient``."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from support.fakes import DEFAULT_NOW_MS, FakeClock, FakePublisher, FakeStore
from triggerhook.api.http import HttpApi
from triggerhook.app import TriggerHook
from triggerhook.settings import Settings
from triggerhook.wiring import assemble, http_config

NOW_MS = int(DEFAULT_NOW_MS)

Client = TestClient[web.Request, web.Application]
Scenario = Callable[[Client], Awaitable[None]]


@dataclass
class Served:
    """A started library façade, its store and clock, and the HTTP API over it."""

    hook: TriggerHook
    store: FakeStore
    clock: FakeClock
    api: HttpApi

    def serve(self, scenario: Scenario) -> None:
        """Run ``scenario`` with a client of this HTTP API."""
        serve(self.api.app, scenario)


def serve(app: web.Application, scenario: Scenario) -> None:
    asyncio.run(_serve(app, scenario))


async def _serve(app: web.Application, scenario: Scenario) -> None:
    client: Client = TestClient(TestServer(app))
    async with client:
        await scenario(client)


@contextlib.contextmanager
def served(settings: Settings) -> Iterator[Served]:
    """The API of a started engine with ``settings``; stopped after, and the
    engine must not have failed meanwhile."""
    clock = FakeClock(NOW_MS)
    store = FakeStore(now_ms=clock.now_ms)
    hook = assemble(settings, store, clock, lambda buffer, sink, retry, fail: FakePublisher())
    executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="http-test")
    api = HttpApi(hook, http_config(settings), list, executor)
    hook.start()
    try:
        yield Served(hook, store, clock, api)
        assert hook.health().failure is None
    finally:
        clock.advance(10 * settings.shard_lease_ms)  # past every due time armed
        hook.close()
        executor.shutdown(wait=True)
