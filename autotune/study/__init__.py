"""The Optuna study: objectives, constraints, failure recording, Pareto selection."""

from autotune.study._events import Event, TrialFinished, TrialSkipped, TrialStarted
from autotune.study._measure import Measure, Measurement, Workplan, measure
from autotune.study._objectives import (
    ERROR_RATE,
    FAILED,
    OOM,
    OOM_STATUSES,
    WORST_MAXIMIZE,
    WORST_MINIMIZE,
    constraint_values,
    objective_values,
)
from autotune.study._runner import SPEC_ATTR, StudyError, StudyResult, StudyRunner, make_sampler
from autotune.study._select import (
    PICKS,
    SelectionError,
    baseline,
    knee,
    pareto_front,
    pick,
    study_objectives,
)

__all__ = [
    "ERROR_RATE",
    "FAILED",
    "OOM",
    "OOM_STATUSES",
    "PICKS",
    "SPEC_ATTR",
    "WORST_MAXIMIZE",
    "WORST_MINIMIZE",
    "Event",
    "Measure",
    "Measurement",
    "SelectionError",
    "StudyError",
    "StudyResult",
    "StudyRunner",
    "TrialFinished",
    "TrialSkipped",
    "TrialStarted",
    "Workplan",
    "baseline",
    "constraint_values",
    "knee",
    "make_sampler",
    "measure",
    "objective_values",
    "pareto_front",
    "pick",
    "study_objectives",
]
