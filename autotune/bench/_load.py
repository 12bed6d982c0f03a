"""Arrival schedules: how fast and how many requests at once the client sends."""

from __future__ import annotations

import math
import random

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from autotune.inputs.limits import MAX_RATE, Requests, Seconds, Seed


class LoadProfile(BaseModel):
    """When requests are sent.

    `rate` alone: Poisson arrivals at that many requests/s (`inf`: all at once, unbounded).
    `concurrency` alone: all requests ready at once, at most that many in flight.
    Both: Poisson arrivals, and a request that arrives while `concurrency` are in flight waits.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    rate: float | None = Field(default=None, gt=0, description="Poisson arrival rate, requests/s")
    concurrency: Requests | None = Field(default=None, description="Most requests in flight")
    seed: Seed = Field(default=0, description="Seed of the arrival times' private RNG")
    request_timeout_s: Seconds = Field(default=300.0, description="Limit for one request")
    trace: bool = Field(
        default=False, description="Requests carry their own send times (a trace workload)"
    )

    @field_validator("rate")
    @classmethod
    def _a_rate(cls, value: float | None) -> float | None:
        """`inf` is a rate's own word (all at once); any other rate is finite and bounded."""
        if value is not None and not math.isinf(value) and value > MAX_RATE:
            raise ValueError(f"expected a number <= {MAX_RATE:,.0f}, or inf (all at once)")
        return value

    @model_validator(mode="after")
    def _rate_or_concurrency(self) -> LoadProfile:
        if self.trace and self.rate is not None:
            raise ValueError("a trace sets its own arrivals: no rate (scale them with rate_scale)")
        if self.rate is None and self.concurrency is None and not self.trace:
            raise ValueError("set rate, concurrency, or both (rate with a concurrency cap)")
        return self

    def arrival_offsets(self, n: int) -> list[float]:
        """Send times of n requests, in seconds from the start; the first is at 0.

        Gaps are exponential with mean 1/rate, drawn from an RNG seeded with `seed`, so the same
        profile always gives the same schedule.
        """
        if self.rate is None or math.isinf(self.rate):
            return [0.0] * n
        rng = random.Random(self.seed)
        offsets, now = [], 0.0
        for _ in range(n):
            offsets.append(now)
            now += rng.expovariate(self.rate)
        return offsets


MAX_WARMUP = 512  # warm-up requests a load implies, at most
WARMUP_ARRIVALS_S = 2.0  # an open loop's warm-up: this long of its arrivals


def warmup_for(load: LoadProfile, prompts: int) -> int:
    """The warm-up requests that fill the engine as `load` will (vLLM's perf-eval warms with
    as many as the concurrency; a cold engine measured 10-30% low on throughput): the
    concurrency of a closed loop, else `WARMUP_ARRIVALS_S` of an open loop's arrivals (all
    `prompts` where they come at once, and no more than its concurrency cap); at least 2, at
    most `MAX_WARMUP`."""
    if load.rate is None:
        count = load.concurrency or 2
    elif math.isinf(load.rate):
        count = prompts
    else:
        count = math.ceil(load.rate * WARMUP_ARRIVALS_S)
        if load.concurrency is not None:
            count = min(count, load.concurrency)
    return max(2, min(MAX_WARMUP, count))
