"""A host whose speed drifts during a study: what re-measured configs say about it, and trials
compared as if all had run at the study's start.

A shared host's speed drifts (this project's 2-core host: up to 26% over half an hour), so a
config measured late looks worse than one of the same truth measured early, and a study's
best measured trial stops being its best config. A config measured more than once (the
search re-measures its incumbent, see autotune.study._remeasure) tells the drift apart from
the configs: in log space every run is its config's level plus the host's drift at its time,

    log(output_throughput_i) = level[config_i] + g(t_i) + noise,

with g piecewise linear in time: 0 at the first run, one knot at the time of every run that
repeats a config (where the drift is observed), flat after the last one. `fit_drift` solves
that by least squares (a small ridge on the knots keeps few repeats stable). A polynomial
(`a1*s + a2*s^2`) was used first: a study longer than the host's swing (down and back up
within an hour on this project's host) bent it the wrong way after the last anchor: in a
traced seed of benchmarks/sim it put the host 20% slower there than it was, and export
judged configs that miss their TPOT bound feasible (docs/benchmarks.md).
Under a fixed arrival rate the throughput is the offered rate until the host saturates, so
there the fit reads no drift and the values stay as measured. That is the safe side: a run
at speed s under rate r behaves as the host at full speed under rate r/s (every step 1/s as
long is the same schedule on a clock s times as slow), so its measured latencies are at
least the config's at full speed under a higher load than the user's: never better than the
truth. The median TPOT, inverted, was
measured as the signal too (benchmarks/sim, SLO landscape, 10 seeds: 3/10 seeds at 95%
within 15 trials against 4/10): near saturation it over-states a slowdown (10% slower steps,
39% longer p50 TPOT: the batches grow), and latencies corrected by it come out below the
config's at the user's load: an infeasible config can look feasible.
`compared` scales every measured trial to the host's speed at the study's start (rates /
speed, latencies * speed, SLO constraints with them) and merges the runs of one config into
one record (mean metrics): what selection and the sampler compare. Without a repeat there is no
drift estimate and the values are the measured ones.
Where a trial read the host's speed before its benchmark (`engine["speed"]`, the speed probe of
autotune.study._speed; a fixed-rate run was then sent at rate * speed), `compared` scales it by
that reading instead, and no drift is fitted (`study_drift`): the probe sees each run's own
level, which repeats cannot (a fit on top of it changed nothing in benchmarks/sim). A
reading counts only as far as the study's readings say the host moves (`weight`: 0 while
their spread is the probe's own), a closed-loop run at the study's weight now
(`probe_weight`). Pure functions over stored trials.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

import numpy as np
from scipy.stats import chi2

from autotune.bench import PER_TOKEN_COSTS, RATES
from autotune.store import TrialRecord

SPEED = "speed"  # the key of a trial's engine facts with its speed probe (autotune.study._speed)
RIDGE = 0.01  # on the knots' log speeds: small, it only keeps few repeats stable
MAX_SPEED_RATIO = 2.0  # a fitted drift is clipped to within 2x either way

# The probe's own spread (sd of the log of its reading) on a host whose speed does not move:
# assumed, as benchmarks/sim reads the host's speed within it; not yet measured on its own
# (benchmarks/speed_probe.py --hog-every 0 reports it as `sd_log_probe`).
PROBE_SPREAD = 0.02
SIGNIFICANCE = 0.95  # the readings' spread must exceed the probe's at this level to count


def weight(logs: list[float], spread: float = PROBE_SPREAD) -> float:
    """How much of the differences between the log readings `logs` is the host's (1) rather
    than the probe's own `spread` (0): 0 while their sum of squares is within the chi-square
    bound of the probe alone (fewer than 2 readings: 0), else `1 - spread**2 / variance`."""
    n = len(logs)
    if n < 2:
        return 0.0
    mean = math.fsum(logs) / n
    squares = math.fsum((x - mean) ** 2 for x in logs)
    if squares <= float(chi2.ppf(SIGNIFICANCE, n - 1)) * spread**2:
        return 0.0
    return 1.0 - (n - 1) * spread**2 / squares


@dataclass(frozen=True)
class Drift:
    """The host's speed over a study, relative to its start (`speed(t0) == 1`)."""

    t0: float
    knots: tuple[float, ...]  # times (s) after t0 where the drift was observed, ascending
    logs: tuple[float, ...]  # log speed at each knot
    repeats: int  # runs beyond the first of their config: what the fit rests on

    def speed(self, t: float) -> float:
        g = float(np.interp(t - self.t0, (0.0, *self.knots), (0.0, *self.logs)))
        limit = math.log(MAX_SPEED_RATIO)
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
    """Measured trials with a time and a throughput: what the drift is fitted on."""
    out = []
    for t in trials:
        value = t.metric("output_throughput")
        if t.measured and _time(t) is not None and math.isfinite(value) and value > 0:
            out.append(t)
    return out


def study_drift(trials: Sequence[TrialRecord]) -> Drift | None:
    """The drift fit that applies to `trials`: none where a measured run read its speed with
    the probe (the probe replaces it), else `fit_drift`."""
    if any(t.measured and probed_speed(t) is not None for t in trials):
        return None
    return fit_drift(trials)


def fit_drift(trials: Sequence[TrialRecord]) -> Drift | None:
    """The drift the study's repeated configs show; None without a repeat."""
    runs = sorted(_runs(trials), key=lambda t: _time(t) or 0.0)
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


def positive(value: object) -> TypeGuard[float]:
    """A finite number above 0."""
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


def probe_weight(trials: Sequence[TrialRecord]) -> float | None:
    """`weight` over the probe readings of every trial of `trials` that has one (None: no
    trial has): how far the study's readings, all of them so far, say its host moves."""
    logs = [math.log(r) for t in trials if positive(r := speed_facts(t.engine).get("reading"))]
    return weight(logs) if logs else None


def probed_speed(trial: TrialRecord, study_weight: float | None = None) -> float | None:
    """The speed the trial's probe read before its benchmark, where its metrics scale by it
    (not a trace's runs: their arrivals were not moved); else None. A closed-loop run (no
    rate was sent by the reading) is re-weighted by `study_weight` where given (the study's
    `probe_weight` now: a run probed before the host was seen to move is corrected once it
    is); a fixed-rate run keeps the speed its rate was sent at."""
    facts = speed_facts(trial.engine)
    reading, reference = facts.get("reading"), facts.get("reference")
    if (
        study_weight is not None
        and facts.get("scales")
        and "rate" not in facts
        and positive(reading)
        and positive(reference)
    ):
        return float((reading / reference) ** study_weight)
    return engine_speed(trial.engine)


def speed_facts(engine: Mapping[str, Any]) -> Mapping[str, Any]:
    """A run's speed-probe facts (`engine[SPEED]`, autotune.study._speed); {} where it has none."""
    facts = engine.get(SPEED)
    return facts if isinstance(facts, dict) else {}


def engine_speed(engine: Mapping[str, Any]) -> float | None:
    """`probed_speed` from a run's engine facts (a trial's, or a confirm run's)."""
    facts = speed_facts(engine)
    speed = facts.get("speed")
    return float(speed) if facts.get("scales") and positive(speed) else None


def at_probe(trial: TrialRecord, study_weight: float | None = None) -> TrialRecord:
    """The trial's metrics and SLO constraints as at its probe's reference speed (re-weighted
    by `study_weight`, see `probed_speed`)."""
    speed = probed_speed(trial, study_weight)
    if speed is None or not trial.measured:
        return trial
    return _at_speed(trial, speed)


def at_probes(trials: Sequence[TrialRecord]) -> list[TrialRecord]:
    """Every trial `at_probe`, a closed-loop run at the study's `probe_weight` now."""
    study_weight = probe_weight(trials)
    return [at_probe(t, study_weight) for t in trials]


def at_start(trial: TrialRecord, drift: Drift | None) -> TrialRecord:
    """The trial's metrics and SLO constraints as at the study's start."""
    at = _time(trial)
    if drift is None or not trial.measured or at is None:
        return trial
    return _at_speed(trial, drift.speed(at))


def _at_speed(trial: TrialRecord, speed: float) -> TrialRecord:
    """`trial` as at speed 1, measured at `speed` (the probe's or the fitted drift's: a
    study has one or the other, `study_drift`)."""
    metrics = {k: scaled(k, v, speed) for k, v in trial.metrics.items()}
    constraints = {k: scaled_constraint(k, c, speed) for k, c in trial.constraints.items()}
    update = {"metrics": metrics, "constraints": constraints, "speed": speed}
    return trial.model_copy(update=update)


def compared(trials: Sequence[TrialRecord]) -> list[TrialRecord]:
    """Every trial as selection compares it: measured ones as at the study's start, the runs
    of one config merged into the first one's record (mean metrics and constraints; `runs`
    counts them), the others as they are. In the order of `trials`. Probed trials are
    scaled by their probe's speed, and then no drift is fitted."""
    drift = study_drift(trials)
    trials = at_probes(trials)
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
