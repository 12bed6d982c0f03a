"""`find_capacity`: the highest rate within the SLOs, on a scripted engine."""

from __future__ import annotations

import math

import pytest

from autotune.bench import CapacitySearch, LoadProfile, Stats, Summary, find_capacity


def summary(rate: float, ttft_ms: float, throughput: float = 10.0) -> Summary:
    stats = Stats(mean=ttft_ms, p50=ttft_ms, p90=ttft_ms, p99=ttft_ms)
    return Summary(
        completed=32, errors=0, duration_s=1.0, output_throughput=throughput * 16,
        total_throughput=throughput * 32, request_throughput=throughput, goodput=throughput,
        ttft_ms=stats, tpot_ms=stats, itl_ms=stats, e2e_ms=stats,
    )  # fmt: skip


class Engine:
    """Serves 10 requests/s at most; TTFT stays low up to `knee` requests/s, then explodes."""

    def __init__(self, knee: float, ceiling: float = 10.0) -> None:
        self.knee, self.ceiling = knee, ceiling
        self.rates: list[float] = []

    def run(self, profile: LoadProfile) -> Summary:
        rate = profile.rate or math.inf
        self.rates.append(rate)
        ttft = 100.0 if rate <= self.knee else 5000.0
        return summary(rate, ttft, throughput=self.ceiling)


def holds(s: Summary) -> bool:
    return s.metric("p99_ttft_ms") <= 500


BASE = LoadProfile(rate=1.0, concurrency=8, seed=3)


def test_bisects_to_the_knee_within_the_tolerance() -> None:
    engine = Engine(knee=6.3)
    found = find_capacity(engine.run, BASE, holds, CapacitySearch(steps=8, tolerance=0.05))
    assert math.isinf(engine.rates[0])  # the saturation probe first
    assert engine.rates[1] == 10.0  # then the ceiling it measured
    assert found.rate <= 6.3 and 6.3 - found.rate <= 0.05 * 10 + 1e-9
    assert found.summary.metric("p99_ttft_ms") == 100.0  # latencies at capacity
    failing = [lv.rate for lv in found.levels[1:] if not lv.holds]
    assert min(failing) - found.rate <= 0.05 * 10 + 1e-9  # one step above does not hold
    assert found.to_dict()["levels"][0] == {"rate": None, "holds": False, "runs": 1}


def test_every_level_keeps_the_base_profiles_cap_and_seed() -> None:
    seen: list[LoadProfile] = []

    def run(profile: LoadProfile) -> Summary:
        seen.append(profile)
        return summary(profile.rate or 0, 100.0)

    find_capacity(run, BASE, holds, CapacitySearch())
    assert all(p.concurrency == 8 and p.seed == 3 for p in seen)


def test_holding_at_the_ceiling_stops_there() -> None:
    engine = Engine(knee=100.0)
    found = find_capacity(engine.run, BASE, holds, CapacitySearch(repeats=1))
    assert found.rate == 10.0 and len(engine.rates) == 2
    twice = Engine(knee=100.0)
    find_capacity(twice.run, BASE, holds, CapacitySearch(repeats=2))
    assert twice.rates[1:] == [10.0, 10.0]  # a level holds only when each of its runs does


def test_a_level_that_holds_only_sometimes_does_not_hold() -> None:
    calls: dict[float, int] = {}

    def flaky(profile: LoadProfile) -> Summary:
        rate = profile.rate or math.inf
        calls[rate] = calls.get(rate, 0) + 1
        lucky = rate <= 5 or (rate <= 8 and calls[rate] == 1)  # 5..8: holds once, then not
        return summary(rate, 100.0 if lucky else 5000.0)

    found = find_capacity(flaky, BASE, holds, CapacitySearch(steps=8, tolerance=0.05, repeats=3))
    assert found.rate <= 5.0


@pytest.mark.parametrize("steps", [1, 3, 5])
def test_nothing_holds_is_zero_with_the_lowest_level(steps: int) -> None:
    engine = Engine(knee=0.0)
    found = find_capacity(engine.run, BASE, holds, CapacitySearch(steps=steps, tolerance=0.01))
    assert found.rate == 0.0
    assert len(engine.rates) == 1 + steps
    assert found.summary is min(found.levels[1:], key=lambda lv: lv.rate).summary
