"""benchmarks/sim/report.py: how slow a host may get before a near-best config misses an SLO,
and when the search benchmark's drift lets a run be that fast."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# `benchmarks` here is tests/benchmarks: import benchmarks/sim as the top-level package `sim`.
sys.path.insert(0, str(REPO / "benchmarks"))

from sim.landscapes import LANDSCAPES  # noqa: E402
from sim.noise import DRIFT_PERIOD_S, drift_factor  # noqa: E402
from sim.report import (  # noqa: E402
    DRIFT,
    NOISE,
    SPEED_STEPS,
    drift_window_s,
    evaluate,
    required_speed,
)

from autotune.space import load_space  # noqa: E402

L40S = LANDSCAPES["llama8b-l40s-prefill"]
NEAR_BEST = {"max_num_seqs": 239, "max_num_batched_tokens": 328, "gpu_memory_utilization": 0.8}


def test_a_closed_loop_config_meets_its_slos_down_to_its_largest_share_of_a_bound() -> None:
    space = load_space(L40S.space)
    full = evaluate(L40S, space, NEAR_BEST)
    assert full.meets(L40S.slos)
    # A closed loop on a host `s` times as fast stretches every time by 1/s, so the config
    # meets its SLOs exactly while s >= the largest value / bound at full speed.
    share = max(getattr(full, name) / bound for name, bound in L40S.slos.items())
    assert 0.5 < share < 1
    got = required_speed(L40S, space, NEAR_BEST)
    assert share <= got <= share + 0.5 / 2**SPEED_STEPS
    missed = {**NEAR_BEST, "max_num_batched_tokens": 8192}  # long prefills: TPOT over its bound
    assert not evaluate(L40S, space, missed).meets(L40S.slos)
    assert required_speed(L40S, space, missed) == 1.0


def test_the_drift_window_is_where_the_benchmarks_drift_lets_a_lucky_run_be_that_fast() -> None:
    speed = 0.93
    window = drift_window_s(speed)
    assert window is not None and 0 < window < DRIFT_PERIOD_S / 2
    assert (1 + NOISE) * drift_factor(window, DRIFT) == pytest.approx(speed)
    assert (1 + NOISE) * drift_factor(window - 60, DRIFT) > speed
    assert (1 + NOISE) * drift_factor(window + 60, DRIFT) < speed
    assert (1 + NOISE) * drift_factor(DRIFT_PERIOD_S - window + 60, DRIFT) > speed
    assert drift_window_s((1 - DRIFT) * (1 + NOISE)) is None  # the slowest the drift gets
