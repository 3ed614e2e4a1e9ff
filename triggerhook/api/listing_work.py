"""Where the API's reads of many tasks and bulk cancels run: :class:`ListingWork`.

Listing, counting, the timeline and a bulk cancel (over HTTP and from the web
view) can take as long as the database lets them (the store's
``listing_timeout_ms`` per read; a bulk cancel, batch after batch, up to
``bulk_cancel_timeout_s``). They run here, on threads of their own, never on
the thread pool that serves ``/readyz``, single-task lookups and batch
writes: a flood of them cannot make the daemon look unready. And they run
on the store's listing connections, never the engine's.

* **Bounded**: at most ``listing_concurrency`` at once, each on a thread of
  its own; one more is refused at once (:class:`~triggerhook.errors.Overloaded`:
  503 with Retry-After), never queued.
* **Abandoned work stops**: while a call runs, its request's connection is
  watched; when the client goes away (or the request is cancelled) the call's
  :class:`~triggerhook.runtime.interrupt.Interrupt` is set, which cuts its
  database statement short and stops a bulk cancel after its batch. The
  request is then answered 499 (nobody reads it).
* **At the daemon's stop** (:meth:`close`) every call in flight is
  interrupted the same way: reads answer 503 ``stopping``, a bulk cancel what
  it did and where to go on.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from aiohttp import web

from triggerhook.errors import NotRunningError, Overloaded
from triggerhook.runtime.interrupt import Interrupt

__all__ = ["ClientGone", "ListingWork"]

T = TypeVar("T")

# How often a call in flight looks whether its client is still connected.
_WATCH_INTERVAL_S = 0.1


class ClientGone(web.HTTPClientError):
    """The client closed its connection before the answer (nginx's 499): the
    answer goes nowhere, but the request's figures count it (a 4xx)."""

    status_code = 499

    def __init__(self) -> None:
        super().__init__(reason="Client Closed Request")


class ListingWork:
    """Runs the calls; :meth:`run` on the event loop, the calls on its threads."""

    def __init__(self, concurrency: int, bulk_cancel_timeout_s: float) -> None:
        self._concurrency = concurrency
        self.bulk_cancel_timeout_s = bulk_cancel_timeout_s
        # A worker per slot: a call admitted never waits for a thread.
        self._executor = ThreadPoolExecutor(concurrency, thread_name_prefix="th-listing")
        # Touched on the event loop's thread only.
        self._running: set[Interrupt] = set()
        self._closed = False

    async def run(
        self,
        request: web.Request,
        call: Callable[[Interrupt], T],
        deadline_s: float | None = None,
    ) -> T:
        """``call(interrupt)`` on a listing thread, its answer or its error;
        ``deadline_s``: how long from now until its interrupt says stop
        (between steps). Raises :class:`Overloaded` at once when
        ``concurrency`` calls run already, :class:`ClientGone` when the
        client went away (the call is interrupted)."""
        if self._closed:
            raise NotRunningError("the daemon is stopping")
        if len(self._running) >= self._concurrency:
            raise Overloaded(
                f"{self._concurrency} reads of many tasks or bulk cancels run already "
                "(listing_concurrency)"
            )
        interrupt = Interrupt(None if deadline_s is None else time.monotonic() + deadline_s)
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._executor, call, interrupt)
        self._running.add(interrupt)
        future.add_done_callback(lambda done: self._finished(done, interrupt))
        try:
            return await self._watch(request, future, interrupt)
        except asyncio.CancelledError:
            _stop(interrupt, "its request was cancelled")
            raise

    async def _watch(
        self, request: web.Request, future: asyncio.Future[T], interrupt: Interrupt
    ) -> T:
        while True:
            done, _ = await asyncio.wait({future}, timeout=_WATCH_INTERVAL_S)
            if done:
                return future.result()
            if request.transport is None:  # aiohttp's sign of a closed connection
                _stop(interrupt, "its client went away")
                raise ClientGone()

    def _finished(self, future: asyncio.Future[Any], interrupt: Interrupt) -> None:
        """The call ended (on the loop's thread): its slot is free."""
        self._running.discard(interrupt)
        if not future.cancelled():
            future.exception()  # retrieved: a call nobody waits for any more is no error

    def close(self) -> None:
        """Interrupt every call in flight and take no more (the daemon stops)."""
        self._closed = True
        for interrupt in list(self._running):
            _stop(interrupt, "the daemon is stopping")
        self._executor.shutdown(wait=False, cancel_futures=True)


def _stop(interrupt: Interrupt, why: str) -> None:
    """Set ``interrupt`` off the event loop: cutting a statement short blocks
    (a connection to the database, KILL QUERY)."""
    threading.Thread(target=interrupt.set, args=(why,), name="th-listing-stop", daemon=True).start()
