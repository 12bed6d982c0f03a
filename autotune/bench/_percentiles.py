"""How many requests a percentile needs: pure functions, see docs/metrics.md, Percentiles."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

# Samples expected above a percentile before an SLO on it is more than its largest few samples.
MIN_ABOVE = 10
# Latencies with one sample per measured request. ITL pools every gap of every request
# (output - 1 per request), so its sample count is not the request count: left out.
_PER_REQUEST = ("ttft", "tpot", "e2e")


def percentile_support(q: float, n: int) -> float:
    """The expected number of samples above the q-th percentile (0-100) of n: `n * (1 - q/100)`.

    The percentile (`percentile`, numpy's linear method) of sorted values `v[0..n-1]` lies
    between `v[j]` and `v[j+1]` with `j + f = (n - 1) * q / 100`: a p99 over 64 requests is
    `v[62] + 0.37 * (v[63] - v[62])`, between the second largest and the largest of 64 draws,
    with 0.64 samples expected above it. It is then about the maximum of 64 draws and moves by
    the gap between the two largest from one run to the next. With k samples above, the relative
    sampling error of a tail percentile shrinks roughly like 1 / sqrt(k) (measured in
    docs/metrics.md: `benchmarks/percentile_spread.py`).
    """
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q:g} is not in 0-100")
    return n * (1 - q / 100)


def min_requests(q: float, k: float = MIN_ABOVE) -> int:
    """The fewest requests with at least k samples expected above the q-th percentile (0-100):
    1,000 for p99, 200 for p95, 100 for p90 and 20 for p50 with the default k of 10."""
    if not 0 <= q < 100:
        raise ValueError(f"percentile {q:g} is not in 0-100 (100 excluded)")
    # Less a hair before the ceiling: 100 - 99.9 is 0.0999999999999943 in floating point.
    return math.ceil(k * 100 / (100 - q) - 1e-6)


def slo_percentile(metric: str) -> float | None:
    """The percentile a metric name states over one sample per request (`p99_ttft_ms` -> 99),
    or None: a mean, a pooled ITL percentile, a throughput."""
    stat, _, rest = metric.partition("_")
    latency, _, unit = rest.partition("_")
    if stat[:1] != "p" or not stat[1:].isdigit() or latency not in _PER_REQUEST or unit != "ms":
        return None
    return float(stat[1:])


@dataclass(frozen=True)
class ThinPercentile:
    """An SLO whose percentile rests on fewer than `MIN_ABOVE` samples of a run's requests."""

    metric: str
    q: float
    requests: int
    above: float  # samples expected above the percentile (`percentile_support`)
    needed: int  # requests for MIN_ABOVE samples above it (`min_requests`)


def thin_percentiles(metrics: Iterable[str], requests: int | None) -> list[ThinPercentile]:
    """The metrics (SLO names) that name a percentile of a per-request latency too high for
    `requests` measured requests per run (None: not known before the run, nothing to say)."""
    out: list[ThinPercentile] = []
    for metric in metrics:
        q = slo_percentile(metric)
        if q is None or requests is None or q >= 100 or requests >= min_requests(q):
            continue
        out.append(
            ThinPercentile(metric, q, requests, percentile_support(q, requests), min_requests(q))
        )
    return out
