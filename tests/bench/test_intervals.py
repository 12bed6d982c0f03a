"""Each metric's 90% interval, from the run's own records."""

from __future__ import annotations

import math
import random

from autotune.bench import RequestRecord, pooled_summary, with_intervals
from autotune.bench._intervals import quantile_interval, wilson
from autotune.bench._precision import Precision, sized


def closed_loop(n: int, slots: int, seed: int) -> list[RequestRecord]:
    """`n` requests of 20-60 tokens through `slots` slots, decode steps of 20-30 ms."""
    rng = random.Random(seed)
    free = [0.0] * slots
    records = []
    for index in range(n):
        slot = min(range(slots), key=lambda k: free[k])
        t = start = free[slot]
        times = []
        for _ in range(rng.randint(20, 60)):
            t += rng.uniform(0.02, 0.03)
            times.append(t)
        records.append(RequestRecord(index, start, times[0], tuple(times), t, 16, len(times)))
        free[slot] = t
    return records


def test_a_long_runs_rates_and_percentiles_are_bounded_around_their_values() -> None:
    runs = [closed_loop(120, 8, seed) for seed in (1, 2)]
    s = with_intervals(pooled_summary(runs), runs)
    assert s.intervals is not None
    lo, hi = s.intervals["output_throughput"]
    assert lo < s.output_throughput < hi and (hi - lo) / 2 < 0.1 * s.output_throughput
    for name in ("p50_ttft_ms", "p90_tpot_ms", "mean_e2e_ms"):
        lo, hi = s.intervals[name]
        assert lo <= s.metric(name) <= hi < math.inf, name
    assert s.intervals["error_rate"][0] == 0.0


def test_a_quantiles_interval_covers_it_nine_times_in_ten() -> None:
    rng = random.Random(7)
    covered = 0
    for _ in range(400):
        values = [rng.expovariate(1.0) for _ in range(200)]
        lo, hi = quantile_interval(values, 90)
        covered += lo <= -math.log(0.1) <= hi  # the true p90 of Exp(1)
    assert 0.85 <= covered / 400 <= 0.96


def test_a_p99_over_few_requests_has_no_upper_end() -> None:
    assert quantile_interval([float(v) for v in range(64)], 99)[1] == math.inf
    assert quantile_interval([float(v) for v in range(1000)], 99)[1] < math.inf


def test_wilson_bounds_a_proportion() -> None:
    lo, hi = wilson(0, 64)
    assert lo == 0.0 and 0 < hi < 0.05
    lo, hi = wilson(32, 64)
    assert lo < 0.5 < hi
    assert wilson(0, 0) == (0.0, 1.0)


def test_two_batches_that_agree_are_not_yet_a_precise_run() -> None:
    # Two batches whose half-second windows agree to +-1% would pass any width: they are still
    # two samples of the host's speed, so the run goes on to a third.
    runs = [closed_loop(120, 8, seed) for seed in (1, 2, 3)]
    loose = Precision(throughput=0.5, slo=1.0)
    assert sized(runs[:1], {}, loose) is None
    assert sized(runs[:2], {}, loose) is None
    assert (sized(runs, {}, loose) or "").startswith("precise: 3 batches")
    assert sized(runs, {}, loose, min_batches=4) is None  # --repeats 4: the fewest
