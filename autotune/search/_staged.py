"""A study in two stages: the layout first, then the rest within the winning layout.

A mixture-of-experts study runs its layout stage as queued trials (the baseline and
`space.layout_plan`'s layouts, every other parameter at its baseline; user attribute `stage:
layout`). Every trial the sampler proposes after them belongs to the scheduler stage: the
sampler proposes the other parameters as usual, and the layout parameters are fixed to the
winner of the layout stage, as Optuna's `PartialFixedSampler` fixes parameters. The winner is
the best feasible layout trial by the first objective (merged over its runs, as the
re-measure reads it), read again at each proposal: a layout trial still running on another lane
joins once it is recorded. While none is feasible, the baseline's layout stays.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from autotune import store as keys
from autotune.answer.repeats import compared
from autotune.search._wrapped import WrappedSampler
from autotune.store import TrialRecord


def layout_winner(
    records: Sequence[TrialRecord], layout: Sequence[str], objective: tuple[str, str]
) -> dict[str, Any]:
    """The layout parameters of the best feasible layout-stage trial by `objective` (the
    baseline's where none is feasible; {} where the baseline is not recorded yet)."""
    staged = [t for t in records if t.stage == keys.STAGE_LAYOUT]
    metric, direction = objective
    sign = 1.0 if direction == "maximize" else -1.0
    feasible = [t for t in compared(staged) if t.feasible]
    if feasible:
        best = max(feasible, key=lambda t: (sign * t.metric(metric), -t.number))
    else:
        found = next((t for t in staged if t.role == keys.ROLE_BASELINE), None)
        if found is None:
            return {}
        best = found
    return {name: best.params[name] for name in layout if name in best.params}


class StagedSampler(WrappedSampler):
    """`base` for the scheduler stage: the `layout` parameters fixed to `layout_winner`."""

    def __init__(
        self,
        base: optuna.samplers.BaseSampler,
        layout: Sequence[str],
        objective: tuple[str, str],
    ) -> None:
        super().__init__(base)
        self.layout = list(layout)
        self.objective = objective
        self._chosen: tuple[int, dict[str, Any]] | None = None  # (trial id, its layout)

    def fixed(self, study: Study, trial: FrozenTrial) -> dict[str, Any]:
        """The layout the scheduler stage searches within, as the study stood when `trial`
        asked for its first layout parameter (one layout per trial, whatever finishes
        between two of its parameters)."""
        if self._chosen is None or self._chosen[0] != trial._trial_id:
            trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            records = [TrialRecord.from_frozen(t) for t in trials]
            self._chosen = (trial._trial_id, layout_winner(records, self.layout, self.objective))
        return self._chosen[1]

    def infer_relative_search_space(
        self, study: Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        space = self.base.infer_relative_search_space(study, trial)
        return {k: v for k, v in space.items() if k not in self.layout}

    def sample_independent(
        self,
        study: Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        if param_name in self.layout:
            fixed = self.fixed(study, trial)
            if param_name in fixed:
                return fixed[param_name]
        return self.base.sample_independent(study, trial, param_name, param_distribution)
