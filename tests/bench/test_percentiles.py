"""How many requests a percentile needs (docs/metrics.md, Percentiles)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from autotune.bench import (
    MIN_ABOVE,
    ThinPercentile,
    min_requests,
    percentile,
    percentile_support,
    slo_percentile,
    thin_percentiles,
)


@pytest.mark.parametrize(
    ("q", "n", "above"),
    [(99, 64, 0.64), (99, 1000, 10.0), (95, 64, 3.2), (90, 64, 6.4), (50, 20, 10.0), (0, 8, 8.0)],
)
def test_support_is_the_samples_expected_above_the_percentile(
    q: float, n: int, above: float
) -> None:
    assert percentile_support(q, n) == pytest.approx(above)


@pytest.mark.parametrize(
    ("q", "needed"), [(99, 1000), (95, 200), (90, 100), (50, 20), (99.9, 10000)]
)
def test_min_requests_for_ten_samples_above(q: float, needed: int) -> None:
    assert MIN_ABOVE == 10
    assert min_requests(q) == needed
    assert percentile_support(q, needed) >= MIN_ABOVE - 1e-9
    assert percentile_support(q, needed - 1) < MIN_ABOVE


def test_min_requests_takes_another_k() -> None:
    assert min_requests(99, k=1) == 100
    assert min_requests(99, k=2.5) == 250


@pytest.mark.parametrize("q", [-1, 100, 101])
def test_a_percentile_outside_0_100_is_refused(q: float) -> None:
    with pytest.raises(ValueError, match="not in 0-100"):
        min_requests(q)


def test_a_p99_over_64_lies_between_the_two_largest_samples() -> None:
    """The docstring's claim, on the project's own percentile: v[62] + 0.37 (v[63] - v[62])."""
    values = random.Random(0).sample(range(1000), 64)
    ordered = sorted(values)
    p99 = percentile(values, 99)
    assert ordered[62] <= p99 <= ordered[63]
    assert p99 == pytest.approx(ordered[62] + 0.37 * (ordered[63] - ordered[62]))
    assert p99 == pytest.approx(float(np.percentile(values, 99)))


@pytest.mark.parametrize(
    ("metric", "q"),
    [
        ("p99_ttft_ms", 99.0),
        ("p90_tpot_ms", 90.0),
        ("p50_e2e_ms", 50.0),
        ("p99_itl_ms", None),  # pooled over every gap: not one sample per request
        ("mean_ttft_ms", None),
        ("output_throughput", None),
        ("error_rate", None),
        ("cost_per_mtok", None),
    ],
)
def test_slo_percentile_reads_per_request_percentiles(metric: str, q: float | None) -> None:
    assert slo_percentile(metric) == q


def test_thin_percentiles_names_each_percentile_slo_below_its_threshold() -> None:
    slos = ["p99_ttft_ms", "p99_tpot_ms", "p50_ttft_ms", "mean_e2e_ms", "p99_itl_ms", "goodput"]
    above = percentile_support(99, 64)
    assert above == pytest.approx(0.64)
    assert thin_percentiles(slos, 64) == [
        ThinPercentile("p99_ttft_ms", 99.0, 64, above, 1000),
        ThinPercentile("p99_tpot_ms", 99.0, 64, above, 1000),
    ]
    assert [t.metric for t in thin_percentiles(["p90_e2e_ms", "p50_e2e_ms"], 19)] == [
        "p90_e2e_ms",
        "p50_e2e_ms",
    ]


def test_thin_percentiles_is_silent_when_the_workload_is_large_enough_or_unknown() -> None:
    assert thin_percentiles(["p99_ttft_ms", "p90_tpot_ms", "p50_e2e_ms"], 1000) == []
    assert [t.metric for t in thin_percentiles(["p99_ttft_ms", "p90_tpot_ms"], 999)] == [
        "p99_ttft_ms"
    ]
    assert thin_percentiles(["p99_ttft_ms"], None) == []  # a JSONL file or a trace: every entry
    assert thin_percentiles([], 1) == []
