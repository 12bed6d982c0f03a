"""When the confirm step may stop: a group-sequential interval of the paired gain.

The step measures a candidate and the baseline in alternating rounds; after each round it
looks at the paired gains so far. Looking after every round and stopping at the first
interval that excludes zero would claim a gain that is not there far more often than the
interval's level says (with 6 looks at a 90% interval, about 1 time in 4 instead of 1 in 10).
So every look uses one nominal level, the same at each look (Pocock's design), chosen so
that over all the looks the step can take (`max_rounds`) a gain that is zero is claimed at
most `ERROR` of the time, either way: the level is found by simulation under the null
(normal paired log-gains of unknown spread, Student's t at each look), bisected, with a fixed
seed, and kept for the process. The step stops at the first look where

- the interval lies within +-`smallest` (default 5%): **no gain worth deploying**, either way
  (a real gain of 0.1% is not one a user should redeploy for);
- the interval lies above 0: a **gain** (its size is the interval's);
- the interval lies below 0: the candidate is **worse** than the defaults (dropped);

or when its rounds (or its device time) run out: the **budget** ended it, and the verdict is
read from the last interval as it stands. Looks start at `FIRST_LOOK` rounds: two paired
values give an interval on one degree of freedom, too wide to decide and too wild to
simulate.

A Pocock design spends the same level at every look: it stops early more often than
O'Brien-Fleming's, at the price of a wider interval at the last look, which suits a step
whose rounds are expensive and whose budget is short.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from autotune.bench import t_quantile

ERROR = 0.10  # a zero gain claimed (either way) over all looks, at most
SMALLEST = 0.05  # the smallest gain worth deploying (--min-gain)
FIRST_LOOK = 3
_SIMULATIONS = 20_000
_SEED = 20261206


@dataclass(frozen=True)
class Look:
    """The paired gains after some rounds, their interval at the design's per-look level, and
    what it decides (None: go on)."""

    rounds: int
    mean: float
    low: float
    high: float
    level: float  # the per-look two-sided confidence
    decision: str | None  # gain | worse | equivalent | None

    def as_dict(self) -> dict[str, float | int | str | None]:
        return {
            "rounds": self.rounds,
            "mean": round(self.mean, 4),
            "low": round(self.low, 4),
            "high": round(self.high, 4),
            "level": round(self.level, 5),
            "decision": self.decision,
        }


def look(gains: Sequence[float], max_rounds: int, smallest: float = SMALLEST,
         error: float = ERROR) -> Look | None:  # fmt: skip
    """The look after `len(gains)` paired rounds (None before `FIRST_LOOK`, or with no
    spread to read). `gains` are relative (`candidate / baseline - 1`, better = positive); the
    interval is made on their logs and read back as relative gains."""
    n = len(gains)
    if n < min(FIRST_LOOK, max_rounds) or n < 2 or any(g <= -1 for g in gains):
        return None
    logs = [math.log1p(g) for g in gains]
    sd = statistics.stdev(logs)
    mean = statistics.fmean(logs)
    level = per_look_level(max(n, max_rounds), error)
    half = t_quantile(n - 1, level) * sd / math.sqrt(n) if sd > 0 else 0.0
    low, high = math.expm1(mean - half), math.expm1(mean + half)
    decision = None
    if -smallest < low and high < smallest:  # first: a gain too small to deploy is none
        decision = "equivalent"
    elif low > 0:
        decision = "gain"
    elif high < 0:
        decision = "worse"
    return Look(n, math.expm1(mean), low, high, level, decision)


@functools.cache
def per_look_level(max_rounds: int, error: float = ERROR) -> float:
    """The two-sided confidence of each look's interval such that, over looks at rounds
    `FIRST_LOOK..max_rounds`, a zero gain is excluded at most `error` of the time."""
    looks = list(range(min(FIRST_LOOK, max_rounds), max_rounds + 1))
    if len(looks) <= 1:
        return 1 - error
    import numpy as np  # the confirm step's own: importing it costs commands nothing else

    rng = np.random.default_rng(_SEED)
    data = rng.standard_normal((_SIMULATIONS, max_rounds))
    stats = []
    for n in looks:
        part = data[:, :n]
        t = part.mean(axis=1) / (part.std(axis=1, ddof=1) / math.sqrt(n))
        stats.append((n, np.abs(t)))
    low, high = 1 - error, 1 - error / 1000
    for _ in range(40):
        mid = (low + high) / 2
        crossed = np.zeros(_SIMULATIONS, dtype=bool)
        for n, t in stats:
            crossed |= t > t_quantile(n - 1, mid)
        if crossed.mean() > error:
            low = mid
        else:
            high = mid
    return high
