"""One config's device work, with no Optuna in it: start the engine, run the workload, tear
down (`measure`), alone or in turns with other engines (`Turns`); stop a benchmark early once
its requests decide it (`make_judge`); compare a config's greedy outputs with the baseline's
(`agreement_of`); what a measurement means as objective and constraint values; profile a
config (`profile_config`).

`autotune.study` drives it once per trial; benchmarks drive it directly.
"""

from autotune.measure._agreement import Agreement, Reference, agreement_of
from autotune.measure._measure import Measure, Workplan, measure
from autotune.measure._objectives import (
    AGREEMENT,
    ERROR_RATE,
    FAILED,
    OOM,
    WORST_MAXIMIZE,
    WORST_MINIMIZE,
    constraint_values,
    objective_values,
)
from autotune.measure._outcome import (
    Measurement,
    load_measurement,
    resummarized,
    save_measurement,
)
from autotune.measure._profile import ProfileError, ProfilePlan, profile_config
from autotune.measure._prune import FrontPoint, Judge, PruneRule, make_judge
from autotune.measure._turns import Turn, Turns

__all__ = [
    "AGREEMENT",
    "ERROR_RATE",
    "FAILED",
    "OOM",
    "WORST_MAXIMIZE",
    "WORST_MINIMIZE",
    "Agreement",
    "FrontPoint",
    "Judge",
    "Measure",
    "Measurement",
    "ProfileError",
    "ProfilePlan",
    "PruneRule",
    "Reference",
    "Turn",
    "Turns",
    "Workplan",
    "agreement_of",
    "constraint_values",
    "load_measurement",
    "make_judge",
    "measure",
    "objective_values",
    "profile_config",
    "resummarized",
    "save_measurement",
]
