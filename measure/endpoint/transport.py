"""An httpx transport whose connection pool checks out an idle keep-alive connection in O(1).

httpcore's AsyncConnectionPool re-scans every pooled connection (and every queued request) on
each request start and each response close; with a few hundred connections that costs
milliseconds of CPU per request and made the load generator itself late at 200+ requests/s.
This pool keeps, per origin, a stack of idle HTTP/1.1 connections (httpcore.AsyncHTTPConnection,
so TLS, timeouts and error mapping stay httpx's) and never limits or queues: the load client's
--concurrency semaphore is the only cap, so no request waits invisibly inside the pool.
"""

from __future__ import annotations

from collections import deque

import httpcore
import httpx


class _ReturningStream:
    """The response body; closing it hands a reusable connection back to the pool."""

    def __init__(self, stream, conn: httpcore.AsyncHTTPConnection, pool: "LeanPool"):
        self._stream, self._conn, self._pool = stream, conn, pool

    async def __aiter__(self):
        async for part in self._stream:
            yield part

    async def aclose(self) -> None:
        try:
            if hasattr(self._stream, "aclose"):
                await self._stream.aclose()
        finally:
            await self._pool._release(self._conn)


def _key(origin: httpcore.Origin) -> tuple:
    return (origin.scheme, origin.host, origin.port)


class LeanPool:
    """Stands where httpx.AsyncHTTPTransport keeps its httpcore pool (`_pool`)."""

    def __init__(self, ssl_context, keepalive_expiry: float):
        self._ssl = ssl_context
        self._expiry = keepalive_expiry
        self._idle: dict[tuple, deque] = {}  # (scheme, host, port) -> idle connections
        self._all: set = set()

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        origin = request.url.origin
        idle = self._idle.setdefault(_key(origin), deque())
        conn = None
        while idle:
            c = idle.pop()
            if c.is_idle() and not c.has_expired():
                conn = c
                break
            await self._drop(c)
        if conn is None:
            conn = httpcore.AsyncHTTPConnection(origin=origin, ssl_context=self._ssl, keepalive_expiry=self._expiry, http1=True, http2=False)
            self._all.add(conn)
        try:
            resp = await conn.handle_async_request(request)
        except BaseException:
            await self._drop(conn)
            raise
        return httpcore.Response(status=resp.status, headers=resp.headers, content=_ReturningStream(resp.stream, conn, self), extensions=resp.extensions)

    async def _release(self, conn) -> None:
        if conn.is_idle() and not conn.is_closed():
            self._idle.setdefault(_key(conn._origin), deque()).append(conn)
        else:
            await self._drop(conn)

    async def _drop(self, conn) -> None:
        self._all.discard(conn)
        try:
            await conn.aclose()
        except Exception:  # noqa: BLE001 - closing a broken connection
            pass

    @property
    def connections(self) -> int:
        """Connections opened and not yet closed."""
        return len(self._all)

    async def aclose(self) -> None:
        for c in list(self._all):
            await self._drop(c)
        self._idle.clear()

    async def __aenter__(self) -> "LeanPool":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()


class LeanTransport(httpx.AsyncHTTPTransport):
    """httpx.AsyncHTTPTransport (HTTP/1.1, no proxies from the environment) with a LeanPool."""

    def __init__(self, keepalive_expiry: float = 30.0):
        super().__init__(trust_env=False, http1=True, http2=False)
        self._pool = LeanPool(httpx.create_ssl_context(trust_env=False), keepalive_expiry)

    @property
    def pool(self) -> LeanPool:
        return self._pool
