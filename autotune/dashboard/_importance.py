"""Which parameters matter for the first objective: Optuna's importance over measured trials."""

from __future__ import annotations

import logging
import math
import warnings

import optuna
from optuna.trial import FrozenTrial

from autotune.store import METRICS, STATUS
from autotune.vocab.status import TrialStatus

logger = logging.getLogger(__name__)

MIN_TRIALS = 4  # fewer measured trials say nothing about importance


def param_importance(
    study: optuna.Study, metric: str, direction: str
) -> tuple[dict[str, float], str]:
    """(importance by parameter, a note when there is none).

    Only measured trials count: a failed trial is stored as complete with worst-case values,
    which would make the parameters that caused failures look like the ones that matter for
    speed. The default evaluator (PED-ANOVA) ranks parameters by how they set apart the
    *lowest* targets, so a maximized metric is negated.
    """
    sign = -1.0 if direction == "maximize" else 1.0

    def target(t: FrozenTrial) -> float:
        value = (t.user_attrs.get(METRICS) or {}).get(metric)
        if t.user_attrs.get(STATUS) != TrialStatus.OK or not isinstance(value, int | float):
            return math.nan  # left out: the evaluator keeps finite targets only
        return sign * float(value)

    trials = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    usable = [t for t in trials if math.isfinite(target(t)) and t.params]
    if len(usable) < MIN_TRIALS:
        return {}, f"needs at least {MIN_TRIALS} measured trials (has {len(usable)})"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "computes importances for low target values": meant
            values = optuna.importance.get_param_importances(study, target=target)
    except (ValueError, RuntimeError, ZeroDivisionError) as exc:
        logger.warning("parameter importance failed: %s", exc)
        return {}, f"not computable yet: {exc}"
    values = {k: float(v) for k, v in values.items() if math.isfinite(v)}
    if not any(values.values()):
        return {}, "no parameter stands out yet (too few or too similar trials)"
    return values, ""
