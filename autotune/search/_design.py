"""The first proposals of a model-based sampler: a Latin hypercube, not independent draws.

Optuna's GP sampler proposes its first `n_startup_trials` (after the baseline) with its
independent sampler, at random by default. With three such trials, independent draws leave
whole regions unseen: a categorical of three choices (tensor parallelism 1, 2, 4) misses one
of them in (2/3)**3 = 30% of seeds, and two draws of a log-scaled knob often land in the same
third of its range. The GP's model then knows nothing of what was not seen, and the seed
spends trials finding it. `LatinStart` spreads them instead: over its `size` design points,
every numeric parameter has one point in each of `size` equal strata of its (log) range, in
an order drawn per parameter, and a categorical takes each of its choices once, in an order
drawn for it, before any repeats. Past the design (a conditional parameter, a study beyond
its opening) it samples at random. What it gains over random draws is measured in
docs/benchmarks.md (`benchmarks/search_efficiency.py`).

Stateless: a trial's place in the design is the number of earlier trials that the sampler
proposed (not enqueued: the baseline, warm starts, re-measures), and the design is drawn
from the study's seed, so a resumed study, several lanes and several workers go on with one
design where the study is.
"""

from __future__ import annotations

import math
import random
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.study import Study
from optuna.trial import FrozenTrial

FIXED = "fixed_params"  # Optuna's system attribute of an enqueued trial


class LatinStart(optuna.samplers.BaseSampler):
    """A Latin hypercube of `size` points over the study's parameters, then random draws.
    `seed` draws the design: the same for every worker and run of a study (a trial's place in
    it is the study's), so that they share one design; `random_seed` the draws past it."""

    def __init__(self, size: int, seed: int | None = None, random_seed: int | None = None) -> None:
        self.size = size
        self.seed = seed
        self._random = optuna.samplers.RandomSampler(
            seed=seed if random_seed is None else random_seed
        )

    def infer_relative_search_space(
        self, study: Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return {}

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        return {}

    def sample_independent(
        self,
        study: Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        index = design_index(study, trial)
        if index >= self.size:
            return self._random.sample_independent(study, trial, param_name, param_distribution)
        if isinstance(param_distribution, CategoricalDistribution):
            choices = param_distribution.choices
            return choices[self._order(param_name, len(choices))[index % len(choices)]]
        return from_unit(self.unit(param_name, index), param_distribution)

    def unit(self, name: str, index: int) -> float:
        """Design point `index`'s share of parameter `name`'s range: in the stratum the
        parameter's order gives it, at a random place within."""
        within = random.Random(f"{self.seed}:{name}:{index}").random()
        return (self._order(name, self.size)[index] + within) / self.size

    def _order(self, name: str, n: int) -> list[int]:
        """0..n-1 in the order parameter `name` takes them (its strata, or its choices)."""
        order = list(range(n))
        random.Random(f"{self.seed}:{name}").shuffle(order)
        return order

    def reseed_rng(self) -> None:
        self._random.reseed_rng()


def design_index(study: Study, trial: FrozenTrial) -> int:
    """How many trials before `trial` the sampler proposed (enqueued ones are not counted)."""
    earlier = study.get_trials(deepcopy=False)
    return sum(1 for t in earlier if t.number < trial.number and FIXED not in t.system_attrs)


def from_unit(u: float, dist: BaseDistribution) -> Any:
    """The value at share `u` of the range, on the distribution's step."""
    assert isinstance(dist, IntDistribution | FloatDistribution)
    low, high = float(dist.low), float(dist.high)
    if dist.log:
        x = math.exp(math.log(low) + u * (math.log(high) - math.log(low)))
    else:
        x = low + u * (high - low)
    step = dist.step
    if step:
        x = low + round((x - low) / step) * step
    x = min(high, max(low, x))
    if isinstance(dist, IntDistribution):
        return round(x)
    return float(round(x, 10))
