"""One config's repeated runs merged, and the noise they show; no value is corrected.

The engine is the measure of its host: a speed probe and a drift fitted on re-measured configs
made no config's repeated real runs agree better in every background condition
(docs/metrics.md, "Drift"), so values stay as the engine measured them. Drift is handled by
design instead: the search re-measures its incumbent (autotune.search._remeasure), whose runs
are merged here (mean metrics) so a lucky run weighs less, and the confirm step
(autotune.study._confirm) re-measures its candidates and the baseline in interleaved rounds and
compares them paired, round by round.

`compared` is what selection and the sampler compare: every trial as measured, the runs of one
config merged into the record of its first trial (`runs` counts them). `noise` is what those
repeated runs show of the host: the spread of one config's fresh engines, per metric, which
`autotune.answer.selection` keeps an exported config's SLOs clear of. Pure functions over stored
trials.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from autotune.store import TrialRecord


def config_key(trial: TrialRecord) -> str:
    """One config's runs share this key: its tuned parameter values."""
    return json.dumps(trial.params, sort_keys=True, default=str)


def compared(trials: Sequence[TrialRecord]) -> list[TrialRecord]:
    """Every trial as selection compares it: the measured runs of one config merged into the
    first one's record (mean metrics and constraints; `runs` counts them), the others as they
    are. In the order of `trials`."""
    groups: dict[str, list[TrialRecord]] = {}
    for t in trials:
        if t.measured:
            groups.setdefault(config_key(t), []).append(t)
    out = []
    for t in trials:
        if not t.measured:
            out.append(t)
            continue
        group = groups[config_key(t)]
        if group[0].number == t.number:
            out.append(_merged(group))
    return out


def _merged(group: list[TrialRecord]) -> TrialRecord:
    first = group[0]
    if len(group) == 1:
        return first
    names = set().union(*(t.metrics for t in group))
    metrics = {name: _mean([t.metric(name) for t in group]) for name in names}
    constraints = {
        name: _mean([t.constraints.get(name, math.nan) for t in group])
        for name in first.constraints
    }
    update = {"metrics": metrics, "constraints": constraints, "runs": len(group)}
    return first.model_copy(update=update)


def _mean(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return statistics.fmean(finite) if finite else math.nan


@dataclass(frozen=True)
class Noise:
    """One metric's run-to-run noise as this study measured it: the pooled standard deviation
    of the log of one run over the configs that ran more than once (`sd`), and the degrees of
    freedom it rests on (`df`: runs less one per config)."""

    sd: float
    df: int


def noise(trials: Sequence[TrialRecord], names: Iterable[str]) -> dict[str, Noise]:
    """Each metric of `names` whose run-to-run noise the study measured: from the configs with
    two or more measured runs (each run a fresh engine: re-measures, warm-start repeats), the
    pooled sd of log. A metric no config measured twice (finite and positive) is left out."""
    groups: dict[str, list[TrialRecord]] = {}
    for t in trials:
        if t.measured:
            groups.setdefault(config_key(t), []).append(t)
    out = {}
    for name in names:
        squares, df = 0.0, 0
        for group in groups.values():
            logs = [
                math.log(v) for v in (t.metric(name) for t in group) if v > 0 and math.isfinite(v)
            ]
            if len(logs) < 2:
                continue
            mean = statistics.fmean(logs)
            squares += sum((x - mean) ** 2 for x in logs)
            df += len(logs) - 1
        if df > 0:
            out[name] = Noise(math.sqrt(squares / df), df)
    return out
