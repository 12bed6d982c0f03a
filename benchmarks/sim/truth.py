"""The truth of a simulated landscape: each config's noise-free result, its score, the optimum.

The scheduler is deterministic, so a config's result is computed once; a config scores the
landscape's metric where it starts and every SLO holds on its summary (p99s), else 0.
`optimum` is the reference every search is scored against.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution

from autotune.space import load_space

from .landscapes import Landscape
from .model import SimConfig
from .simulate import SimResult, simulate


def sim_config(landscape: Landscape, options: dict[str, Any]) -> SimConfig:
    return SimConfig.from_options(options, landscape.defaults)


@dataclass
class Truth:
    """Noise-free results by config, computed once (the scheduler is deterministic)."""

    landscape: Landscape
    cache: dict[tuple[tuple[str, Any], ...], SimResult] = field(default_factory=dict)

    def result(self, options: dict[str, Any]) -> SimResult:
        cfg = sim_config(self.landscape, options)
        key = tuple(sorted(vars(cfg).items()))
        if key not in self.cache:
            self.cache[key] = simulate(self.landscape.hardware, cfg, self.landscape.workload)
        return self.cache[key]

    def misses(self, options: dict[str, Any]) -> bool:
        """Whether the config starts and misses an SLO on the summary (p99s): deployed, it
        would break a promise, where one that fails to start breaks nothing silently."""
        result = self.result(options)
        return result.ok and not result.meets(self.landscape.slos)

    def past(self, options: dict[str, Any]) -> float:
        """How far past its bound the config's worst-missed SLO is, as a share of the bound
        (0.05: 5% over); 0 where it misses none or does not start."""
        result = self.result(options)
        if not result.ok:
            return 0.0
        over = [getattr(result, k, math.inf) / v - 1 for k, v in self.landscape.slos.items()]
        return max([0.0, *over])

    def score(self, options: dict[str, Any]) -> float:
        """The landscape's metric where every SLO holds on the summary (p99s), else 0."""
        result = self.result(options)
        if not result.ok or not result.meets(self.landscape.slos):
            return 0.0
        return self.landscape.score(result)


def optimum(
    landscape: Landscape, truth: Truth, samples: int = 120, seed: int = 0
) -> tuple[dict[str, Any], float]:
    """The best feasible config by the truth: random samples, then a coordinate search over
    every parameter's neighbouring values until no move improves it."""
    space = load_space(landscape.space)
    dists = space.distributions()
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed))
    best, best_score = space.baseline_params(), -1.0
    candidates = [space.baseline_params()]
    for _ in range(samples):
        candidates.append(study.ask(dists).params)
    for params in candidates:
        score = truth.score(space.to_engine(params)[0])
        if score > best_score:
            best, best_score = params, score
    improved = True
    while improved:
        improved = False
        for name, dist in dists.items():
            for value in _neighbours(dist, best[name]):
                params = {**best, name: value}
                score = truth.score(space.to_engine(params)[0])
                if score > best_score * (1 + 1e-6):
                    best, best_score, improved = params, score, True
    return best, best_score


def _neighbours(dist: Any, value: Any) -> list[Any]:
    if isinstance(dist, CategoricalDistribution):
        return [c for c in dist.choices if c != value]
    step = dist.step or (1 if not isinstance(dist, FloatDistribution) else 0.01)
    out = []
    for k in (1, 2, 4, 8, 16, 32, 64, 128):
        for sign in (1, -1):
            v = value + sign * k * step
            if dist.log and not isinstance(dist, FloatDistribution):
                v = round(value * (1 + sign * 0.02 * k))
            if dist.low <= v <= dist.high and v != value:
                out.append(round(v, 6) if isinstance(dist, FloatDistribution) else int(v))
    return out
