"""A sampler that hands every call to another: the base of the study's sampler wrapper
(`_told.ToldSampler`), which overrides only what it changes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState


class WrappedSampler(optuna.samplers.BaseSampler):
    """`base`, as it is."""

    def __init__(self, base: optuna.samplers.BaseSampler) -> None:
        self.base = base

    def infer_relative_search_space(
        self, study: Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return self.base.infer_relative_search_space(study, trial)

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        return self.base.sample_relative(study, trial, search_space)

    def sample_independent(
        self,
        study: Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        return self.base.sample_independent(study, trial, param_name, param_distribution)

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
