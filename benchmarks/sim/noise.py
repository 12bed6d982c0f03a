"""Noise profiles of the simulated hosts: what a measured run sees beside the truth.

A profile states, per kind of host, how repeated runs of one config spread (per metric, as the
sd of the log, ~ the CV), how often a run is degraded and by how much, how a cold engine (a
warm-up shorter than the concurrency) reads, how far one device sits from another of the same
model, and, for `shared`, bad windows: a regime that comes and goes over hours, in which a run
is degraded far more often. Every figure cites its source here and in docs/benchmarks.md
("Noise profiles of the simulated hosts"). The old uniform +-noise and the smooth drift
(`Host(noise=, drift=)`) stay as a stress test only: no source shows a drift.

`NoiseSource` draws a run's factors from a seeded numpy Generator: the same seed, the same
sequence of calls, the same draws. `Host` is what a simulated trial asks: the speed its run is
simulated at and the draw that multiplies what the client measured (`with_draw`).
"""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass, field

import numpy as np

from .simulate import SimResult, SimWorkload


@dataclass(frozen=True)
class BadWindows:
    """A regime of hours: spells of good and bad host time, each of exponential length."""

    mean_bad_s: float
    mean_good_s: float
    degraded_p: float  # the chance a run inside a window is degraded

    @property
    def bad_share(self) -> float:
        return self.mean_bad_s / (self.mean_bad_s + self.mean_good_s)


@dataclass(frozen=True)
class NoiseProfile:
    """One kind of host's measurement noise (sd of the log of each metric's run-to-run factor)."""

    name: str
    throughput_sd: float  # output throughput, one run against the next
    tpot_sd: float  # TPOT (p50 and p99 alike)
    p50_ttft_sd: float
    p99_ttft_sd: float  # far from the knee
    p99_knee_gain: float  # p99 TTFT's sd grows to p99_ttft_sd * (1 + gain) at full load
    degraded_p: float  # the chance a run is degraded (outside bad windows)
    degraded_throughput: tuple[float, float]  # a degraded run's speed, uniform in [low, high]
    degraded_p99_ttft: tuple[float, float]  # its p99 TTFT factor, log-uniform in [low, high]
    cold_throughput: float  # a cold engine's throughput shortfall (share) at no warm-up
    cold_p99_ttft: float  # and its p99 TTFT excess (share)
    device_sd: float  # sd of the log of one device's fixed speed against its model's mean
    bad_windows: BadWindows | None = None


HOUR = 3600.0
# The old noise model, now a stress test only (compare.py --noise-profile uniform): a level
# within +-NOISE per run, times a drift that slows the host by up to DRIFT over each
# DRIFT_PERIOD_S of device time. No repeated real runs show such a drift (issue 47).
NOISE = 0.05
DRIFT = 0.26
DRIFT_PERIOD_S = 3600.0

# Sources (docs/benchmarks.md, "Noise profiles of the simulated hosts", has the table):
#   aicr: NVIDIA aicr inference-perf fluctuation investigation (GKE 8x H100 137.1k / 140.6k /
#     138.7k tok/s; EKS p5 6 runs; DGX Spark 6 runs 2.4%; a shared node's bad afternoon).
#   ascend: vllm-ascend #4110 (TPOT/ITL over 3 rounds per build on 910B).
#   trtllm: TensorRT-LLM PR #18432 (paired repeats; a cold engine 10-30% low).
#   perf-eval: vLLM perf-eval PR #59 (median of 3, warm-up = concurrency; cold p99 TTFT high).
#   sinha: Sinha et al. SC22 (one GPU against another of its model; a 3,500-GPU cloud study).
#   issue 46: this project's repeated real runs on its 2-core CPU hosts (docs/benchmarks.md).
DEDICATED = NoiseProfile(
    name="dedicated",
    throughput_sd=0.018,  # aicr: CV 1.3-2.4% per run (GKE, EKS, DGX Spark); trtllm +0.5-2.8%
    tpot_sd=0.009,  # ascend: CV 0.6-1.1% on 910B
    p50_ttft_sd=0.018,  # no source gives it: taken as throughput's (a prefill and its queue)
    p99_ttft_sd=0.16,  # aicr: CV 16% (GKE) away from saturation
    p99_knee_gain=1.2,  # aicr: 35% on 3 runs at 2,048 in flight: 0.16 * 2.2 = 0.35
    degraded_p=0.01,  # aicr: "rare" on dedicated nodes (none in the 6-run series)
    degraded_throughput=(0.41, 0.78),  # aicr: 49-93k against about 120k tok/s
    degraded_p99_ttft=(1.5, 10.0),  # aicr: p99 TTFT 0.6-31 s in degraded runs; ratio assumed
    cold_throughput=0.20,  # trtllm, perf-eval: a cold engine 10-30% low
    cold_p99_ttft=0.40,  # trtllm, perf-eval: p99 TTFT 18-67% high until warmed
    device_sd=0.08,  # sinha: about 8% between GPUs of one model on average
)

SHARED = NoiseProfile(
    name="shared",
    throughput_sd=0.054,  # aicr: CV 5.4% on a shared node's good morning
    tpot_sd=0.02,  # aicr / ascend: about 2% on shared nodes
    p50_ttft_sd=0.054,  # no source gives it: taken as throughput's
    p99_ttft_sd=0.20,  # aicr: 15-35%+ (GKE, EKS)
    p99_knee_gain=1.0,  # aicr: 35%+ near saturation: 0.20 * 2 = 0.40
    degraded_p=0.02,  # aicr: rare outside the bad window
    degraded_throughput=(0.41, 0.78),  # aicr: 49-93k against about 120k tok/s
    degraded_p99_ttft=(1.5, 10.0),  # aicr: p99 TTFT 0.6-31 s; ratio to a healthy run assumed
    cold_throughput=0.20,  # trtllm, perf-eval: 10-30% low
    cold_p99_ttft=0.40,  # trtllm, perf-eval: 18-67% high
    device_sd=0.13,  # sinha (cloud study): up to 34-38% apart, about 3 sd of many GPUs
    # aicr: an afternoon's window (hours) in which about 1 run in 3 was degraded, cleared
    # overnight: one window of about 4 h a day, not a ramp.
    bad_windows=BadWindows(mean_bad_s=4 * HOUR, mean_good_s=20 * HOUR, degraded_p=1 / 3),
)

CPU_2CORE = NoiseProfile(
    name="cpu-2core",
    # issue 46 (benchmarks/noise_anatomy.py): one 4-5 s run between fresh engines, sd of the
    # log 0.115 (0.082 between 3 runs on one engine, 0.053 for their median, 0.045 for 45 s).
    throughput_sd=0.115,
    tpot_sd=0.110,  # issue 46: p99 TPOT 0.110 per fresh engine (0.076 / 0.037 / 0.070)
    p50_ttft_sd=0.080,  # not measured: taken as p99 TTFT's
    p99_ttft_sd=0.080,  # issue 46: p99 TTFT 0.080 per fresh engine (0.066 / 0.046 / 0.066)
    p99_knee_gain=1.2,  # not measured on CPU: dedicated's (aicr)
    degraded_p=0.0,  # none told apart in issue 46's runs: part of the spread above
    degraded_throughput=(1.0, 1.0),
    degraded_p99_ttft=(1.0, 1.0),
    cold_throughput=0.20,  # not measured on CPU: trtllm, perf-eval
    cold_p99_ttft=0.40,  # not measured on CPU: trtllm, perf-eval
    device_sd=0.0,  # one CPU per host: every trial runs on the same device
)

PROFILES = {p.name: p for p in (DEDICATED, SHARED, CPU_2CORE)}


@dataclass(frozen=True)
class Draw:
    """One run's factors. `speed` is the host's (the run is simulated at it: a degraded run,
    a cold engine, the device's offset); the others multiply what the client measured."""

    speed: float
    throughput: float
    tpot: float
    p50_ttft: float
    p99_ttft: float
    degraded: bool = False
    bad_window: bool = False


@dataclass
class NoiseSource:
    """A profile's draws, seeded: `draw` once per measured run, in device-time order."""

    profile: NoiseProfile
    seed: int = 0
    # With it, the runs' draws are seeded apart from the study's windows and devices: one
    # server start's run in a study (benchmarks/sim/server.py), the rest shared by the study.
    run_seed: int | None = None
    _rng: np.random.Generator = field(init=False)
    _windows: list[tuple[float, bool]] = field(init=False)  # (spell end, spell is bad)
    _windows_rng: np.random.Generator = field(init=False)  # apart: runs don't move windows

    def __post_init__(self) -> None:
        runs = self.seed if self.run_seed is None else [self.seed, 3, self.run_seed]
        self._rng = np.random.default_rng(runs)
        self._windows = []
        self._windows_rng = np.random.default_rng([self.seed, 2])
        w = self.profile.bad_windows
        if w is not None:  # the study starts at a random point of the regime
            bad = bool(self._windows_rng.random() < w.bad_share)
            mean = w.mean_bad_s if bad else w.mean_good_s
            self._windows.append((float(self._windows_rng.exponential(mean)), bad))

    def device_offset(self, device: int) -> float:
        """The fixed speed of `device` against its model's mean: the same for every call."""
        if self.profile.device_sd == 0:
            return 1.0
        rng = np.random.default_rng([self.seed, 1, device])
        return math.exp(rng.normal(0.0, self.profile.device_sd))

    def in_bad_window(self, at_s: float) -> bool:
        """Whether device time `at_s` falls in a bad window (never without them)."""
        w = self.profile.bad_windows
        if w is None:
            return False
        while self._windows[-1][0] <= at_s:
            end, bad = self._windows[-1]
            mean = w.mean_good_s if bad else w.mean_bad_s
            self._windows.append((end + float(self._windows_rng.exponential(mean)), not bad))
        return next(bad for end, bad in self._windows if end > at_s)

    def draw(
        self,
        at_s: float = 0.0,
        *,
        device: int = 0,
        warmup: int | None = None,
        concurrency: int | None = None,
        load: float = 0.0,
    ) -> Draw:
        """A run whose benchmark is at device time `at_s` on `device`, after `warmup`
        requests, at `concurrency` in flight, `load` (0-1) of the way to the saturation knee."""
        p, rng = self.profile, self._rng
        window = self.in_bad_window(at_s)
        chance = p.bad_windows.degraded_p if window and p.bad_windows else p.degraded_p
        degraded = bool(rng.random() < chance)
        speed = self.device_offset(device)
        p99 = 1.0
        if degraded:
            speed *= rng.uniform(*p.degraded_throughput)
            low, high = p.degraded_p99_ttft
            p99 *= math.exp(rng.uniform(math.log(low), math.log(high)))
        short = cold_shortfall(warmup, concurrency)
        speed *= 1.0 - p.cold_throughput * short
        p99 *= 1.0 + p.cold_p99_ttft * short
        knee = min(max(load, 0.0), 1.0)
        return Draw(
            speed=speed,
            throughput=math.exp(rng.normal(0.0, p.throughput_sd)),
            tpot=math.exp(rng.normal(0.0, p.tpot_sd)),
            p50_ttft=math.exp(rng.normal(0.0, p.p50_ttft_sd)),
            p99_ttft=p99 * math.exp(rng.normal(0.0, p.p99_ttft_sd * (1 + p.p99_knee_gain * knee))),
            degraded=degraded,
            bad_window=window,
        )


def cold_shortfall(warmup: int | None, concurrency: int | None) -> float:
    """The share of the concurrency a warm-up left cold (perf-eval warms with as many requests
    as the concurrency): 0 when warm-up >= concurrency or either is unknown."""
    if warmup is None or concurrency is None or concurrency <= 0 or warmup >= concurrency:
        return 0.0
    return 1.0 - max(warmup, 0) / concurrency


def drift_factor(at_s: float, drift: float, period_s: float = DRIFT_PERIOD_S) -> float:
    """The drift's share of the host's speed at device time `at_s`: 1 at the start of each
    period, 1 - `drift` in its middle."""
    return 1.0 - drift * 0.5 * (1 - math.cos(2 * math.pi * at_s / period_s))


@dataclass
class Host:
    """A simulated host over one study: a profile's draws, or without one the stress test's
    level within +-`noise` per run; either times the drift of up to `drift` (seeded)."""

    noise: float = 0.0
    drift: float = 0.0
    drift_period_s: float = DRIFT_PERIOD_S
    profile: NoiseProfile | None = None  # with it, `noise` is unused
    seed: int = 0
    _rng: random.Random = field(init=False)
    _source: NoiseSource | None = field(init=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._source = None if self.profile is None else NoiseSource(self.profile, self.seed)

    def run(
        self,
        at_s: float,
        *,
        device: int = 0,
        warmup: int | None = None,
        concurrency: int | None = None,
        load: float = 0.0,
    ) -> tuple[float, Draw | None]:
        """The host's speed for a run whose benchmark is in the middle at `at_s`, and the
        profile's draw for it (None without a profile); the arguments as `NoiseSource.draw`."""
        drift = drift_factor(at_s, self.drift, self.drift_period_s)
        if self._source is None:
            return (1.0 + self._rng.uniform(-self.noise, self.noise)) * drift, None
        draw = self._source.draw(
            at_s, device=device, warmup=warmup, concurrency=concurrency, load=load
        )
        return draw.speed * drift, draw


def load_share(workload: SimWorkload, truth: SimResult, max_num_seqs: int) -> float:
    """Requests in flight over the engine's batch slots: the closed loop's concurrency, or an
    open loop's by Little's law on the noise-free run `truth`."""
    in_flight = workload.concurrency
    if in_flight is None:
        out = sum(o for _, o in workload.lengths) / max(len(workload.lengths), 1)
        latency_s = (truth.p50_ttft_ms + truth.p50_tpot_ms * out) / 1000
        in_flight = math.ceil((workload.rate or 0.0) * latency_s)
    return in_flight / max(max_num_seqs, 1)


def with_draw(result: SimResult, draw: Draw) -> SimResult:
    """`result` as the client measured it through a draw's per-metric factors (its host speed
    is already in it): the per-request TTFTs and TPOTs (goodput judges them) by the p50's."""
    return dataclasses.replace(
        result,
        output_throughput=result.output_throughput * draw.throughput,
        request_throughput=result.request_throughput * draw.throughput,
        p50_ttft_ms=result.p50_ttft_ms * draw.p50_ttft,
        p99_ttft_ms=result.p99_ttft_ms * draw.p99_ttft,
        p50_tpot_ms=result.p50_tpot_ms * draw.tpot,
        p99_tpot_ms=result.p99_tpot_ms * draw.tpot,
        ttft_ms=tuple(v * draw.p50_ttft for v in result.ttft_ms),
        tpot_ms=tuple(None if v is None else v * draw.tpot for v in result.tpot_ms),
    )
