"""The Optuna study: opening it, the pre-launch gate, one trial's life, recording, the loop and
its lanes, per-trial measure, early stopping, the confirm step and profiling runs.

Which trials are best (the Pareto front, picks, the confirmed winner) is `autotune.selection`:
pure functions over stored trials, for readers that need none of this machinery.
"""

from autotune.study._confirm import Confirmer
from autotune.study._errors import StudyError, StudyMismatch
from autotune.study._events import Event, TrialFinished, TrialSkipped, TrialStarted
from autotune.study._gate import Gate, Proposal, SkipRule, Verdict
from autotune.study._harness import (
    Harness,
    build_harness,
    on_this_host,
    read_host_facts,
    trial_engine_config,
)
from autotune.study._learned import LearnedRule, Tried, learned_rules
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
from autotune.study._opening import SPEC_ATTR, check_warm_start
from autotune.study._profile import (
    ProfileError,
    ProfilePlan,
    profile_config,
)
from autotune.study._prune import Judge, PruneRule, make_judge
from autotune.study._runner import StudyResult, StudyRunner
from autotune.study._search import make_sampler, sampler_name, told_objectives

__all__ = [
    "ERROR_RATE",
    "FAILED",
    "OOM",
    "SPEC_ATTR",
    "WORST_MAXIMIZE",
    "WORST_MINIMIZE",
    "Confirmer",
    "Event",
    "Gate",
    "Harness",
    "Judge",
    "LearnedRule",
    "Measure",
    "Measurement",
    "ProfileError",
    "ProfilePlan",
    "Proposal",
    "PruneRule",
    "SkipRule",
    "StudyError",
    "StudyMismatch",
    "StudyResult",
    "StudyRunner",
    "TrialFinished",
    "TrialSkipped",
    "TrialStarted",
    "Tried",
    "Verdict",
    "Workplan",
    "build_harness",
    "check_warm_start",
    "constraint_values",
    "learned_rules",
    "make_judge",
    "make_sampler",
    "measure",
    "objective_values",
    "on_this_host",
    "profile_config",
    "read_host_facts",
    "sampler_name",
    "told_objectives",
    "trial_engine_config",
]
