"""Objective values and constraints told to Optuna."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from autotune.bench import Summary
from autotune.measure import (
    ERROR_RATE,
    FAILED,
    OOM,
    WORST_MAXIMIZE,
    WORST_MINIMIZE,
    constraint_values,
    objective_values,
)
from autotune.vocab.objectives import Objective

OBJECTIVES = [
    Objective(metric="output_throughput", direction="maximize"),
    Objective(metric="p99_ttft_ms", direction="minimize"),
    Objective(metric="p99_tpot_ms", direction="minimize"),
]
SLOS = {"p99_ttft_ms": 100.0, "p99_tpot_ms": 10.0}


def test_measured_values_follow_the_objectives(summary_of: Callable[..., Summary]) -> None:
    summary = summary_of(throughput=1234.0, ttft_p99=80.0, tpot_p99=4.0)
    assert objective_values(OBJECTIVES, summary) == [1234.0, 80.0, 4.0]


def test_failed_trial_gets_worst_values() -> None:
    assert objective_values(OBJECTIVES, None) == [WORST_MAXIMIZE, WORST_MINIMIZE, WORST_MINIMIZE]
    assert WORST_MAXIMIZE == 0.0
    assert WORST_MINIMIZE >= 1e9


def test_unmeasurable_latency_becomes_worst_value(summary_of: Callable[..., Summary]) -> None:
    # No request produced a second token: TPOT has no samples and is inf.
    summary = summary_of(tpot_p99=math.inf)
    assert objective_values(OBJECTIVES, summary)[2] == WORST_MINIMIZE
    assert all(math.isfinite(v) for v in objective_values(OBJECTIVES, summary))


def test_slo_constraints_are_relative(summary_of: Callable[..., Summary]) -> None:
    summary = summary_of(ttft_p99=150.0, tpot_p99=5.0)
    values = constraint_values(summary, SLOS, max_error_rate=0.0)
    assert values[FAILED] == 0.0
    assert values["p99_ttft_ms"] == pytest.approx(0.5)  # 150 / 100 - 1: violated by 50%
    assert values["p99_tpot_ms"] == pytest.approx(-0.5)  # 5 / 10 - 1: met


def test_slo_exactly_met_is_feasible(summary_of: Callable[..., Summary]) -> None:
    values = constraint_values(summary_of(ttft_p99=100.0), {"p99_ttft_ms": 100.0}, 0.0)
    assert values["p99_ttft_ms"] == pytest.approx(0.0)


def test_error_rate_constraint(summary_of: Callable[..., Summary]) -> None:
    summary = summary_of(completed=9, errors=1)  # error rate 0.1
    assert constraint_values(summary, {}, 0.0)[ERROR_RATE] == pytest.approx(0.1)
    assert constraint_values(summary, {}, 0.2)[ERROR_RATE] == pytest.approx(-0.1)
    assert constraint_values(summary_of(), {}, 0.0)[ERROR_RATE] == 0.0


def test_failed_trial_violates_every_constraint_but_oom() -> None:
    values = constraint_values(None, SLOS, 0.0, "crash")
    assert values[FAILED] == 1.0 and values[OOM] == 0.0
    assert all(v > 0 for k, v in values.items() if k != OOM)


@pytest.mark.parametrize("status", ["oom", "predicted_oom"])
def test_out_of_memory_trials_violate_the_oom_constraint(status: str) -> None:
    values = constraint_values(None, SLOS, 0.0, status)
    assert values[OOM] == 1.0 and values[FAILED] == 1.0


def test_every_trial_gets_the_same_constraint_names(summary_of: Callable[..., Summary]) -> None:
    # Optuna's samplers need one constraint vector shape across trials.
    measured = constraint_values(summary_of(), SLOS, 0.05)
    failed = constraint_values(None, SLOS, 0.05)
    assert set(measured) == set(failed) == {FAILED, OOM, ERROR_RATE, *SLOS}
