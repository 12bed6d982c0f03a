"""Running one benchmark: warm-up, then the measured requests, sent by the chosen load client."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import httpx

from autotune.bench._client import Clock, LoadClient, LoadClientName, OpenAICompletionsClient
from autotune.bench._guard import Guard
from autotune.bench._load import LoadProfile
from autotune.bench._records import RequestRecord
from autotune.bench._stall import StallWatch
from autotune.bench._vllm_bench import VllmBenchClient
from autotune.bench._workload import RequestSpec


def run_benchmark(
    base_url: str,
    model: str,
    warmup: Sequence[RequestSpec],
    requests: Sequence[RequestSpec],
    profile: LoadProfile,
    *,
    clock: Clock = time.perf_counter,
    transport: httpx.AsyncBaseTransport | None = None,
    guard: Guard | None = None,
    before_measured: Callable[[], None] | None = None,
    client: LoadClientName = "autotune",
    tokenizer: str | None = None,
    stalls: StallWatch | None = None,
) -> list[RequestRecord]:
    """Run warm-up then measured requests against `base_url`; one record per measured request.

    With a `guard`, raises `BenchmarkAborted` the moment it trips (see `LoadClient`);
    `before_measured` is called once the warm-up is over (`EngineCounters.start`). `client`
    names who sends the measured requests: `vllm-bench` runs `vllm bench serve` (its tokenizer:
    `tokenizer`, default the model) and raises `LoadClientError` where it fails. `stalls`
    watches the tuner's own loop while the measured requests are out (`bench/_stall.py`).

    The garbage collector is paused for the run: a full collection over a large heap stalls the
    event loop for long enough that whole streams are read, and stamped, at once.
    """
    own = OpenAICompletionsClient(base_url, model, clock=clock, transport=transport)
    sender: LoadClient = own
    if client == "vllm-bench":
        sender = VllmBenchClient(base_url, model, tokenizer or model, warmup_client=own)
    with _gc_paused():
        return asyncio.run(
            _watched(sender, requests, profile, warmup, guard, before_measured, stalls)
        )


async def _watched(
    sender: LoadClient,
    requests: Sequence[RequestSpec],
    profile: LoadProfile,
    warmup: Sequence[RequestSpec],
    guard: Guard | None,
    before_measured: Callable[[], None] | None,
    stalls: StallWatch | None,
) -> list[RequestRecord]:
    """`sender.run`, with `stalls` ticking beside it from the first measured request."""
    if stalls is None:
        return await sender.run(
            requests, profile, warmup=warmup, guard=guard, before_measured=before_measured
        )

    def measured() -> None:
        if before_measured is not None:
            before_measured()
        stalls.measuring()

    ticker = asyncio.ensure_future(stalls.tick())
    try:
        return await sender.run(
            requests, profile, warmup=warmup, guard=guard, before_measured=measured
        )
    finally:
        ticker.cancel()


@contextmanager
def _gc_paused() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.unfreeze()
        if was_enabled:
            gc.enable()
