"""How precisely a run measured each metric: a 90% interval per metric, from its own records.

- **Rates** (throughputs, goodput): batch means within the run. Each run's steady window
  (`bench/_steady.py`; the whole run where it has none) is cut into sub-windows of at least
  `MIN_BATCH_S`, at most `BATCHES` per run; the output tokens streamed in each give one rate,
  and the interval of their mean is Student's t over those rates. Its relative half-width
  stands for every rate of the run (they are counted over the same window).
- **Percentiles** of a per-request latency (TTFT, TPOT, E2E; ITL pools every gap): the
  distribution-free interval of a quantile, between the order statistics whose ranks a
  binomial count of samples below the quantile reaches with 90% (normal approximation,
  continuity-corrected). Where that rank runs past the largest sample the interval has no
  upper end (`inf`): a p99 over 64 requests cannot say how far its tail goes.
- **Means**: Student's t over the samples.
- **error_rate**: Wilson's interval of a proportion.

Pure functions over records; `intervals_of` returns {metric: (low, high)} for the metrics it
can bound (see docs/metrics.md, "Intervals").
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from statistics import NormalDist

from autotune.bench._records import RequestRecord
from autotune.bench._steady import Window, steady_window, tokens_between

LEVEL = 0.90  # two-sided
MIN_BATCH_S = 0.5  # a rate's batch is at least this long
BATCHES = 10  # at most this many batches per run
_Z = NormalDist().inv_cdf(0.5 + LEVEL / 2)
_RATES = ("output_throughput", "total_throughput", "request_throughput", "goodput")
_LATENCIES = ("ttft", "tpot", "e2e", "itl")

LowHigh = tuple[float, float]  # a confidence interval: (low, high)


def t_quantile(df: int, level: float = LEVEL) -> float:
    """Student's t quantile of a two-sided `level` interval with `df` degrees of freedom."""
    from scipy.stats import t as student_t  # here: scipy.stats costs every command 0.5 s

    return float(student_t.ppf(0.5 + level / 2, df))


def rate_batches(runs: Sequence[Sequence[RequestRecord]]) -> list[float]:
    """Output tokens per second in each batch of each run's steady window."""
    rates: list[float] = []
    for records in runs:
        good = [r for r in records if r.ok and r.token_times]
        if not good:
            continue
        window = steady_window(records) or _whole(records)
        if window.seconds <= 0:
            continue
        count = max(1, min(BATCHES, int(window.seconds // MIN_BATCH_S)))
        width = window.seconds / count
        for k in range(count):
            start = window.start + k * width
            rates.append(sum(tokens_between(r, start, start + width) for r in good) / width)
    return rates


def _whole(records: Sequence[RequestRecord]) -> Window:
    return Window(min(r.send_time for r in records), max(r.end_time for r in records))


def relative_halfwidth(samples: Sequence[float]) -> float:
    """Half the width of the 90% t interval of the samples' mean, over that mean (inf with
    fewer than two samples or a mean of 0)."""
    if len(samples) < 2:
        return math.inf
    mean = statistics.fmean(samples)
    if mean <= 0:
        return math.inf
    half = t_quantile(len(samples) - 1) * statistics.stdev(samples) / math.sqrt(len(samples))
    return half / mean


def quantile_interval(values: Sequence[float], q: float) -> LowHigh:
    """The distribution-free 90% interval of the q-th percentile (0-100) of `values`' law:
    order statistics at ranks `n p -+ z sqrt(n p (1 - p))` (continuity-corrected, 1-based);
    `inf` where the upper rank runs past the largest value, `-inf` below the smallest."""
    n = len(values)
    if n == 0:
        return (math.inf, math.inf)
    ordered = sorted(values)
    p = q / 100
    sd = math.sqrt(n * p * (1 - p))
    low = math.floor(n * p - _Z * sd - 0.5)
    high = math.ceil(n * p + _Z * sd + 0.5)
    lo = ordered[low - 1] if low >= 1 else -math.inf
    hi = ordered[high - 1] if high <= n else math.inf
    return (lo, hi)


def mean_interval(values: Sequence[float]) -> LowHigh:
    if len(values) < 2:
        return (-math.inf, math.inf) if values else (math.inf, math.inf)
    mean = statistics.fmean(values)
    half = t_quantile(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return (mean - half, mean + half)


def wilson(errors: int, total: int) -> LowHigh:
    """Wilson's 90% interval of a proportion of `errors` in `total`."""
    if total == 0:
        return (0.0, 1.0)
    p = errors / total
    centre = (p + _Z**2 / (2 * total)) / (1 + _Z**2 / total)
    half = _Z * math.sqrt(p * (1 - p) / total + _Z**2 / (4 * total**2)) / (1 + _Z**2 / total)
    return (max(0.0, centre - half), min(1.0, centre + half))


def intervals_of(
    runs: Sequence[Sequence[RequestRecord]], values: Mapping[str, float]
) -> dict[str, LowHigh]:
    """{metric: 90% interval} for the rates, latency statistics and error rate of `runs`'
    records (their requests pooled), the rates' around `values` (the summary's figures)."""
    out: dict[str, LowHigh] = {}
    half = relative_halfwidth(rate_batches(runs))
    for name in (*_RATES, "run_output_throughput"):
        value = values.get(name)
        if value is not None and math.isfinite(value) and math.isfinite(half):
            out[name] = (value * (1 - half), value * (1 + half))
    good = [r for records in runs for r in records if r.ok]
    samples = {
        "ttft": [r.ttft for r in good if r.ttft is not None],
        "tpot": [r.tpot for r in good if r.tpot is not None],
        "e2e": [r.e2e for r in good],
        "itl": [gap for r in good for gap in r.itl],
    }
    for latency in _LATENCIES:
        ms = [v * 1000.0 for v in samples[latency]]
        if not ms:
            continue
        out[f"mean_{latency}_ms"] = mean_interval(ms)
        for q in (50, 90, 99):
            out[f"p{q}_{latency}_ms"] = quantile_interval(ms, q)
    total = sum(len(records) for records in runs)
    out["error_rate"] = wilson(total - len(good), total)
    return out
