"""`tune` warns, once per SLO, when a run's requests are too few for the percentile the SLO
names (docs/metrics.md, Percentiles); the study goes on."""

from __future__ import annotations

from collections.abc import Callable

from typer.testing import Result

from autotune.cli._tune import percentile_warnings
from autotune.spec import TuneSpec

Invoke = Callable[..., Result]
TuneArgv = Callable[..., list]


def spec(workload: str, precision: str | dict = "off", **slos: float | str) -> TuneSpec:
    return TuneSpec.model_validate(
        {"study": "s", "model": "m", "workload": workload, "slos": slos, "precision": precision}
    )


def test_one_line_per_percentile_slo_on_too_few_requests() -> None:
    lines = percentile_warnings(
        spec(
            "random:input=8,output=8,prompts=64",
            p99_ttft_ms=500,
            p99_tpot_ms="baseline*1.2",
            p90_e2e_ms=900,
            mean_ttft_ms=100,
            p99_itl_ms=50,
            output_throughput=10,
        )
    )
    assert lines == [
        "p99_ttft_ms over 64 requests is about the largest of them (0.6 samples above the p99); "
        "an SLO on it needs >= 1,000 requests to be stable (docs/metrics.md, Percentiles)",
        "p90_e2e_ms over 64 requests is set by the largest 6 of them (6.4 samples above the "
        "p90); an SLO on it needs >= 100 requests to be stable (docs/metrics.md, Percentiles)",
        "p99_tpot_ms over 64 requests is about the largest of them (0.6 samples above the p99); "
        "an SLO on it needs >= 1,000 requests to be stable (docs/metrics.md, Percentiles)",
    ]


def test_a_sized_trial_counts_the_batches_it_may_pool() -> None:
    # Sized runs (the default) go on until a p99 rests on 1,000 requests: 64 prompts a batch
    # and 20 batches at most reach it, and the demo's p90s need 100; a cap of 5 does not.
    assert percentile_warnings(spec("random:prompts=64", {}, p99_ttft_ms=500)) == []
    assert percentile_warnings(spec("random:prompts=64", {}, p90_tpot_ms="baseline*1.2")) == []
    assert percentile_warnings(spec("random:prompts=64", {"max_batches": 5}, p99_ttft_ms=5)) == [
        "p99_ttft_ms over 320 requests is set by the largest 3 of them (3.2 samples above the "
        "p99); an SLO on it needs >= 1,000 requests to be stable (docs/metrics.md, Percentiles)"
    ]
    # Without sizing, `repeats` batches are pooled.
    repeated = TuneSpec.model_validate({"study": "s", "model": "m", "precision": "off",
        "workload": "random:prompts=64", "repeats": 2, "slos": {"p90_ttft_ms": 5}})  # fmt: skip
    assert percentile_warnings(repeated) == []


def test_no_line_for_a_large_enough_or_unknown_workload() -> None:
    assert percentile_warnings(spec("random:prompts=1000", p99_ttft_ms=500)) == []
    assert percentile_warnings(spec("random:prompts=100", p90_ttft_ms=500)) == []
    assert percentile_warnings(spec("random:prompts=64")) == []  # no SLO
    # A JSONL file without `prompts` sends every entry: the count is not known before the run.
    assert percentile_warnings(spec("jsonl:path=prompts.jsonl", p99_ttft_ms=500)) == []


def test_tune_prints_the_warning_once_per_slo_and_goes_on(cli: Invoke, tune_argv: TuneArgv) -> None:
    # 20 requests: a p99 and a p90 are too many for them, a p50 (10 samples above) is not.
    result = cli(
        *tune_argv("pw", "--trials", "1", "--workload", "random:input=32,output=8,prompts=20"),
        *("--slo", "p99_ttft_ms=100000", "--slo", "p90_tpot_ms=baseline*2"),
        *("--slo", "p50_e2e_ms=100000"),
    )
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    assert warnings == [
        "warning: p99_ttft_ms over 20 requests is about the largest of them (0.2 samples above "
        "the p99); an SLO on it needs >= 1,000 requests to be stable (docs/metrics.md, "
        "Percentiles)",
        "warning: p90_tpot_ms over 20 requests is set by the largest 2 of them (2.0 samples "
        "above the p90); an SLO on it needs >= 100 requests to be stable (docs/metrics.md, "
        "Percentiles)",
    ]
    assert "Pareto front" in result.stdout  # a warning: the study ran
