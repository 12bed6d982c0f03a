"""Ground truth: run the scheduler over a workload in simulated time, no serving.

Metrics follow docs/metrics.md: TTFT = first token - send; TPOT = (last token - first token) /
(output - 1); duration = last end - first send; throughputs over the duration; percentiles with
linear interpolation between closest ranks.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from autotune.bench import RequestRecord
from autotune.predict import Arrivals, Request, replay

from .model import (
    Hardware,
    MemoryPlan,
    RooflineTimer,
    SimConfig,
    memory_plan,
    scheduler_config,
    slowed,
    step_cost,
)


@dataclass(frozen=True)
class SimWorkload:
    """Requests as (prompt tokens, output tokens), and how they are sent.

    `concurrency` alone: closed loop (each client sends its next request when one ends);
    `rate` alone: Poisson arrivals seeded with `seed`; both: Poisson with a cap in flight.
    """

    lengths: tuple[tuple[int, int], ...]
    concurrency: int | None = None
    rate: float | None = None
    seed: int = 0

    @classmethod
    def random(
        cls,
        requests: int,
        input: int,
        output: int,
        *,
        spread: float = 0.0,
        concurrency: int | None = None,
        rate: float | None = None,
        seed: int = 0,
    ) -> SimWorkload:
        """`requests` of `input`/`output` tokens, each uniform in mean * (1 +- spread)."""
        rng = random.Random(seed)

        def length(mean: int) -> int:
            low, high = max(1, int(mean * (1 - spread))), max(1, int(mean * (1 + spread)))
            return rng.randint(low, high)

        lengths = tuple((length(input), length(output)) for _ in range(requests))
        return cls(lengths, concurrency=concurrency, rate=rate, seed=seed)

    def arrivals(self) -> Arrivals:
        """The requests as the scheduler's replay sends them."""
        return Arrivals(self.lengths, tuple(self.offsets()), self.concurrency)

    def offsets(self) -> list[float]:
        """Send times as `autotune.bench.LoadProfile.arrival_offsets` draws them."""
        n = len(self.lengths)
        if self.rate is None or math.isinf(self.rate):
            return [0.0] * n
        rng, now, out = random.Random(self.seed), 0.0, []
        for _ in range(n):
            out.append(now)
            now += rng.expovariate(self.rate)
        return out


@dataclass(frozen=True)
class SimResult:
    """A config's ground truth on a workload, or why it does not start (`failure`)."""

    failure: str | None = None  # "oom", "kv_capacity", "invalid_config"
    reason: str = ""
    memory: MemoryPlan | None = None
    duration_s: float = 0.0
    output_throughput: float = 0.0
    request_throughput: float = 0.0
    p50_ttft_ms: float = math.inf
    p99_ttft_ms: float = math.inf
    p50_tpot_ms: float = math.inf
    p99_tpot_ms: float = math.inf
    preemptions: int = 0
    ttft_ms: tuple[float, ...] = field(default=(), repr=False)
    records: tuple[RequestRecord, ...] = field(default=(), repr=False)
    tpot_ms: tuple[float | None, ...] = field(default=(), repr=False)

    @property
    def ok(self) -> bool:
        return self.failure is None

    def goodput(self, slos: Mapping[str, float]) -> float:
        """Requests/s meeting every TTFT / TPOT bound (each request on its own values)."""
        if not self.ok or not self.duration_s:
            return 0.0
        ttft = min((v for k, v in slos.items() if k.endswith("_ttft_ms")), default=math.inf)
        tpot = min((v for k, v in slos.items() if k.endswith("_tpot_ms")), default=math.inf)
        good = sum(
            a <= ttft and (b is None or b <= tpot)
            for a, b in zip(self.ttft_ms, self.tpot_ms, strict=True)
        )
        return good / self.duration_s

    def meets(self, slos: Mapping[str, float]) -> bool:
        """Whether every SLO (`p99_ttft_ms`, `p50_tpot_ms`, ...) holds on the summary."""
        return self.ok and all(getattr(self, k, math.inf) <= v for k, v in slos.items())


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return math.inf
    v = sorted(values)
    pos = (len(v) - 1) * q / 100
    k = int(pos)
    return v[k] if k + 1 >= len(v) else v[k] + (v[k + 1] - v[k]) * (pos - k)


def simulate(
    hw: Hardware,
    cfg: SimConfig,
    workload: SimWorkload,
    fuse: bool = True,
    speed: float = 1.0,
    records: bool = False,
) -> SimResult:
    """Run `workload` through the scheduler of `cfg` on `hw`, deterministically.

    `fuse=False` runs every step on its own (as the server does); the result is the same.
    `records`: keep the requests as the load client records them (first and last token).
    `speed` < 1 is a slower host: every step takes 1/speed as long while the requests arrive
    as they do (under a fixed rate, the batches grow and queues form; in a closed loop the
    whole run stretches by 1/speed).
    """
    memory = memory_plan(hw, cfg)
    if memory.failure:
        return SimResult(failure=memory.failure, reason=memory.reason, memory=memory)
    timer = RooflineTimer(slowed(step_cost(hw, cfg), speed))
    arrivals = workload.arrivals()
    run = replay(scheduler_config(cfg, memory), timer, arrivals, fuse=fuse)
    result = _result(run.requests, memory, run.preemptions)
    if records:
        result = dataclasses.replace(result, records=tuple(run.records(every_token=False)))
    return result


def _result(requests: list[Request], memory: MemoryPlan, preemptions: int) -> SimResult:
    ttft, tpot = [], []
    for r in requests:
        assert r.first_token is not None and r.finish is not None
        ttft.append((r.first_token - r.arrival) * 1e3)
        tpot.append((r.finish - r.first_token) * 1e3 / (r.output - 1) if r.output > 1 else None)
    duration = max(r.finish or 0.0 for r in requests) - min(r.arrival for r in requests)
    duration = max(duration, 1e-9)
    tpots = [t for t in tpot if t is not None]
    return SimResult(
        memory=memory,
        duration_s=duration,
        output_throughput=sum(r.output for r in requests) / duration,
        request_throughput=len(requests) / duration,
        p50_ttft_ms=percentile(ttft, 50),
        p99_ttft_ms=percentile(ttft, 99),
        p50_tpot_ms=percentile(tpots, 50),
        p99_tpot_ms=percentile(tpots, 99),
        preemptions=preemptions,
        ttft_ms=tuple(ttft),
        tpot_ms=tuple(tpot),
    )


def options_config(options: Mapping[str, object], defaults: SimConfig) -> SimConfig:
    """Shorthand for `SimConfig.from_options`."""
    return SimConfig.from_options(options, defaults)
