"""Screening: the study's engine model predicts each proposal before it is launched.

The model (`autotune.predict.EngineModel`) is calibrated from the study's measured trials
(their engine options, the KV capacity their engine logged, their request records); its
intervals follow each measured trial, its coefficients are refitted once a quarter more are
measured. Every launched trial gets its prediction stored before it runs (`keys.PREDICTION`),
so that the study measures its model's error as it goes: that error is the width of the next
predictions' intervals. A proposal the sampler made (never the baseline, a
repair, a re-measure or a warm start) is recorded unlaunched when, even at the good end of
each interval,

- `predicted_infeasible`: an SLO metric's lower bound is above the SLO's bound; or
- `predicted_worse`: a measured feasible trial dominates it on every objective (a goal
  search: the first objective only, the incumbent above its upper bound), the trial's values
  taken as the less favourable of its measurement and the model's prediction of its config
  (a lucky run on a noisy host is no bar: every config near the optimum would fall under it).

No metric rules anything out until `MIN_SCORED` predictions of it were scored against their
measurement, nor while its error is above `MAX_WIDTH` (the model is not trusted there).
The sampler is told the predicted values, as it would be told a measurement.

After `MAX_IN_A_ROW` proposals in a row were screened out, the next one is launched whatever
its prediction: the measurement, not the model, has the last word. Without that, a model that
rules out every config (one fitted on a host that slowed down, where nothing is feasible as
measured now, or one that is wrong) ends the study on the skip limit after a few trials.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from autotune import store as keys
from autotune.answer.selection import dominates
from autotune.bench import LoadProfile, read_records
from autotune.predict import (
    EngineModel,
    Prediction,
    Sample,
    engine_options,
    error,
)
from autotune.space import engine_default
from autotune.spec import TuneSpec
from autotune.store import TrialRecord
from autotune.study._gate import SkipRule, Verdict
from autotune.vocab import layout
from autotune.vocab.platform import AnyPlatform
from autotune.vocab.status import TrialStatus

MIN_SCORED = 2  # predictions of a metric scored before it may rule a proposal out
MAX_WIDTH = math.log(2.0)  # beyond a factor 2 either way, a metric rules nothing out
SCREENED_ROLES = ("",)  # the sampler's own proposals
MAX_FIT = 8  # the model is fitted to the most recent measured trials (where the search is)
MAX_IN_A_ROW = 4  # proposals screened out in a row, then the next one is launched


def screen_on(spec: TuneSpec) -> bool:
    """Whether proposals are screened. `auto`: in a goal search, where the benchmarks measured
    that it helps (docs/benchmarks.md, "The engine model"); a Pareto search was not measured,
    so there it predicts and stores, and screens nothing."""
    if spec.screen != "auto":
        return spec.screen == "on"
    return predict_on(spec) and spec.search == "goal"


def predict_on(spec: TuneSpec) -> bool:
    """Whether the study predicts its trials at all: an online study at a fixed load (the
    model replays a load profile; offline batches, capacity searches and traces it does not)."""
    if spec.screen == "off":
        return False
    return spec.scenario == "online" and spec.capacity is None and not spec.load.trace


class Screen:
    """One study's engine model, refitted as trials are measured (thread-safe: lanes share
    it)."""

    def __init__(self, spec: TuneSpec, platform: AnyPlatform) -> None:
        self.spec = spec
        self.platform = platform
        self._lock = threading.Lock()
        self._key: tuple[int, ...] = ()
        self._model: EngineModel | None = None
        self._cache: dict[str, Prediction] = {}  # config -> prediction, of the model now
        self._fitted = 0  # measured trials at the last fit of the coefficients
        self._in_a_row = 0  # proposals screened out since the last one launched

    def model(self, trials: Sequence[TrialRecord]) -> EngineModel | None:
        """The model of the study's measured trials now (refitted when they changed)."""
        measured = [t for t in trials if t.status == TrialStatus.OK and t.trial_dir]
        key = tuple(sorted(t.number for t in measured))
        with self._lock:
            if key != self._key:  # a trial was measured: its prediction is scored too
                self._key = key
                self._model = self._calibrate(measured, trials)
                self._cache = {}
            return self._model

    def _calibrate(
        self, measured: Sequence[TrialRecord], trials: Sequence[TrialRecord]
    ) -> EngineModel | None:
        start = self._model.coef if self._model is not None else None
        # The coefficients are refitted once a quarter more trials are measured (each fit
        # replays every trial several times); the KV capacities and errors, every time.
        n = len(measured)
        refit = start is None or n - self._fitted >= max(1, self._fitted // 4)
        if refit:
            self._fitted = n
        return study_model(trials, self.spec.load, self.platform, start, refit=refit)

    def predict(
        self,
        trials: Sequence[TrialRecord],
        config: Mapping[str, Any],
        bounds: Mapping[str, float],
    ) -> Prediction | None:
        """What `config` (engine options) would measure, by the model of `trials` now."""
        model = self.model(trials)
        if model is None:
            return None
        key = json.dumps([engine_options(config), dict(bounds)], sort_keys=True, default=str)
        with self._lock:
            known = self._cache.get(key)
        if known is None:
            known = model.predict(engine_options(config), bounds)
            with self._lock:
                self._cache[key] = known
        return known

    def verdict(
        self,
        prediction: Prediction,
        trials: Sequence[TrialRecord],
        bounds: Mapping[str, float],
    ) -> Verdict | None:
        """Why the proposal need not be launched, or None (launch it: the model does not rule
        it out, or `MAX_IN_A_ROW` proposals before it were screened out)."""
        verdict = self._verdict(prediction, trials, bounds)
        with self._lock:
            if verdict is None or self._in_a_row >= MAX_IN_A_ROW:
                self._in_a_row = 0
                return None
            self._in_a_row += 1
        return verdict

    def _verdict(
        self,
        prediction: Prediction,
        trials: Sequence[TrialRecord],
        bounds: Mapping[str, float],
    ) -> Verdict | None:
        if prediction.failure is not None:
            return None  # the gate's memory rules (and the engine) decide start-up failures
        counts = scored(trials)
        trusted = {
            name: interval
            for name, interval in prediction.metrics.items()
            if len(counts.get(name, ())) >= MIN_SCORED
            and math.log(interval.high / interval.mid if interval.mid > 0 else math.inf)
            <= MAX_WIDTH
        }
        for name, bound in bounds.items():
            interval = trusted.get(name)
            if interval is not None and lower_is_better(name) and interval.low > bound:
                reason = (
                    f"predicted {name} {interval.low:.4g}-{interval.high:.4g} is above its SLO "
                    f"{bound:.4g} (engine model of {prediction.trials} trials)"
                )
                return Verdict(TrialStatus.PREDICTED_INFEASIBLE, reason, SkipRule.INFEASIBLE)
        objectives = [(o.metric, o.direction) for o in self.spec.objectives]
        if self.spec.search == "goal":
            objectives = objectives[:1]
        if not all(m in trusted for m, _ in objectives):
            return None
        signs = [1.0 if d == "maximize" else -1.0 for _, d in objectives]
        best = [trusted[m].high if d == "maximize" else trusted[m].low for m, d in objectives]
        for t in trials:
            if not t.feasible:
                continue
            # What it measured, or what the model says its config gives where that is less
            # (a lucky run is no bar a config must clear).
            modelled = self.predict(trials, t.config, bounds)
            theirs = [
                _worse(t.metric(m), _mid(modelled, m), sign)
                for (m, _), sign in zip(objectives, signs, strict=True)
            ]
            if dominates(theirs, best, signs):
                shown = ", ".join(
                    f"{m} at best {v:.4g}" for (m, _), v in zip(objectives, best, strict=True)
                )
                reason = f"predicted {shown}: trial {t.number} is better, measured and modelled"
                return Verdict(TrialStatus.PREDICTED_WORSE, reason, SkipRule.WORSE)
        return None


def _mid(prediction: Prediction | None, metric: str) -> float | None:
    if prediction is None or metric not in prediction.metrics:
        return None
    return prediction.metrics[metric].mid


def _worse(measured: float, modelled: float | None, sign: float) -> float:
    """The less favourable of a measured value and the model's (`sign` +1: larger is better)."""
    if modelled is None:
        return measured
    return min(measured, modelled) if sign > 0 else max(measured, modelled)


def study_model(
    trials: Sequence[TrialRecord],
    load: LoadProfile,
    platform: AnyPlatform,
    start: Sequence[float] | None = None,
    refit: bool = True,
) -> EngineModel | None:
    """The engine model of a study's measured trials (the `MAX_FIT` most recent whose records
    and KV capacity are here), its intervals as wide as its scored predictions' errors."""
    measured = [t for t in trials if t.status == TrialStatus.OK and t.trial_dir]
    recent = sorted(measured, key=lambda t: t.number)[-MAX_FIT:]
    samples = [s for s in map(sample, recent) if s is not None]
    if not samples:
        return None
    defaults = engine_defaults(trials, platform)
    return EngineModel.calibrate(samples, load, defaults, scored(trials), start, refit=refit)


def percentage_errors(trials: Sequence[TrialRecord]) -> dict[str, list[float]]:
    """Each metric's absolute percentage errors of the predictions made before trials that
    were then measured (|predicted - measured| / measured)."""
    return {
        name: [abs(mid - measured) / measured for measured, mid in pairs if measured > 0]
        for name, pairs in _scored_pairs(trials).items()
    }


def lower_is_better(metric: str) -> bool:
    return metric.endswith("_ms") or metric == "error_rate"


def sample(trial: TrialRecord) -> Sample | None:
    """A measured trial as the model reads it, or None (no records here, no KV figure)."""
    kv = trial.engine.kv_cache_tokens
    if not kv or not trial.trial_dir:
        return None
    try:
        records = read_records(Path(trial.trial_dir) / layout.REQUESTS)
    except (OSError, ValueError):
        return None
    return Sample(engine_options(trial.config), kv, records) if records else None


def engine_defaults(trials: Sequence[TrialRecord], platform: AnyPlatform) -> dict[str, Any]:
    """What the engine runs for a schedule or memory option a config leaves unset: the
    baseline's value (it sets the defaults vLLM computes for the device), else vLLM's for the
    platform."""
    base = next((engine_options(t.config) for t in trials if t.role == keys.ROLE_BASELINE), {})
    names = (
        "max_num_seqs",
        "max_num_batched_tokens",
        "block_size",
        "enable_chunked_prefill",
        "gpu_memory_utilization",
    )
    return {
        name: base[name] if base.get(name) is not None else engine_default(platform, name)
        for name in names
    }


def scored(trials: Sequence[TrialRecord]) -> dict[str, list[float]]:
    """Each metric's errors (|log(measured / predicted)|) of the predictions made before
    trials that were then measured."""
    out = {name: [error(m, p) for m, p in pairs] for name, pairs in _scored_pairs(trials).items()}
    return {name: [e for e in errors if e is not None] for name, errors in out.items()}


def _scored_pairs(trials: Sequence[TrialRecord]) -> dict[str, list[tuple[float, float]]]:
    """Each metric's (measured, predicted) of the trials measured after their prediction
    (finite values only)."""
    out: dict[str, list[tuple[float, float]]] = {}
    for t in trials:
        if t.status != TrialStatus.OK:
            continue
        for name in t.prediction.get("metrics") or {}:
            measured, mid = t.metric(name), t.predicted(name)
            if math.isfinite(measured) and math.isfinite(mid):
                out.setdefault(name, []).append((measured, mid))
    return out
