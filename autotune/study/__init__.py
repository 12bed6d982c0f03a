"""The Optuna study: opening it, the pre-launch gate, one trial's life, recording, the loop and
its lanes, and the confirm step. One config's device work is `autotune.measure`; how the study
searches (samplers, what they are told, re-measures) is `autotune.search`.

Which trials are best (the Pareto front, picks, the confirmed winner) is
`autotune.answer.selection`: pure functions over stored trials, for readers that need none of
this machinery.
"""

from autotune.study._confirm import Confirmer
from autotune.study._errors import StudyError, StudyMismatch
from autotune.study._events import Event, TrialFinished, TrialSkipped, TrialStarted
from autotune.study._gate import Gate, Proposal, SkipRule, Verdict
from autotune.study._harness import Harness, Machine, build_harness
from autotune.study._host_fit import on_this_host, read_host_facts, trial_engine_config
from autotune.study._learned import LearnedRule, Tried, learned_rules
from autotune.study._opening import check_warm_start
from autotune.study._runner import StudyResult, StudyRunner
from autotune.study._screen import percentage_errors, study_model
from autotune.study._trial import TrialOutcome

__all__ = [
    "Confirmer",
    "Event",
    "Gate",
    "Harness",
    "LearnedRule",
    "Machine",
    "Proposal",
    "SkipRule",
    "StudyError",
    "StudyMismatch",
    "StudyResult",
    "StudyRunner",
    "TrialFinished",
    "TrialOutcome",
    "TrialSkipped",
    "TrialStarted",
    "Tried",
    "Verdict",
    "build_harness",
    "check_warm_start",
    "learned_rules",
    "on_this_host",
    "percentage_errors",
    "read_host_facts",
    "study_model",
    "trial_engine_config",
]
