"""The Optuna study: objectives, constraints, failure recording, Pareto selection."""

from autotune.study._confirm import CONFIRM_ATTR, Confirmer, confirmed_winner
from autotune.study._events import Event, TrialFinished, TrialSkipped, TrialStarted
from autotune.study._measure import Measure, Measurement, Workplan, measure
from autotune.study._objectives import (
    ERROR_RATE,
    FAILED,
    OOM,
    WORST_MAXIMIZE,
    WORST_MINIMIZE,
    constraint_values,
    objective_values,
)
from autotune.study._profile import (
    ProfileError,
    ProfilePlan,
    profile_config,
)
from autotune.study._prune import Judge, PruneRule, make_judge
from autotune.study._runner import (
    SPEC_ATTR,
    StudyError,
    StudyResult,
    StudyRunner,
    make_sampler,
    trial_engine_config,
)
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
    "CONFIRM_ATTR",
    "ERROR_RATE",
    "FAILED",
    "OOM",
    "PICKS",
    "SPEC_ATTR",
    "WORST_MAXIMIZE",
    "WORST_MINIMIZE",
    "Confirmer",
    "Event",
    "Judge",
    "Measure",
    "Measurement",
    "ProfileError",
    "ProfilePlan",
    "PruneRule",
    "SelectionError",
    "StudyError",
    "StudyResult",
    "StudyRunner",
    "TrialFinished",
    "TrialSkipped",
    "TrialStarted",
    "Workplan",
    "baseline",
    "confirmed_winner",
    "constraint_values",
    "knee",
    "make_judge",
    "make_sampler",
    "measure",
    "objective_values",
    "pareto_front",
    "pick",
    "profile_config",
    "study_objectives",
    "trial_engine_config",
]
