"""benchmarks/sim/noise.py: each profile's draws reproduce its parameters, and the tuning
simulation measures through the profile it is given."""

from __future__ import annotations

import dataclasses
import math
import statistics
import sys
from itertools import pairwise
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# `benchmarks` here is tests/benchmarks: import benchmarks/sim as the top-level package `sim`.
sys.path.insert(0, str(REPO / "benchmarks"))

from sim.compare import DRIFT, NOISE, parse_args  # noqa: E402
from sim.landscapes import LANDSCAPES  # noqa: E402
from sim.noise import (  # noqa: E402
    CPU_2CORE,
    DEDICATED,
    PROFILES,
    SHARED,
    NoiseProfile,
    NoiseSource,
)
from sim.truth import Truth  # noqa: E402
from sim.tuning import METHODS, STARTUP_S, SimMeasure, run_method  # noqa: E402

from autotune.engine import EngineConfig  # noqa: E402
from autotune.space import load_space  # noqa: E402

HOUR = 3600.0
# Few requests at 16 in flight: a measured run takes milliseconds.
L40S = LANDSCAPES["llama8b-l40s-prefill"]


def _sd_log(values: list[float]) -> float:
    return statistics.stdev(math.log(v) for v in values)


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_each_profiles_draws_spread_as_it_states_per_metric(name: str) -> None:
    profile = PROFILES[name]
    source = NoiseSource(profile, seed=5)
    draws = [source.draw(0.0) for _ in range(4000)]
    for metric, sd in (
        ("throughput", profile.throughput_sd),
        ("tpot", profile.tpot_sd),
        ("p50_ttft", profile.p50_ttft_sd),
    ):
        assert _sd_log([getattr(d, metric) for d in draws]) == pytest.approx(sd, rel=0.06)
    healthy = [d.p99_ttft for d in draws if not d.degraded]
    assert _sd_log(healthy) == pytest.approx(profile.p99_ttft_sd, rel=0.06)


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_p99_ttft_spreads_more_near_the_saturation_knee(name: str) -> None:
    profile = dataclasses.replace(PROFILES[name], degraded_p=0.0, bad_windows=None)
    source = NoiseSource(profile, seed=6)
    at_knee = [source.draw(0.0, load=1.0).p99_ttft for _ in range(4000)]
    half = [source.draw(0.0, load=0.5).p99_ttft for _ in range(4000)]
    expected = profile.p99_ttft_sd * (1 + profile.p99_knee_gain)
    assert _sd_log(at_knee) == pytest.approx(expected, rel=0.06)
    assert profile.p99_ttft_sd < _sd_log(half) < _sd_log(at_knee)


def test_degraded_runs_come_as_often_and_as_large_as_the_profile_states() -> None:
    source = NoiseSource(DEDICATED, seed=7)
    draws = [source.draw(0.0) for _ in range(20000)]
    degraded = [d for d in draws if d.degraded]
    # Binomial: 200 expected, sd 14.
    assert 150 <= len(degraded) <= 250
    low, high = DEDICATED.degraded_throughput
    offset = source.device_offset(0)
    assert all(low <= d.speed / offset <= high for d in degraded)
    assert all(d.speed == offset for d in draws if not d.degraded)
    assert statistics.median(d.p99_ttft for d in degraded) > 2 * statistics.median(
        d.p99_ttft for d in draws if not d.degraded
    )
    assert not any(d.degraded for d in [NoiseSource(CPU_2CORE, 1).draw() for _ in range(500)])


def test_shared_bad_windows_come_and_go_over_hours_not_as_a_ramp() -> None:
    source = NoiseSource(SHARED, seed=8)
    days = 60
    # A run every 10 minutes of device time over 60 days.
    draws = [source.draw(k * 600.0) for k in range(days * 24 * 6)]
    bad = [d.bad_window for d in draws]
    starts = sum(1 for a, b in pairwise(bad) if b and not a)
    assert days / 2 <= starts <= 2 * days  # about one window a day
    assert SHARED.bad_windows is not None
    assert sum(bad) / len(bad) == pytest.approx(SHARED.bad_windows.bad_share, abs=0.06)
    mean_length_h = sum(bad) / 6 / max(starts, 1)
    assert 2 <= mean_length_h <= 8  # hours, as the window aicr saw
    # Not a ramp: windows open and close again in every third of the time, each third mostly
    # good (a ramp would hold its bad time at one end).
    third = len(bad) // 3
    for k in range(3):
        part = bad[k * third : (k + 1) * third]
        assert sum(1 for a, b in pairwise(part) if a and not b) >= 5
        assert sum(part) / third < 0.4
    inside = [d.degraded for d in draws if d.bad_window]
    outside = [d.degraded for d in draws if not d.bad_window]
    assert sum(inside) / len(inside) == pytest.approx(1 / 3, abs=0.05)
    assert sum(outside) / len(outside) == pytest.approx(SHARED.degraded_p, abs=0.01)
    assert not any(NoiseSource(DEDICATED, 1).in_bad_window(h * HOUR) for h in range(200))


def test_a_cold_engine_reads_slow_only_when_warm_up_is_short_of_the_concurrency() -> None:
    def pair(warmup: int) -> tuple[float, float]:
        warm = NoiseSource(DEDICATED, seed=9).draw(0.0, warmup=64, concurrency=64)
        cold = NoiseSource(DEDICATED, seed=9).draw(0.0, warmup=warmup, concurrency=64)
        return cold.speed / warm.speed, cold.p99_ttft / warm.p99_ttft

    assert pair(0) == pytest.approx((1 - DEDICATED.cold_throughput, 1 + DEDICATED.cold_p99_ttft))
    assert pair(32) == pytest.approx(
        (1 - DEDICATED.cold_throughput / 2, 1 + DEDICATED.cold_p99_ttft / 2)
    )
    assert pair(64) == (1.0, 1.0) and pair(128) == (1.0, 1.0)
    unknown = NoiseSource(DEDICATED, seed=9).draw(0.0, warmup=0, concurrency=None)
    assert unknown == NoiseSource(DEDICATED, seed=9).draw(0.0)


def test_each_device_keeps_one_offset_and_devices_differ() -> None:
    source = NoiseSource(SHARED, seed=10)
    first = [source.device_offset(d) for d in range(4)]
    for _ in range(50):
        source.draw(0.0, device=2)
    assert [source.device_offset(d) for d in range(4)] == first
    assert len(set(first)) == 4
    offsets = [source.device_offset(d) for d in range(3000)]
    assert _sd_log(offsets) == pytest.approx(SHARED.device_sd, rel=0.08)
    assert NoiseSource(CPU_2CORE, seed=10).device_offset(3) == 1.0


def test_the_same_seed_draws_the_same_runs() -> None:
    def runs(seed: int) -> list[object]:
        source = NoiseSource(SHARED, seed=seed)
        return [source.draw(k * 900.0, device=k % 3, load=0.5) for k in range(200)]

    assert runs(11) == runs(11)
    assert runs(11) != runs(12)


def _baseline() -> EngineConfig:
    space = load_space(L40S.space)
    return EngineConfig(model="m", args=space.to_engine(space.baseline_params())[0])


def test_the_tuning_simulation_measures_through_its_profile(tmp_path: Path) -> None:
    truth = Truth(L40S)
    config = _baseline()
    exact = truth.result(config.args)
    # Every run degraded to half speed, p99 TTFT x4, nothing else random: a closed loop's
    # throughput halves, its p99 TTFT more than quadruples (the slow steps, then the factor).
    still = NoiseProfile(
        name="test",
        throughput_sd=0.0,
        tpot_sd=0.0,
        p50_ttft_sd=0.0,
        p99_ttft_sd=0.0,
        p99_knee_gain=0.0,
        degraded_p=1.0,
        degraded_throughput=(0.5, 0.5),
        degraded_p99_ttft=(4.0, 4.0),
        cold_throughput=0.2,
        cold_p99_ttft=0.4,
        device_sd=0.0,
    )
    seen = SimMeasure(truth, profile=still)(config, tmp_path / "degraded").summary
    assert seen is not None
    assert seen.output_throughput == pytest.approx(0.5 * exact.output_throughput, rel=1e-6)
    assert seen.ttft_ms.p99 > 4 * exact.p99_ttft_ms
    # A cold engine (no warm-up): slower still.
    cold = SimMeasure(truth, profile=still, warmup=0)(config, tmp_path / "cold").summary
    assert cold is not None
    assert cold.output_throughput == pytest.approx(0.4 * exact.output_throughput, rel=1e-6)
    # A real profile: the runs spread as cpu-2core's do, the truth does not move.
    noisy = SimMeasure(truth, profile=CPU_2CORE, seed=3)
    values = []
    for k in range(12):
        summary = noisy(config, tmp_path / f"cpu-{k}").summary
        assert summary is not None
        values.append(summary.output_throughput)
    assert len(set(values)) == 12 and 0.04 < _sd_log(values) < 0.3
    assert truth.result(config.args).output_throughput == exact.output_throughput


def test_the_benchmark_cli_takes_a_noise_profile() -> None:
    old = parse_args(["--landscape", "x"])
    assert (old.noise_profile, old.noise, old.drift) == ("uniform", NOISE, DRIFT)
    shared = parse_args(["--landscape", "x", "--noise-profile", "shared"])
    assert (shared.noise_profile, shared.noise, shared.drift) == ("shared", 0.0, 0.0)
    stressed = parse_args(["--landscape", "x", "--noise-profile", "shared", "--drift", "0.26"])
    assert stressed.drift == 0.26  # the drift stays, as a stress test on top
    with pytest.raises(SystemExit):
        parse_args(["--landscape", "x", "--noise-profile", "shared", "--noise", "0.05"])
    several = parse_args(["--landscape", "x", "--noise-profile", "dedicated,cpu-2core"])
    assert several.profiles == ["dedicated", "cpu-2core"] and several.noise == 0.0
    for wrong in ("dedicated,uniform", "dedicated,cloudy"):
        with pytest.raises(SystemExit):
            parse_args(["--landscape", "x", "--noise-profile", wrong])


def test_a_study_on_a_profile_measures_through_it(tmp_path: Path) -> None:
    # run_method hands the profile to its measure: half-speed runs take twice the device time.
    truth = Truth(L40S)
    slow = dataclasses.replace(
        CPU_2CORE, throughput_sd=0.0, degraded_p=1.0, degraded_throughput=(0.5, 0.5)
    )
    halved = run_method(L40S, METHODS["random"], 0, 1, truth, root=tmp_path, profile=slow)
    baseline = truth.result(_baseline().args)  # the first trial is the baseline
    assert halved[0].device_s - STARTUP_S == pytest.approx(2 * baseline.duration_s)
