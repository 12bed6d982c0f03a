"""Arrival schedules: how fast and how many requests at once the client sends."""

from __future__ import annotations

import math
import random

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from autotune.limits import MAX_RATE, Requests, Seconds, Seed


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
