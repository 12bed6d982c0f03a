"""Aggregation of scripted records."""

from __future__ import annotations

import math

import pytest

from autotune.bench import METRIC_NAMES, RequestRecord, Summary, percentile, summarize


def record(
    index: int,
    send: float,
    tokens: tuple[float, ...],
    end: float,
    out: int,
    error: str | None = None,
) -> RequestRecord:
    return RequestRecord(
        index=index,
        send_time=send,
        first_token_time=tokens[0] if tokens else None,
        token_times=tokens,
        end_time=end,
        prompt_tokens=10,
        output_tokens=out,
        error=error,
    )


RECORDS = [
    record(0, 0.0, (1.0, 2.0, 3.0), 3.0, 3),  # ttft 1, itl 1 1, tpot 1, e2e 3
    record(1, 1.0, (1.5, 2.5), 4.0, 2),  # ttft 0.5, itl 1, tpot 1, e2e 1.5
    record(2, 2.0, (), 5.0, 0, error="HTTP 500"),
]


def test_percentile_matches_numpy_linear() -> None:
    assert percentile([3.0, 1.0, 2.0, 4.0], 50) == 2.5
    assert percentile([float(v) for v in range(1, 11)], 90) == pytest.approx(9.1)
    assert percentile([5.0], 99) == 5.0
    assert percentile([], 50) == math.inf
    np = pytest.importorskip("numpy")
    values = [0.3, 7.0, 1.5, 2.25, 9.0, 4.0, 4.0]
    for q in (0, 10, 50, 90, 99, 100):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_summary_counts_successes_only() -> None:
    summary = summarize(RECORDS)
    assert (summary.completed, summary.errors) == (2, 1)
    assert summary.duration_s == 5.0
    assert summary.output_throughput == 1.0
    assert summary.total_throughput == 5.0
    assert summary.request_throughput == 0.4
    assert summary.goodput == 0.4
    assert summary.ttft_ms.mean == 750.0
    assert summary.ttft_ms.p50 == 750.0
    assert summary.ttft_ms.p90 == pytest.approx(950.0)
    assert summary.ttft_ms.p99 == pytest.approx(995.0)
    assert summary.itl_ms.mean == 1000.0
    assert summary.tpot_ms.p99 == 1000.0
    assert summary.e2e_ms.mean == 2250.0
    assert summary.metric("error_rate") == pytest.approx(1 / 3)
    assert summary.metric("errors") == 1.0
    assert summary.metric("p90_ttft_ms") == pytest.approx(950.0)
    assert summary.metric("mean_e2e_ms") == 2250.0


def test_goodput_checks_each_request() -> None:
    assert summarize(RECORDS, {"p99_ttft_ms": 600.0}).goodput == 0.2
    assert summarize(RECORDS, {"p50_itl_ms": 1000.0}).goodput == 0.4
    assert summarize(RECORDS, {"p50_itl_ms": 999.0}).goodput == 0.0
    assert summarize(RECORDS, {"mean_e2e_ms": 2000.0, "error_rate": 0.0}).goodput == 0.2
    assert summarize(RECORDS, {"p99_tpot_ms": 1000.0, "p50_tpot_ms": 2000.0}).goodput == 0.4
    with pytest.raises(KeyError, match="p99_ttft"):
        summarize(RECORDS, {"p99_ttft": 1.0})


def test_no_success_gives_zero_throughput_and_infinite_latency() -> None:
    summary = summarize([RECORDS[2]])
    assert summary.completed == 0 and summary.errors == 1
    assert summary.output_throughput == 0.0 and summary.goodput == 0.0
    assert summary.metric("p99_ttft_ms") == math.inf
    assert summary.metric("error_rate") == 1.0
    assert Summary.model_validate_json(summary.model_dump_json()) == summary
    empty = summarize([])
    assert empty.duration_s == 0.0 and empty.metric("error_rate") == 0.0


def test_metric_names() -> None:
    summary = summarize(RECORDS)
    assert {name: summary.metric(name) for name in METRIC_NAMES}  # every name resolves
    assert "p50_itl_ms" in METRIC_NAMES and "goodput" in METRIC_NAMES
    with pytest.raises(KeyError, match="known: output_throughput"):
        summary.metric("p95_ttft_ms")


def test_median_summary_takes_each_metric_median_and_spread_half_the_range() -> None:
    from autotune.bench import median_summary, spread

    runs = [summarize(RECORDS[:k]) for k in (1, 2, 2)]
    runs = [
        runs[0].model_copy(update={"output_throughput": 100.0}),
        runs[1].model_copy(update={"output_throughput": 130.0}),
        runs[2].model_copy(update={"output_throughput": 90.0}),
    ]
    median = median_summary(runs)
    assert median.output_throughput == 100.0
    assert median.ttft_ms.p99 == percentile([r.ttft_ms.p99 for r in runs], 50)
    assert median_summary(runs[:1]) is runs[0]
    wobble = spread(runs, ["output_throughput", "p99_ttft_ms"])
    assert wobble["output_throughput"] == 20.0
    with pytest.raises(ValueError):
        median_summary([])
