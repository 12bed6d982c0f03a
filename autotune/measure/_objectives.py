"""Objective values and constraints of a trial, for Optuna.

A failed trial is told to Optuna as COMPLETE with worst-case values and violated constraints,
never as FAILED: samplers ignore failed trials and would keep proposing the same region.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from autotune.bench import Summary
from autotune.vocab.objectives import Objective
from autotune.vocab.slo import AGREEMENT, ERROR_RATE, FAILED, OOM, excess
from autotune.vocab.status import OOM_STATUSES

# Worst-case values for trials that produced no measurement (finite, so that every sampler and
# plot can use them). Throughputs are >= 0 and latencies are in ms: both bounds are far outside.
WORST_MAXIMIZE = 0.0
WORST_MINIMIZE = 1e9

# Statuses that mean "this config needs more memory than there is".


def objective_values(objectives: Sequence[Objective], summary: Summary | None) -> list[float]:
    if summary is None:
        return [WORST_MAXIMIZE if o.direction == "maximize" else WORST_MINIMIZE for o in objectives]
    return [_finite(summary.metric(o.metric), o.direction) for o in objectives]


def _finite(value: float, direction: str) -> float:
    if value != value or value in (float("inf"), float("-inf")):
        return WORST_MAXIMIZE if direction == "maximize" else WORST_MINIMIZE
    return value


def constraint_values(
    summary: Summary | None,
    slos: Mapping[str, float],
    max_error_rate: float,
    status: str = "",
    min_agreement: float | None = None,
) -> dict[str, float]:
    """Constraint name -> value (<= 0 feasible). Every trial gets the same names.

    `failed` is positive for every trial without a measurement, `oom` only for those that ran
    out of memory (or were predicted to), so the samplers learn the memory boundary apart from
    other failures. SLO constraints are relative (`measured / bound - 1`), so that violations
    of different units can be compared and summed by the samplers. With `min_agreement`,
    `agreement` is `min_agreement - agreement_tokens`: a config that answers otherwise than
    the baseline is infeasible, as one that misses an SLO, and so is one whose outputs are
    unknown (its engine did not answer the prompts).
    """
    oom = 1.0 if status in OOM_STATUSES else 0.0
    if summary is None:
        values = {FAILED: 1.0, OOM: oom, ERROR_RATE: 1.0, **{name: 1.0 for name in slos}}
        return values | ({AGREEMENT: 1.0} if min_agreement is not None else {})
    values = {FAILED: 0.0, OOM: 0.0, ERROR_RATE: summary.metric("error_rate") - max_error_rate}
    for name, bound in slos.items():
        measured = summary.metric(name)
        values[name] = excess(measured, bound)
    if min_agreement is not None:
        agreed = summary.metric("agreement_tokens")
        values[AGREEMENT] = 1.0 if agreed != agreed else min_agreement - agreed
    return values
