"""Aggregation of request records into a summary: pure functions, see docs/metrics.md."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from pydantic import BaseModel, ConfigDict

from autotune.bench._intervals import intervals_of
from autotune.bench._records import RequestRecord
from autotune.bench._steady import steady_counts

STATS = ("mean", "p50", "p90", "p99")
LATENCIES = ("ttft", "tpot", "itl", "e2e")
# Rates over the run's steady window (bench/_steady.py; the whole run where it has none), and
# the whole run's output rate beside them (ramp and drain included, as `vllm bench serve`).
THROUGHPUTS = (
    "output_throughput",
    "total_throughput",
    "request_throughput",
    "goodput",
    "run_output_throughput",
)
# Metrics that are rates (more is better; a slower host delivers less of them).
RATES = frozenset({*THROUGHPUTS, "capacity_rps"})
# Metrics in inverse proportion to a rate (a slower host makes them larger, as latencies).
PER_TOKEN_COSTS = frozenset({"cost_per_mtok"})
# What the engine counted over the measured requests (bench._counters); None: not counted.
ENGINE_RATES = (
    "prefix_cache_hit_rate",
    "spec_acceptance_rate",
    "spec_acceptance_length",
    "engine_mean_ttft_ms",
    "engine_mean_tpot_ms",
)
# How far a config's greedy outputs agree with the baseline's (measure/_agreement.py).
AGREEMENT_METRICS = ("agreement_exact", "agreement_tokens")
# Metrics a run may not have: None in the Summary, left out where metrics are stored.
OPTIONAL = ("capacity_rps", "peak_memory_gib", "cost_per_mtok", *ENGINE_RATES, *AGREEMENT_METRICS)
# The optional metrics that read NaN, not 0, where a run has none (capacity_rps reads 0).
_NAN_WHEN_NONE = frozenset(OPTIONAL) - {"capacity_rps"}
METRIC_NAMES: tuple[str, ...] = (
    *THROUGHPUTS,
    "capacity_rps",
    "peak_memory_gib",
    "cost_per_mtok",
    *ENGINE_RATES,
    *AGREEMENT_METRICS,
    "errors",
    "error_rate",
    *(f"{stat}_{latency}_ms" for latency in LATENCIES for stat in STATS),
)

# The per-request value a latency SLO is checked against (seconds; None: nothing to check).
_PER_REQUEST: dict[str, Callable[[RequestRecord], float | None]] = {
    "ttft": lambda record: record.ttft,
    "tpot": lambda record: record.tpot,
    "itl": lambda record: max(record.itl, default=None),
    "e2e": lambda record: record.e2e,
}


class Stats(BaseModel):
    """Mean and percentiles of one latency, in milliseconds (all `inf` without samples)."""

    model_config = ConfigDict(frozen=True, ser_json_inf_nan="constants")

    mean: float
    p50: float
    p90: float
    p99: float


class Summary(BaseModel):
    """Aggregate of one benchmark run; throughputs count successful requests only."""

    model_config = ConfigDict(frozen=True, ser_json_inf_nan="constants")

    completed: int
    errors: int
    duration_s: float
    output_throughput: float
    total_throughput: float
    request_throughput: float
    goodput: float
    # The whole run's output rate (ramp and drain included); 0 in summaries stored before it.
    run_output_throughput: float = 0.0
    # Seconds of the steady window the rates are over (None: the whole run, it has none).
    steady_s: float | None = None
    ttft_ms: Stats
    tpot_ms: Stats
    itl_ms: Stats
    e2e_ms: Stats
    # Set by a capacity search (`find_capacity`): the highest rate at which the SLOs held.
    capacity_rps: float | None = None
    # Set by an offline trial: the engine's peak memory (see docs/metrics.md), GiB.
    peak_memory_gib: float | None = None
    # With a device cost: what a million output tokens cost at this throughput (`with_cost`).
    cost_per_mtok: float | None = None
    # From the engine's own counters over the measured requests (bench._counters).
    prefix_cache_hit_rate: float | None = None
    spec_acceptance_rate: float | None = None
    spec_acceptance_length: float | None = None
    engine_mean_ttft_ms: float | None = None
    engine_mean_tpot_ms: float | None = None
    # With --min-agreement: the greedy outputs' agreement with the baseline's (`with_agreement`).
    agreement_exact: float | None = None
    agreement_tokens: float | None = None
    # How precisely the run measured each metric: its 90% interval (bench/_intervals.py).
    intervals: dict[str, tuple[float, float]] | None = None

    def metric(self, name: str) -> float:
        """A metric by its flat name (see METRIC_NAMES), e.g. `p99_ttft_ms`."""
        if name not in METRIC_NAMES:
            raise KeyError(f"unknown metric {name!r}; known: {', '.join(METRIC_NAMES)}")
        if name == "errors":
            return float(self.errors)
        if name == "capacity_rps":
            return float(self.capacity_rps or 0.0)  # 0 when not searched (never NaN)
        if name in _NAN_WHEN_NONE:
            value = getattr(self, name)
            return math.nan if value is None else float(value)
        if name == "error_rate":
            total = self.completed + self.errors
            return self.errors / total if total else 0.0
        if name in THROUGHPUTS:
            return float(getattr(self, name))
        stat, latency, _ = name.split("_")
        return float(getattr(getattr(self, f"{latency}_ms"), stat))


def with_intervals(summary: Summary, runs: Sequence[Sequence[RequestRecord]]) -> Summary:
    """`summary` with the 90% interval of each metric its `runs` can bound."""
    values = {name: summary.metric(name) for name in THROUGHPUTS}
    return summary.model_copy(update={"intervals": intervals_of(runs, values)})


def with_agreement(summary: Summary, exact: float, tokens: float) -> Summary:
    """`summary` with the trial's agreement with the baseline's greedy outputs."""
    return summary.model_copy(update={"agreement_exact": exact, "agreement_tokens": tokens})


def with_cost(summary: Summary, per_device_hour: float, devices: int) -> Summary:
    """`cost_per_mtok` = what `devices` cost per hour / output tokens per hour * 1e6: the
    price of a million output tokens at the measured throughput (inf when none came out)."""
    tokens_per_hour = summary.output_throughput * 3600.0
    cost = per_device_hour * devices
    value = cost / tokens_per_hour * 1e6 if tokens_per_hour > 0 else math.inf
    return summary.model_copy(update={"cost_per_mtok": value})


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation, as numpy's default method."""
    if not values:
        return math.inf
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def stats_ms(seconds: Sequence[float]) -> Stats:
    """Stats of latencies given in seconds, reported in milliseconds."""
    values = [value * 1000.0 for value in seconds]
    mean = math.fsum(values) / len(values) if values else math.inf
    return Stats(
        mean=mean,
        p50=percentile(values, 50),
        p90=percentile(values, 90),
        p99=percentile(values, 99),
    )


def summarize(records: Sequence[RequestRecord], slos: Mapping[str, float] | None = None) -> Summary:
    """Aggregate measured records (warm-up excluded by the caller).

    `slos` maps metric names to upper bounds; for goodput, a request counts when its own value
    of every latency SLO's metric (ttft, tpot, e2e, max itl) is within the bound. SLOs on
    aggregate metrics (throughputs, error_rate) do not affect goodput.
    """
    bounds = _latency_bounds(slos or {})
    good = [record for record in records if record.ok]
    duration = _duration(records)
    output = sum(record.output_tokens for record in good)
    meets = [record.ok and _meets(record, bounds) for record in records]
    steady = steady_counts(records, meets, duration)
    return Summary(
        completed=len(good),
        errors=len(records) - len(good),
        duration_s=duration,
        output_throughput=_per_second(steady.output_tokens, steady.seconds),
        total_throughput=_per_second(steady.prompt_tokens + steady.output_tokens, steady.seconds),
        request_throughput=_per_second(steady.requests, steady.seconds),
        goodput=_per_second(steady.good_requests, steady.seconds),
        run_output_throughput=_per_second(output, duration),
        steady_s=steady.seconds if steady.steady else None,
        ttft_ms=stats_ms([r.ttft for r in good if r.ttft is not None]),
        tpot_ms=stats_ms([r.tpot for r in good if r.tpot is not None]),
        itl_ms=stats_ms([gap for r in good for gap in r.itl]),
        e2e_ms=stats_ms([r.e2e for r in good]),
    )


def pooled_summary(
    runs: Sequence[Sequence[RequestRecord]], slos: Mapping[str, float] | None = None
) -> Summary:
    """The summary of the batches of one run on one engine, their requests pooled: latency
    statistics over every request; rates over the batches' steady windows together (each
    batch's tokens in its window, over the windows' seconds); the whole-run rate over the
    batches' durations (the pauses between them left out)."""
    if len(runs) == 1:
        return summarize(runs[0], slos)
    bounds = _latency_bounds(slos or {})
    records = [r for batch in runs for r in batch]
    good = [r for r in records if r.ok]
    counts = [
        steady_counts(batch, [r.ok and _meets(r, bounds) for r in batch], _duration(batch))
        for batch in runs
    ]
    seconds = sum(c.seconds for c in counts)
    output = sum(c.output_tokens for c in counts)
    duration = sum(_duration(batch) for batch in runs)
    steady = [c.seconds for c in counts if c.steady]
    return Summary(
        completed=len(good),
        errors=len(records) - len(good),
        duration_s=duration,
        output_throughput=_per_second(output, seconds),
        total_throughput=_per_second(output + sum(c.prompt_tokens for c in counts), seconds),
        request_throughput=_per_second(sum(c.requests for c in counts), seconds),
        goodput=_per_second(sum(c.good_requests for c in counts), seconds),
        run_output_throughput=_per_second(sum(r.output_tokens for r in good), duration),
        steady_s=sum(steady) if steady else None,
        ttft_ms=stats_ms([r.ttft for r in good if r.ttft is not None]),
        tpot_ms=stats_ms([r.tpot for r in good if r.tpot is not None]),
        itl_ms=stats_ms([gap for r in good for gap in r.itl]),
        e2e_ms=stats_ms([r.e2e for r in good]),
    )


def _duration(records: Sequence[RequestRecord]) -> float:
    if not records:
        return 0.0
    return max(r.end_time for r in records) - min(r.send_time for r in records)


def _per_second(count: float, duration: float) -> float:
    return count / duration if duration > 0 else 0.0


def _latency_bounds(slos: Mapping[str, float]) -> dict[str, float]:
    """{latency: bound in ms}, the tightest bound when several stats name one latency."""
    bounds: dict[str, float] = {}
    for name, bound in slos.items():
        if name not in METRIC_NAMES:
            raise KeyError(f"unknown SLO metric {name!r}; known: {', '.join(METRIC_NAMES)}")
        parts = name.split("_")
        if len(parts) == 3 and parts[1] in LATENCIES:
            bounds[parts[1]] = min(bound, bounds.get(parts[1], math.inf))
    return bounds


def _meets(record: RequestRecord, bounds: Mapping[str, float]) -> bool:
    for latency, bound in bounds.items():
        value = _PER_REQUEST[latency](record)
        if value is not None and value * 1000.0 > bound:
            return False
    return True


def median_summary(summaries: Sequence[Summary]) -> Summary:
    """The summary of repeated runs of one config: every metric is the median of the runs'
    (each latency statistic on its own), so one lucky or unlucky run does not decide."""
    if not summaries:
        raise ValueError("no runs to take the median of")
    if len(summaries) == 1:
        return summaries[0]

    def med(values: Sequence[float]) -> float:
        return percentile(values, 50)

    stats = {
        f"{latency}_ms": Stats(
            **{
                stat: med([getattr(getattr(s, f"{latency}_ms"), stat) for s in summaries])
                for stat in STATS
            }
        )
        for latency in LATENCIES
    }
    capacities = [s.capacity_rps for s in summaries if s.capacity_rps is not None]
    peaks = [s.peak_memory_gib for s in summaries if s.peak_memory_gib is not None]
    fields: dict[str, object] = {
        "completed": round(med([s.completed for s in summaries])),
        "errors": round(med([s.errors for s in summaries])),
        "duration_s": med([s.duration_s for s in summaries]),
        "steady_s": None,
        **{name: med([getattr(s, name) for s in summaries]) for name in THROUGHPUTS},
        **stats,
        "capacity_rps": med(capacities) if capacities else None,
        "peak_memory_gib": max(peaks) if peaks else None,  # the highest: memory must fit
        # Applied to the median (measure: `with_cost`), not taken from the runs.
        "cost_per_mtok": None,
        # Counted once over every run of the config: the runs share them.
        **{name: getattr(summaries[0], name) for name in ENGINE_RATES},
    }
    return Summary.model_validate(fields)


def spread(summaries: Sequence[Summary], names: Sequence[str] = METRIC_NAMES) -> dict[str, float]:
    """Half the range of each metric over repeated runs (0 for a single run): how far one run
    may sit from another. `median - spread` is the conservative value of a maximized metric."""
    out: dict[str, float] = {}
    for name in names:
        values = [s.metric(name) for s in summaries]
        finite = [v for v in values if math.isfinite(v)]
        out[name] = (max(finite) - min(finite)) / 2 if len(finite) == len(values) else math.inf
    return out
