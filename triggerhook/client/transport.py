"""An httpx transport that sends through aiohttp, for :class:`triggerhook.client.AsyncClient`.

httpx's own asyncio transport (httpcore) serializes much of its connection
pool's work: one ``AsyncClient`` with 32 requests in flight reached about 460
schedules/s against a daemon that serves 5,000/s (measured here; a known
httpcore issue, encode/httpx#3215). aiohttp's connector has no such
bottleneck, so the client keeps httpx's request/response model — shared with
the blocking client — and lets aiohttp move the bytes.
"""

from __future__ import annotations

import aiohttp
import httpx
from yarl import URL

# Connections kept per daemon: enough for the concurrency of one service.
_POOL_SIZE = 100


class AiohttpTransport(httpx.AsyncBaseTransport):
    """Owns one aiohttp session, created on first use (inside the event loop)."""

    def __init__(self, pool_size: int = _POOL_SIZE) -> None:
        self._pool_size = pool_size
        self._session: aiohttp.ClientSession | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._pool_size),
                auto_decompress=False,  # httpx decodes the body itself
            )
        timeouts = request.extensions.get("timeout", {})
        timeout = aiohttp.ClientTimeout(
            total=None,
            connect=timeouts.get("connect"),
            sock_read=timeouts.get("read"),
        )
        try:
            async with self._session.request(
                request.method,
                # As httpx encoded it: yarl would otherwise decode %2E in a
                # task id and resolve "." and ".." as path segments.
                URL(str(request.url), encoded=True),
                headers=list(request.headers.multi_items()),
                data=request.content,
                timeout=timeout,
                allow_redirects=False,
            ) as answer:
                content = await answer.read()
                return httpx.Response(
                    answer.status,
                    headers=list(answer.raw_headers),
                    content=content,
                    request=request,
                )
        except aiohttp.ClientConnectorError as exc:
            raise httpx.ConnectError(str(exc), request=request) from exc
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError) as exc:
            raise httpx.RemoteProtocolError(str(exc), request=request) from exc
        except aiohttp.ClientError as exc:
            raise httpx.NetworkError(str(exc), request=request) from exc
        except TimeoutError as exc:
            raise httpx.ReadTimeout("no answer in time", request=request) from exc

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
