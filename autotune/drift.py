"""A host whose speed drifts during a study: what re-measured configs (controls) say about it,
and trials compared as if all had run at the study's start, only where the controls show that
this makes repeated runs agree better.

The engine is the measure of its host. A shared host's speed drifts (this project's 2-core
host: up to 26% over half an hour), so a config measured late can look worse than one of the
same truth measured early. A config measured more than once (the search re-measures its
incumbent, autotune.study._remeasure) tells the drift apart from the configs: in log space
every run is its config's level plus the host's drift at its time,

    log(output_throughput_i) = level[config_i] + g(t_i) + noise,

with g piecewise linear in time: 0 at the first run, one knot at the time of every run that
repeats a config (where the drift is observed), flat after the last one. The fit is least
squares (a small ridge on the knots keeps few repeats stable).

A fit always explains the runs it was fitted on; whether it corrects anything is a question
for runs it has not seen. So the correction's strength `s` (`speed = exp(s * g)`) is fitted
from held-out controls: each repeated run is left out in turn, the drift is fitted on the
rest, and its prediction of the held-out run's offset from its config's other runs is
regressed on what the run measured. `s` is that slope, clipped to [0, 1], and 0 unless the
held-out runs show it (at least `MIN_HELD_OUT` of them, the slope `T_CRITICAL` standard errors
above 0). With one repeat nothing is held out, and the values stay as measured: noise is
never added where the study's own data does not show drift. (A speed probe timed before each
benchmark was used until stop 29; on the real engine beside other work it widened one
config's repeated throughput spread from 0.138 to 0.252 (sd of log; probe and engine
correlated at 0.48), and it was removed: docs/benchmarks.md, "Verdicts".)

Under a fixed arrival rate the throughput is the offered rate until the host saturates, so
there the fit reads no drift and the values stay as measured: a run at speed s under rate r
behaves as the host at full speed under rate r/s, so its measured latencies are never better
than the truth.

`compared` scales every measured trial to the host's speed at the study's start (rates /
speed, latencies * speed, SLO constraints with them) and merges the runs of one config into
one record (mean metrics): what selection and the sampler compare. Pure functions over stored
trials.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from autotune.bench import PER_TOKEN_COSTS, RATES
from autotune.store import TrialRecord

RIDGE = 0.01  # on the knots' log speeds: small, it only keeps few repeats stable
MAX_SPEED_RATIO = 2.0  # a fitted drift is clipped to within 2x either way
MIN_HELD_OUT = 3  # held-out repeated runs before a correction's strength can be fitted
T_CRITICAL = 1.645  # the held-out slope must be this many standard errors above 0 (95%, one-sided)


@dataclass(frozen=True)
class Drift:
    """The host's speed over a study, relative to its start (`speed(t0) == 1`)."""

    t0: float
    knots: tuple[float, ...]  # times (s) after t0 where the drift was observed, ascending
    logs: tuple[float, ...]  # log speed at each knot
    repeats: int  # runs beyond the first of their config: what the fit rests on
    strength: float = 1.0  # how much of the fitted drift the held-out controls confirm

    def log_speed(self, t: float) -> float:
        """The fitted drift's log speed at `t`, before its strength."""
        return float(np.interp(t - self.t0, (0.0, *self.knots), (0.0, *self.logs)))

    def speed(self, t: float) -> float:
        limit = math.log(MAX_SPEED_RATIO)
        g = self.strength * self.log_speed(t)
        return math.exp(min(limit, max(-limit, g)))

    def extremes(self, t1: float) -> tuple[float, float]:
        """The lowest and highest speed between the start and `t1`."""
        speeds = [self.speed(self.t0 + (t1 - self.t0) * k / 50) for k in range(51)]
        return min(speeds), max(speeds)


def run_time(measured_at: float | None, metrics: Mapping[str, float | None]) -> float | None:
    """When a run measured the host: the middle of its benchmark (`measured_at` is when the
    benchmark ended, `duration_s` how long its measured requests took). A benchmark of
    several minutes measures the host's speed over those minutes, not at their end."""
    if measured_at is None:
        return None
    duration = metrics.get("duration_s")
    if duration is None or not math.isfinite(duration) or duration <= 0:
        return float(measured_at)
    return float(measured_at) - duration / 2


def _time(trial: TrialRecord) -> float | None:
    return run_time(trial.measured_at, trial.metrics)


def config_key(trial: TrialRecord) -> str:
    """One config's runs share this key: its tuned parameter values."""
    return json.dumps(trial.params, sort_keys=True, default=str)


def _runs(trials: Sequence[TrialRecord]) -> list[TrialRecord]:
    """Measured trials with a time and a throughput, in time order: what the drift is fitted on."""
    out = []
    for t in trials:
        value = t.metric("output_throughput")
        if t.measured and _time(t) is not None and math.isfinite(value) and value > 0:
            out.append(t)
    return sorted(out, key=lambda t: (_time(t) or 0.0, t.number))


def study_drift(trials: Sequence[TrialRecord]) -> Drift | None:
    """The drift that applies to `trials`: `fit_drift` at the strength its held-out controls
    confirm; None where they confirm none (the values stay as measured)."""
    drift = fit_drift(trials)
    if drift is None:
        return None
    strength = held_out_strength(trials)
    return replace(drift, strength=strength) if strength > 0 else None


def fit_drift(trials: Sequence[TrialRecord]) -> Drift | None:
    """The drift the study's repeated configs show, at full strength; None without a repeat."""
    runs = _runs(trials)
    keys = sorted({config_key(t) for t in runs})
    repeats = len(runs) - len(keys)
    if repeats < 1:
        return None
    times = [_time(t) or 0.0 for t in runs]
    t0 = times[0]
    seen: set[str] = set()
    knots: list[float] = []
    for t, when in zip(runs, times, strict=True):
        key = config_key(t)
        if key in seen and when > t0 and (not knots or when - t0 > knots[-1]):
            knots.append(when - t0)
        seen.add(key)
    if not knots:
        return None
    column = {k: i for i, k in enumerate(keys)}
    n = len(keys)
    x = np.zeros((len(runs) + len(knots), n + len(knots)))
    y = np.zeros(len(runs) + len(knots))
    for row, (t, when) in enumerate(zip(runs, times, strict=True)):
        x[row, column[config_key(t)]] = 1.0
        x[row, n:] = _hats(when - t0, knots)
        y[row] = math.log(t.metric("output_throughput"))
    for k in range(len(knots)):  # the ridge rows: each knot pulled towards no drift
        x[len(runs) + k, n + k] = math.sqrt(RIDGE)
    solution, *_ = np.linalg.lstsq(x, y, rcond=None)
    logs = tuple(float(a) for a in solution[n:])
    return Drift(t0, tuple(knots), logs, repeats)


def held_out_strength(trials: Sequence[TrialRecord]) -> float:
    """How much of the fitted drift held-out controls confirm, in [0, 1] (see the module's
    text): each run of a config measured more than once is left out in turn, the drift fitted
    on the others predicts its offset from its config's other runs (`d`), and the slope of
    what it measured (`e`) on `d` is the strength. 0 with fewer than `MIN_HELD_OUT` held-out
    runs, or a slope within `T_CRITICAL` standard errors of 0."""
    runs = _runs(trials)
    by_config: dict[str, list[TrialRecord]] = {}
    for t in runs:
        by_config.setdefault(config_key(t), []).append(t)
    pairs: list[tuple[float, float]] = []
    for group in by_config.values():
        if len(group) < 2:
            continue
        for left in group:
            others = [t for t in group if t is not left]
            drift = fit_drift([t for t in runs if t is not left])
            e = _log(left) - statistics.fmean(_log(t) for t in others)
            d = 0.0
            if drift is not None:
                g = drift.log_speed(_time(left) or 0.0)
                d = g - statistics.fmean(drift.log_speed(_time(t) or 0.0) for t in others)
            pairs.append((e, d))
    if len(pairs) < MIN_HELD_OUT:
        return 0.0
    dd = math.fsum(d * d for _, d in pairs)
    if dd <= 0:
        return 0.0
    slope = math.fsum(e * d for e, d in pairs) / dd
    residual = math.fsum((e - slope * d) ** 2 for e, d in pairs)
    se = math.sqrt(residual / (len(pairs) - 1) / dd)
    if slope <= 0 or (se > 0 and slope / se < T_CRITICAL):
        return 0.0
    return min(1.0, slope)


def _log(trial: TrialRecord) -> float:
    return math.log(trial.metric("output_throughput"))


def _hats(at: float, knots: Sequence[float]) -> np.ndarray:
    """The weights of the knots' values in g(at), as `Drift.speed` interpolates them: linear
    between 0 (g = 0) and the knots, flat after the last."""
    points = (0.0, *knots)
    unit = np.eye(len(knots))
    return np.array([np.interp(at, points, (0.0, *unit[k])) for k in range(len(knots))])


def scaled(name: str, value: float, speed: float) -> float:
    """`value` of metric `name` as at speed 1, measured at `speed`."""
    if name in RATES:
        return value / speed
    if _slower_is_more(name):
        return value * speed
    return value


def scaled_constraint(name: str, constraint: float, speed: float) -> float:
    """An SLO's constraint (`measured / bound - 1`, autotune.study._objectives) as at speed 1,
    measured at `speed`; others (the error rate) as they are."""
    return (1.0 + constraint) * speed - 1.0 if _slower_is_more(name) else constraint


def _slower_is_more(name: str) -> bool:
    """A latency, or a cost per token: what a slower host makes larger, in proportion."""
    return name.endswith("_ms") or name in PER_TOKEN_COSTS


def at_start(trial: TrialRecord, drift: Drift | None) -> TrialRecord:
    """The trial's metrics and SLO constraints as at the study's start."""
    at = _time(trial)
    if drift is None or not trial.measured or at is None:
        return trial
    speed = drift.speed(at)
    metrics = {k: scaled(k, v, speed) for k, v in trial.metrics.items()}
    constraints = {k: scaled_constraint(k, c, speed) for k, c in trial.constraints.items()}
    update = {"metrics": metrics, "constraints": constraints, "speed": speed}
    return trial.model_copy(update=update)


def compared(trials: Sequence[TrialRecord]) -> list[TrialRecord]:
    """Every trial as selection compares it: measured ones as at the study's start (where the
    held-out controls confirm a drift, `study_drift`; else as measured), the runs of one config
    merged into the first one's record (mean metrics and constraints; `runs` counts them), the
    others as they are. In the order of `trials`."""
    drift = study_drift(trials)
    groups: dict[str, list[TrialRecord]] = {}
    for t in trials:
        if t.measured:
            groups.setdefault(config_key(t), []).append(at_start(t, drift))
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
    speeds = [t.speed for t in group if t.speed is not None]
    speed = statistics.fmean(speeds) if speeds else None
    update = {"metrics": metrics, "constraints": constraints, "runs": len(group), "speed": speed}
    return first.model_copy(update=update)


def _mean(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return statistics.fmean(finite) if finite else math.nan
