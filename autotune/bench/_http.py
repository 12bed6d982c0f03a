"""The HTTP layer under the load client: a streaming POST that yields the response's lines.

The client measures the server, so it must cost the host as little CPU as it can: on a small
CPU host the client shares cores with the engine. aiohttp (what `vllm bench serve` uses) costs
about a quarter of httpx's CPU per streamed chunk here (0.085 s vs 0.3 s for 2,100 chunks), so it
is the default. The httpx adapter serves tests through `httpx.MockTransport`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Protocol

import aiohttp
import httpx

Lines = AsyncIterator[str]


class HTTPStreamError(Exception):
    """The request failed below the stream protocol (connection, HTTP status)."""


class LineStream(Protocol):
    """Opens streaming POSTs on one connection pool; `close()` when done."""

    def post_lines(self, path: str, body: dict[str, Any]) -> AbstractAsyncContextManager[Lines]: ...

    async def close(self) -> None: ...


class AiohttpLines:
    def __init__(self, base_url: str, request_timeout_s: float) -> None:
        self._session = aiohttp.ClientSession(
            base_url=base_url,
            connector=aiohttp.TCPConnector(limit=0, force_close=False),
            timeout=aiohttp.ClientTimeout(total=None, sock_read=request_timeout_s),
            read_bufsize=2**18,
        )

    @asynccontextmanager
    async def post_lines(
        self, path: str, body: dict[str, Any]
    ) -> AsyncIterator[AsyncIterator[str]]:
        try:
            async with self._session.post(path, json=body) as response:
                if response.status != 200:
                    text = await response.text(errors="replace")
                    raise HTTPStreamError(f"HTTP {response.status}: {text.strip()[:200]}")
                yield lines_of(response.content.iter_any())
        except aiohttp.ClientError as exc:
            raise HTTPStreamError(f"{type(exc).__name__}: {exc}") from exc

    async def close(self) -> None:
        await self._session.close()


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
