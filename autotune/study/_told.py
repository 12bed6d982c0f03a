"""What the sampler is told: every measured trial's values as at the study's start, and each
SLO's constraint on a log scale.

A sampler learns from the values stored with each trial. Two things in them mislead it:

- **the host's drift**: on a host whose speed drifts, the values are the host's as much as the
  config's. Every measured trial's objective values and SLO constraints are scaled to the
  host's speed at the study's start where the study's re-measured configs confirm a drift
  (`autotune.drift.study_drift`); else they are the measured ones;
- **the scale of a violation**: an SLO's stored constraint is `measured / bound - 1`
  (`_objectives`). A queue that builds up makes a p99 TTFT hundreds of times its bound, while
  the feasible configs sit within a few tens of percent of it; a Gaussian process fitted to
  those raw values (Optuna's `GPSampler` standardizes them) sees every feasible config as the
  same point. The sampler is told `log(measured / bound)` instead: the same sign (<= 0 is
  feasible), so feasibility is unchanged, and near the bound the same slope.

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

from autotune.drift import Drift, run_time, scaled, study_drift
from autotune.store import TrialRecord
from autotune.study._wrapped import WrappedSampler

MIN_RATIO = 1e-3  # a measured latency of 0 (no request measured it) is told as 1/1000 of its bound


class ToldSampler(WrappedSampler):
    """`base`, told the study as `view` shows it: objective values (of `objectives`) and SLO
    constraints (of `slos`) as at the study's start, the SLOs' on a log scale."""

    def __init__(
        self,
        base: optuna.samplers.BaseSampler,
        objectives: Sequence[str],
        slos: Sequence[str] = (),
    ) -> None:
        super().__init__(base)
        self.objectives = list(objectives)
        self.slos = list(slos)

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        return self.base.sample_relative(
            view(study, self.objectives, self.slos), trial, search_space
        )

    def sample_independent(
        self,
        study: Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        told = view(study, self.objectives, self.slos)
        return self.base.sample_independent(told, trial, param_name, param_distribution)


def view(study: Study, objectives: Sequence[str], slos: Sequence[str]) -> Study:
    """The study as the sampler is told it (see the module's text)."""
    trials = study.get_trials(deepcopy=False)
    records = [TrialRecord.from_frozen(t) for t in trials]
    drift = study_drift(records)
    speeds = [_speed(r, drift) for r in records]
    if not slos and all(speed == 1.0 for speed in speeds):
        return study
    told = [_told(t, speed, objectives, slos) for t, speed in zip(trials, speeds, strict=True)]
    return _StudyView(study, told)  # type: ignore[return-value]


def _speed(record: TrialRecord, drift: Drift | None) -> float:
    """The host's speed at `record`'s run, as the confirmed drift says (1: none)."""
    at = run_time(record.measured_at, record.metrics)
    if drift is None or at is None or not record.measured:
        return 1.0
    return drift.speed(at)


def log_ratio(constraint: float, speed: float = 1.0) -> float:
    """An SLO's constraint (`measured / bound - 1`, measured at `speed`) as the sampler is
    told it: `log(measured / bound)` as at speed 1."""
    return math.log(max((1.0 + constraint) * speed, MIN_RATIO))


def _told(
    trial: FrozenTrial, speed: float, objectives: Sequence[str], slos: Sequence[str]
) -> FrozenTrial:
    if trial.values is None:
        return trial
    out = copy.copy(trial)
    if speed != 1.0:
        out._values = [scaled(m, v, speed) for m, v in zip(objectives, trial.values, strict=False)]
    prefix = f"{_CONSTRAINTS_KEY}:"
    attrs = dict(trial.system_attrs)
    for name in slos:
        key = prefix + name
        if key in attrs:  # a failed trial's 1.0 is told as log 2: violated, whatever its speed
            attrs[key] = log_ratio(attrs[key], speed)
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
