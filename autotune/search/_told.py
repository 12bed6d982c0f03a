"""What the sampler is told: each SLO's constraint on a log scale.

A sampler learns from the values stored with each trial. An SLO's stored constraint is
`measured / bound - 1` (`_objectives`). A queue that builds up makes a p99 TTFT hundreds of
times its bound, while the feasible configs sit within a few tens of percent of it; a Gaussian
process fitted to those raw values (Optuna's `GPSampler` standardizes them) sees every feasible
config as the same point. The sampler is told `log(measured / bound)` instead: the same sign
(<= 0 is feasible), so feasibility is unchanged, and near the bound the same slope. The
objective values are told as measured (autotune.answer.repeats says why nothing is corrected).

`ToldSampler` wraps the study's sampler and shows it that view of the study; the stored trials
are never changed (selection and `show` read them as they are).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Container, Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.study import Study
from optuna.study._constrained_optimization import _CONSTRAINTS_KEY
from optuna.trial import FrozenTrial, TrialState

from autotune.search._wrapped import WrappedSampler

MIN_RATIO = 1e-3  # a measured latency of 0 (no request measured it) is told as 1/1000 of its bound


class ToldSampler(WrappedSampler):
    """`base`, told the study as `view` shows it: the SLO constraints (of `slos`) on a log
    scale."""

    def __init__(self, base: optuna.samplers.BaseSampler, slos: Sequence[str] = ()) -> None:
        super().__init__(base)
        self.slos = list(slos)

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        return self.base.sample_relative(view(study, self.slos), trial, search_space)

    def sample_independent(
        self,
        study: Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        told = view(study, self.slos)
        return self.base.sample_independent(told, trial, param_name, param_distribution)


def view(study: Study, slos: Sequence[str]) -> Study:
    """The study as the sampler is told it (see the module's text)."""
    if not slos:
        return study
    told = [_told(t, slos) for t in study.get_trials(deepcopy=False)]
    return _StudyView(study, told)  # type: ignore[return-value]


def log_ratio(constraint: float) -> float:
    """An SLO's constraint (`measured / bound - 1`) as the sampler is told it:
    `log(measured / bound)`."""
    return math.log(max(1.0 + constraint, MIN_RATIO))


def _told(trial: FrozenTrial, slos: Sequence[str]) -> FrozenTrial:
    if trial.values is None:
        return trial
    out = copy.copy(trial)
    prefix = f"{_CONSTRAINTS_KEY}:"
    attrs = dict(trial.system_attrs)
    for name in slos:
        key = prefix + name
        if key in attrs:  # a failed trial's 1.0 is told as log 2: violated
            attrs[key] = log_ratio(attrs[key])
    out._system_attrs = attrs
    return out


class _StudyView:
    """A study whose trials read back corrected; everything else is the study's own."""

    def __init__(self, study: Study, trials: list[FrozenTrial]) -> None:
        self._study = study
        self._trials = trials

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def _get_trials(
        self,
        deepcopy: bool = True,
        states: Container[TrialState] | None = None,
        use_cache: bool = False,
    ) -> list[FrozenTrial]:
        trials = [t for t in self._trials if states is None or t.state in states]
        return copy.deepcopy(trials) if deepcopy else trials

    def get_trials(
        self, deepcopy: bool = True, states: Container[TrialState] | None = None
    ) -> list[FrozenTrial]:
        return self._get_trials(deepcopy, states)

    @property
    def trials(self) -> list[FrozenTrial]:
        return self._get_trials()
