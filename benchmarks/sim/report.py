"""How much structure a landscape has: its ground-truth optimum and how rare near-best is.

    python benchmarks/sim/report.py [NAME ...] [--samples 150] [--seed 0]

`landscape_report(name)` samples the landscape's search space uniformly (log-uniformly where
the space says `log`), simulates every sample, refines the best with a coordinate search, and
returns the optimum, the baseline's share of it and the share of samples within 95% / 98% of it.

It also says how slow a host may get before no config near the optimum meets the SLOs any
more (`speed_95` / `speed_98`), and so for how long, under the search benchmark's drift, a
tuner that trusts what it measures can see one as feasible (`drift_window_s`): a config
measured on a host that drifted slower than that misses an SLO as measured, however near the
optimum it is, and only a correction of the measurement would deploy it.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if not __package__:  # run as a script: import this folder as the package `sim`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "sim"
    import sim  # noqa: F401

from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from autotune.space import SearchSpace, load_space

from .landscapes import LANDSCAPES, Landscape
from .model import SimConfig
from .noise import DRIFT, DRIFT_PERIOD_S, NOISE
from .simulate import SimResult, simulate


@dataclass(frozen=True)
class Report:
    name: str
    best_params: dict[str, Any]
    best: SimResult
    best_score: float
    baseline_params: dict[str, Any]
    baseline: SimResult
    baseline_score: float
    samples: int
    failed: int  # samples that do not start (OOM, KV capacity, invalid)
    within_95: int
    within_98: int
    speed_95: float | None = None  # slowest host speed at which a 95% config meets the SLOs
    speed_98: float | None = None

    def text(self, metric: str) -> str:
        share = self.baseline_score / self.best_score if self.best_score else 0.0
        b = self.best
        return "\n".join(
            [
                f"landscape {self.name} ({metric})",
                f"  optimum  {self.best_params}: {self.best_score:.2f}  (p99 TTFT "
                f"{b.p99_ttft_ms:.0f} ms, p99 TPOT {b.p99_tpot_ms:.1f} ms, "
                f"{b.output_throughput:.0f} output tok/s, {b.preemptions} preemptions)",
                f"  baseline {self.baseline_params}: {self.baseline_score:.2f} "
                f"= {share:.1%} of the optimum",
                f"  {self.samples} random configs: {self.failed} fail to start; "
                f"{self.within_95} ({self.within_95 / self.samples:.1%}) within 95%, "
                f"{self.within_98} ({self.within_98 / self.samples:.1%}) within 98%",
                *self._slowed(),
            ]
        )

    def _slowed(self) -> list[str]:
        out = []
        for share, speed in ((95, self.speed_95), (98, self.speed_98)):
            if speed is None:
                continue
            window = drift_window_s(speed)
            seen = (
                "at every time"
                if window is None
                else f"in the first {window:.0f} s of device time and the last {window:.0f} s "
                f"of each {DRIFT_PERIOD_S:.0f} s"
            )
            out.append(
                f"  a config within {share}% meets the SLOs down to a host at {speed:.2f} of "
                f"its speed: under drift {DRIFT:.0%} (+-{NOISE:.0%}), {seen}"
            )
        return out


def config_of(landscape: Landscape, space: SearchSpace, params: dict[str, Any]) -> SimConfig:
    options, _env = space.to_engine(params)
    return SimConfig.from_options(options, landscape.defaults)


def evaluate(landscape: Landscape, space: SearchSpace, params: dict[str, Any]) -> SimResult:
    return simulate(landscape.hardware, config_of(landscape, space, params), landscape.workload)


def sample(dist: BaseDistribution, rng: random.Random) -> Any:
    if isinstance(dist, CategoricalDistribution):
        return rng.choice(dist.choices)
    assert isinstance(dist, IntDistribution | FloatDistribution)
    low, high = float(dist.low), float(dist.high)
    if dist.log:
        value = math.exp(rng.uniform(math.log(low), math.log(high)))
    else:
        value = rng.uniform(low, high)
    step = dist.step
    if step:
        value = low + round((value - low) / step) * step
    value = min(high, max(low, value))
    return round(value) if isinstance(dist, IntDistribution) else round(value, 6)


def neighbours(dist: BaseDistribution, value: Any) -> list[Any]:
    """Values next to `value` for the coordinate search (5% / one step / other choices)."""
    if isinstance(dist, CategoricalDistribution):
        return [c for c in dist.choices if c != value]
    assert isinstance(dist, IntDistribution | FloatDistribution)
    step = dist.step or 0
    out = []
    for factor in (0.9, 0.95, 1.05, 1.1):
        v = value * factor if dist.log or not step else value + (factor - 1) * 20 * step
        if step:
            v = dist.low + round((v - dist.low) / step) * step
        v = min(dist.high, max(dist.low, v))
        out.append(round(v) if isinstance(dist, IntDistribution) else round(v, 6))
    return [v for v in dict.fromkeys(out) if v != value]


SPEED_STEPS = 7  # bisection steps: the slowest speed to within 0.5 / 2**7


def required_speed(landscape: Landscape, space: SearchSpace, params: dict[str, Any]) -> float:
    """The slowest host speed (0.5 to 1) at which `params` still meets every SLO: 1.0 where it
    meets them only at full speed (or misses them even there), 0.5 where it still meets them
    at half (or has none)."""
    cfg = config_of(landscape, space, params)

    def meets(speed: float) -> bool:
        result = simulate(landscape.hardware, cfg, landscape.workload, speed=speed)
        return result.ok and result.meets(landscape.slos)

    if not landscape.slos or meets(0.5):
        return 0.5
    low, high = 0.5, 1.0  # fails at low, meets at high
    for _ in range(SPEED_STEPS):
        mid = (low + high) / 2
        low, high = (low, mid) if meets(mid) else (mid, high)
    return high


def drift_window_s(speed: float) -> float | None:
    """Device seconds from the start of each drift period during which the host may run at
    `speed` or faster (at the good end of the noise); None: at every time."""
    floor = speed / (1 + NOISE)  # the drift's factor that a lucky run needs
    if floor <= 1 - DRIFT:
        return None
    # noise.drift_factor(t) = 1 - DRIFT / 2 * (1 - cos(2 pi t / period)) >= floor
    cos = 1 - 2 * (1 - floor) / DRIFT
    return math.acos(cos) / (2 * math.pi) * DRIFT_PERIOD_S


def landscape_report(name: str, samples: int = 150, seed: int = 0) -> Report:
    landscape = LANDSCAPES[name]
    space = load_space(landscape.space)
    dists = space.distributions()
    rng = random.Random(seed)
    baseline_params = space.baseline_params()
    baseline = evaluate(landscape, space, baseline_params)
    scored: list[tuple[float, dict[str, Any]]] = []
    failed = 0
    for _ in range(samples):
        params = {k: sample(d, rng) for k, d in dists.items()}
        result = evaluate(landscape, space, params)
        failed += not result.ok
        scored.append((landscape.score(result), params))
    best_score, best_params = max(
        [*scored, (landscape.score(baseline), baseline_params)], key=lambda s: s[0]
    )
    tried: list[tuple[float, dict[str, Any]]] = []
    best_score, best_params = _refine(landscape, space, dists, best_params, best_score, tried)
    # Each config near the optimum once (the coordinate search tries some more than once).
    near = {repr(sorted(p.items())): (s, p) for s, p in [*scored, *tried] if s >= 0.95 * best_score}
    speeds = [(s, required_speed(landscape, space, p)) for s, p in near.values()]
    return Report(
        name=name,
        best_params=best_params,
        best=evaluate(landscape, space, best_params),
        best_score=best_score,
        baseline_params=baseline_params,
        baseline=baseline,
        baseline_score=landscape.score(baseline),
        samples=samples,
        failed=failed,
        within_95=sum(s >= 0.95 * best_score for s, _ in scored),
        within_98=sum(s >= 0.98 * best_score for s, _ in scored),
        speed_95=min((v for s, v in speeds), default=None),
        speed_98=min((v for s, v in speeds if s >= 0.98 * best_score), default=None),
    )


def _refine(
    landscape: Landscape,
    space: SearchSpace,
    dists: dict[str, BaseDistribution],
    params: dict[str, Any],
    score: float,
    tried: list[tuple[float, dict[str, Any]]],
    rounds: int = 4,
) -> tuple[float, dict[str, Any]]:
    """Coordinate search from the best sample: try each neighbour, keep improvements (every
    neighbour tried and its score go to `tried`)."""
    for _ in range(rounds):
        improved = False
        for key, dist in dists.items():
            for value in neighbours(dist, params[key]):
                trial = {**params, key: value}
                s = landscape.score(evaluate(landscape, space, trial))
                tried.append((s, trial))
                if s > score:
                    score, params, improved = s, trial, True
        if not improved:
            break
    return score, params


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", default=sorted(LANDSCAPES))
    parser.add_argument("--samples", type=int, default=150)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for name in args.names:
        report = landscape_report(name, args.samples, args.seed)
        print(report.text(LANDSCAPES[name].metric))


if __name__ == "__main__":
    main()
