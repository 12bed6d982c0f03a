"""What the sampler is told: every measured trial's objective values as at the study's start.

A sampler learns from the values stored with each trial; on a host whose speed drifts those
are the host's as much as the config's. `DriftAwareSampler` wraps the study's sampler and shows
it a view of the study in which every measured trial's objective values are scaled to the
host's speed at the study's start (the drift its re-measured configs show,
`autotune.drift.fit_drift`); without a drift estimate, the stored values.
"""

from __future__ import annotations

import copy
from collections.abc import Container, Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from autotune import store as keys
from autotune.drift import Drift, fit_drift, scaled
from autotune.store import TrialRecord


class DriftAwareSampler(optuna.samplers.BaseSampler):
    """`base`, told every measured trial's objective values as at the study's start (the
    drift its re-measured configs show); without a drift estimate, the stored values."""

    def __init__(self, base: optuna.samplers.BaseSampler, objectives: Sequence[str]) -> None:
        self.base = base
        self.objectives = list(objectives)

    def infer_relative_search_space(
        self, study: Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return self.base.infer_relative_search_space(study, trial)

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        return self.base.sample_relative(_view(study, self.objectives), trial, search_space)

    def sample_independent(
        self,
        study: Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        view = _view(study, self.objectives)
        return self.base.sample_independent(view, trial, param_name, param_distribution)

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        self.base.before_trial(study, trial)

    def after_trial(
        self,
        study: Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        self.base.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.base.reseed_rng()


def _view(study: Study, objectives: Sequence[str]) -> Study:
    trials = study.get_trials(deepcopy=False)
    drift = fit_drift([TrialRecord.from_frozen(t) for t in trials])
    if drift is None:
        return study
    return _StudyView(study, [_corrected(t, drift, objectives) for t in trials])  # type: ignore[return-value]


def _corrected(trial: FrozenTrial, drift: Drift, objectives: Sequence[str]) -> FrozenTrial:
    at = trial.user_attrs.get(keys.MEASURED_AT)
    if trial.values is None or at is None or trial.user_attrs.get(keys.METRICS) is None:
        return trial
    speed = drift.speed(float(at))
    out = copy.copy(trial)
    out._values = [scaled(m, v, speed) for m, v in zip(objectives, trial.values, strict=False)]
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
