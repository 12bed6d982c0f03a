"""What is recorded per trial and per study, and how it is read back.

Results live in the Optuna storage itself (trial and study user attributes), so that every
backend Optuna supports (SQLite, PostgreSQL) holds the measured results beside the search
state, and `show`, `export` and the dashboard work from any machine that reaches it.
"""

from __future__ import annotations

import math
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState
from pydantic import BaseModel, Field

from autotune.store._facts import TrialFacts, Worker
from autotune.store._study import StudyFacts
from autotune.vocab.status import TrialStatus

# Trial user-attribute keys: one place spells them.
STATUS = "status"
REASON = "reason"
ROLE = "role"
CONFIG = "config"
ENV = "env"  # what the space and the spec set: what a deployment of the config sets too
LEASE_ENV = "lease_env"  # what the trial's lease added (its devices or cores): never exported
METRICS = "metrics"
ENGINE = "engine"
DEVICE_S = "device_s"
TRIAL_DIR = "trial_dir"
LOG_TAIL = "log_tail"
DESCRIPTION = "description"
REPAIR_OF = "repair_of"  # the OOM trial a repair trial retries
REQUEUED = "requeued"  # set on a trial queued again after an interruption
WORKER = "worker"  # who runs the trial: a `Worker` (see autotune.study._worker)
SLOT = "slot"  # its place in the trial budget (1..trials)
SPREAD = "spread"  # metric -> half the range over the trial's repeated runs
INTERVALS = "intervals"  # metric -> [low, high], its 90% interval (null: unbounded that side)
MEASURED_AT = "measured_at"  # when its benchmark ended (epoch s); the drift reads its middle
REMEASURE_OF = "remeasure_of"  # the trial whose config a re-measure trial runs again
PREDICTION = "prediction"  # the engine model's prediction, made before the trial ran
REINGESTED = "reingested"  # recorded from its folder after the study's database was lost
STAGE = "stage"  # a staged (MoE) study's stage the trial belongs to: STAGE_LAYOUT or _SCHEDULER

ROLE_BASELINE = "baseline"
ROLE_REPAIR = "repair"
ROLE_WARM_START = "warm_start"  # a Pareto config of another study, run first
ROLE_REMEASURE = "remeasure"  # a measured config run again (autotune.search._remeasure)
WARM_FROM = "warm_from"  # "STUDY#N": where a warm-start trial's config comes from
STAGE_LAYOUT = "layout"  # the layouts a MoE study runs first, scheduler knobs at the baseline
STAGE_SCHEDULER = "scheduler"  # the rest, searched within the winning layout


class TrialRecord(BaseModel):
    """One trial as the user sees it: config, outcome, measurements."""

    number: int
    state: str
    status: str
    reason: str = ""
    role: str = ""
    stage: str = ""  # a staged study's stage (STAGE_LAYOUT, STAGE_SCHEDULER); "" unstaged
    description: str = ""
    params: dict[str, Any] = Field(default_factory=dict)
    config: dict[str, Any] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    lease_env: dict[str, str] = Field(default_factory=dict)
    metrics: dict[str, float] = Field(default_factory=dict)
    engine: TrialFacts = Field(default_factory=TrialFacts)
    values: list[float] | None = None
    constraints: dict[str, float] = Field(default_factory=dict)
    device_s: float | None = None
    trial_dir: str | None = None
    log_tail: str = ""
    repair_of: int | None = None
    slot: int | None = None
    worker: Worker = Field(default_factory=Worker)
    spread: dict[str, float] = Field(default_factory=dict)
    # How precisely the run measured each metric: its 90% interval (bench/_intervals.py).
    intervals: dict[str, tuple[float, float]] = Field(default_factory=dict)
    measured_at: float | None = None
    remeasure_of: int | None = None
    prediction: dict[str, Any] = Field(default_factory=dict)  # autotune.predict, before it ran
    runs: int = 1  # measured runs of its config merged into this record (autotune.answer.repeats)

    def conservative(self, name: str, direction: str) -> float:
        """The metric made worse by its spread over repeated runs (`median - spread` for a
        maximized metric, `+` for a minimized one): what the config surely delivers."""
        value, wobble = self.metric(name), self.spread.get(name, 0.0)
        return value - wobble if direction == "maximize" else value + wobble

    @property
    def measured(self) -> bool:
        return self.status == TrialStatus.OK and bool(self.metrics)

    @property
    def feasible(self) -> bool:
        """Measured, and every constraint (SLOs, error rate) is <= 0."""
        return self.measured and all(c <= 0 for c in self.constraints.values())

    def metric(self, name: str) -> float:
        return float(self.metrics.get(name, math.nan))

    def predicted(self, name: str) -> float:
        """The middle of the engine model's prediction of the metric, made before the trial
        ran (NaN without one)."""
        interval = (self.prediction.get("metrics") or {}).get(name)
        return float(interval[1]) if interval else math.nan

    @classmethod
    def from_frozen(cls, trial: FrozenTrial) -> TrialRecord:
        attrs = trial.user_attrs
        status = attrs.get(STATUS) or _status_from_state(trial.state)
        return cls(
            number=trial.number,
            state=trial.state.name.lower(),
            status=status,
            reason=attrs.get(REASON, ""),
            role=attrs.get(ROLE, ""),
            stage=attrs.get(STAGE, ""),
            description=attrs.get(DESCRIPTION, ""),
            params=dict(trial.params),
            config=attrs.get(CONFIG, {}),
            env=attrs.get(ENV, {}),
            lease_env=attrs.get(LEASE_ENV) or {},
            metrics=_metrics(attrs.get(METRICS)),
            engine=TrialFacts.read(attrs.get(ENGINE)),
            values=list(trial.values) if trial.values is not None else None,
            constraints=dict(trial.constraints),
            device_s=attrs.get(DEVICE_S),
            trial_dir=attrs.get(TRIAL_DIR),
            log_tail=attrs.get(LOG_TAIL, ""),
            repair_of=attrs.get(REPAIR_OF),
            slot=attrs.get(SLOT),
            worker=Worker.read(attrs.get(WORKER)),
            spread=attrs.get(SPREAD) or {},
            intervals=read_intervals(attrs.get(INTERVALS)),
            measured_at=attrs.get(MEASURED_AT),
            remeasure_of=attrs.get(REMEASURE_OF),
            prediction=attrs.get(PREDICTION) or {},
        )


def stored_intervals(intervals: dict[str, tuple[float, float]] | None) -> dict[str, list]:
    """Intervals as the store keeps them: an end that is not finite (no bound that side) is
    null, as a metric that is not finite is."""
    return {
        name: [lo if math.isfinite(lo) else None, hi if math.isfinite(hi) else None]
        for name, (lo, hi) in (intervals or {}).items()
    }


def read_intervals(stored: Any) -> dict[str, tuple[float, float]]:
    """Stored intervals back: a null low end reads -inf, a null high end inf."""
    if not isinstance(stored, dict):
        return {}
    out: dict[str, tuple[float, float]] = {}
    for name, pair in stored.items():
        if isinstance(pair, list | tuple) and len(pair) == 2:
            lo, hi = pair
            out[name] = (
                -math.inf if lo is None else float(lo),
                math.inf if hi is None else float(hi),
            )
    return out


def _metrics(stored: Any) -> dict[str, float]:
    """Stored metrics as floats: a null (a value that was not finite) reads back as NaN."""
    if not isinstance(stored, dict):
        return {}
    return {k: math.nan if v is None else float(v) for k, v in stored.items()}


def _status_from_state(state: TrialState) -> str:
    return {TrialState.RUNNING: "running", TrialState.WAITING: "queued"}.get(
        state, state.name.lower()
    )


class StudyInfo(BaseModel):
    """A study as listed: name, what it tunes, how far it got."""

    name: str
    facts: StudyFacts = Field(default_factory=StudyFacts)
    directions: list[str] = Field(default_factory=list)
    n_trials: int = 0


def study_records(study: optuna.Study) -> list[TrialRecord]:
    return [TrialRecord.from_frozen(t) for t in study.get_trials(deepcopy=False)]
