"""Recording: the one writer of a trial's attributes and of what Optuna is told.

Every outcome of a trial reaches the store through here: what was proposed (description,
config, env), who runs it, a skipped proposal's verdict, a proposal that waited in vain for
memory other processes held, a measurement (status, metrics with non-finite values stored as
null, engine facts, device seconds, constraints, objectives), an interruption, a proposal
given back because the budget was full, an orphan settled, and the
repair of an OOM queued after it.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, Trial, TrialState

from autotune import store as keys
from autotune.bench import METRIC_NAMES, OPTIONAL, with_agreement
from autotune.engine import EngineConfig, to_yaml_dict
from autotune.measure import (
    Agreement,
    Measurement,
    constraint_values,
    objective_values,
    resummarized,
    save_measurement,
)
from autotune.search import told_objectives
from autotune.space import SearchSpace, repair
from autotune.spec import TuneSpec
from autotune.store import (
    StorageError,
    StudyFacts,
    StudyStore,
    Worker,
    storage_errors,
    stored_intervals,
    write_study,
)
from autotune.study._errors import StudyError
from autotune.study._gate import Verdict
from autotune.study._slos import StudyBounds
from autotune.vocab import layout
from autotune.vocab.status import TrialStatus

logger = logging.getLogger(__name__)

# What a queued config keeps when it is queued again (its origin).
_QUEUE_ATTRS = (keys.ROLE, keys.REPAIR_OF, keys.REQUEUED)


class Recorder:
    """Writes a study's trials. A failed measurement is a COMPLETE trial with worst values and
    violated constraints (`autotune.measure._objectives`), never FAILED: samplers ignore those
    and would keep proposing the region."""

    def __init__(self, spec: TuneSpec, store: StudyStore, bounds: StudyBounds) -> None:
        self.spec = spec
        self.store = store
        self.bounds = bounds  # the study's SLO bounds (`_slos`), fixed by its baseline

    def proposed(self, trial: Trial, description: str, config: EngineConfig) -> None:
        trial.set_user_attr(keys.DESCRIPTION, description)
        trial.set_user_attr(keys.CONFIG, to_yaml_dict(config))
        trial.set_user_attr(keys.ENV, config.env)

    def stage(self, trial: Trial, stage: str) -> None:
        """The stage of a staged (MoE) study the trial belongs to (`_stages.py`)."""
        trial.set_user_attr(keys.STAGE, stage)

    def predicted(self, trial: Trial, prediction: dict[str, Any]) -> None:
        """The engine model's prediction of the trial, made now, before it is launched."""
        trial.set_user_attr(keys.PREDICTION, {**prediction, "at": time.time()})

    def worker(self, trial: Trial, worker: Worker) -> None:
        """Who runs the trial (raises UpdateFinishedTrialError if it was settled meanwhile)."""
        trial.set_user_attr(keys.WORKER, worker.stored())

    def leased(self, trial: Trial, lease_env: dict[str, str], worker: Worker) -> None:
        """The trial runs on leased devices: the env that shows only them (kept apart from the
        config's env, which is what an export deploys), and its worker."""
        trial.set_user_attr(keys.LEASE_ENV, lease_env)
        trial.set_user_attr(keys.WORKER, worker.stored())

    def slot(self, trial: Trial, slot: int) -> None:
        trial.set_user_attr(keys.SLOT, slot)

    def skipped(self, study: optuna.Study, trial: Trial, verdict: Verdict) -> None:
        """A proposal the gate (or a twin found after claiming) kept from launching."""
        assert verdict.status is not None
        trial.set_user_attr(keys.STATUS, verdict.status)
        trial.set_user_attr(keys.REASON, verdict.reason)
        predicted = verdict.predicted
        values = constraint_values(
            predicted, self.bounds.values, self.spec.max_error_rate, verdict.status,
            self.spec.min_agreement,
        )  # fmt: skip
        for name, value in values.items():
            trial.set_constraint(name, value)
        study.tell(trial, objective_values(told_objectives(self.spec), predicted))

    def host_busy(self, study: optuna.Study, trial: Trial, verdict: Verdict) -> None:
        """A proposal that waited for memory other processes held, in vain: `environment`
        (the host, not the config), FAILED so that no sampler learns its region from it, and
        its config queued again, once, for a later moment."""
        trial.set_user_attr(keys.STATUS, TrialStatus.ENVIRONMENT)
        trial.set_user_attr(keys.REASON, verdict.reason)
        study.tell(trial, state=TrialState.FAIL)
        self.queue_again(study, trial)

    def measured(self, study: optuna.Study, trial: Trial, m: Measurement, trial_dir: Path) -> None:
        """Record a measured trial; if the store fails, say where the measurement is kept."""
        try:
            with storage_errors(self.store.url):
                self.tell(study, trial, m, trial_dir)
        except StorageError as exc:
            raise StudyError(
                f"trial {trial.number} was measured but could not be recorded ({exc}); its "
                f"measurement is kept in {trial_dir / layout.MEASUREMENT} and is recorded when "
                "the study is continued (run the same command again)"
            ) from exc

    def tell(self, study: optuna.Study, trial: Trial, m: Measurement, trial_dir: Path) -> None:
        if m.summary is not None and trial.user_attrs.get(keys.ROLE) == keys.ROLE_BASELINE:
            m = self._fix_relative_slos(study, trial, m)
            m = self._fix_reference(study, trial, m, trial_dir)
        trial.set_user_attr(keys.STATUS, m.status)
        trial.set_user_attr(keys.REASON, m.reason)
        trial.set_user_attr(keys.ENGINE, m.engine.stored())
        trial.set_user_attr(keys.DEVICE_S, m.device_s)
        trial.set_user_attr(keys.TRIAL_DIR, str(trial_dir))
        if m.summary is not None:
            trial.set_user_attr(keys.METRICS, flat_metrics(m))
            trial.set_user_attr(keys.MEASURED_AT, m.at_s if m.at_s is not None else time.time())
        if m.spread:
            trial.set_user_attr(keys.SPREAD, m.spread)
        if m.summary is not None and m.summary.intervals:
            trial.set_user_attr(keys.INTERVALS, stored_intervals(m.summary.intervals))
        if m.log_tail:
            trial.set_user_attr(keys.LOG_TAIL, m.log_tail[-4000:])
        constraints = constraint_values(
            m.summary, self.bounds.values, self.spec.max_error_rate, m.status,
            self.spec.min_agreement,
        )  # fmt: skip
        relative = [s for s in self.bounds.slos if s.relative and s.metric in constraints]
        if relative and m.summary is not None and self._runs_the_baseline(study, trial):
            # A bound relative to the baseline is the baseline's own value times its factor:
            # a run of the baseline's config is at 1x of it by definition, as the confirm step
            # pairs it (docs/metrics.md, "StudyBounds relative to the baseline").
            for slo in relative:
                value = m.summary.metric(slo.metric)
                ratio = slo.ratio(value, baseline=value)
                constraints[slo.metric] = 1.0 if ratio is None else ratio - 1.0
        for name, value in constraints.items():
            trial.set_constraint(name, value)
        study.tell(trial, objective_values(told_objectives(self.spec), m.summary))

    @staticmethod
    def _runs_the_baseline(study: optuna.Study, trial: Trial) -> bool:
        """Whether `trial` is the baseline or a re-measure of it."""
        if trial.user_attrs.get(keys.ROLE) == keys.ROLE_BASELINE:
            return True
        again = trial.user_attrs.get(keys.REMEASURE_OF)
        if again is None:
            return False
        first = study.get_trials(deepcopy=False)[int(again)]
        return first.user_attrs.get(keys.ROLE) == keys.ROLE_BASELINE

    def _fix_relative_slos(self, study: optuna.Study, trial: Trial, m: Measurement) -> Measurement:
        """The baseline fixes the study's baseline-relative bounds (see `_slos`); its own
        summary is then made again within them from the records it holds (goodput counts
        requests within every bound)."""
        if not self.bounds.relative_pending():
            return m
        assert m.summary is not None
        basis = self.bounds.fix(m.summary, trial.number)
        stored = StudyFacts.of(study).slo_basis
        write_study(study, slo_basis={**stored, **basis}, slos=dict(self.bounds.values))
        logger.info("baseline-relative SLOs fixed by trial %d: %s", trial.number, basis)
        return resummarized(m, self.bounds.values)

    def _fix_reference(
        self, study: optuna.Study, trial: Trial, m: Measurement, trial_dir: Path
    ) -> Measurement:
        """With --min-agreement, the baseline's greedy outputs become the reference (see
        `_slos`): it agrees with itself by definition, as its folder then says too."""
        if not self.bounds.reference_pending() or m.greedy is None or m.summary is None:
            return m
        write_study(study, agreement_reference=self.bounds.fix_reference(m.greedy, trial.number))
        itself = Agreement(1.0, 1.0, len(m.greedy))
        m = dataclasses.replace(m, agreement=itself, summary=with_agreement(m.summary, 1.0, 1.0))
        save_measurement(trial_dir, m)
        return m

    def interrupted(self, study: optuna.Study, trial: Trial, trial_dir: Path) -> None:
        """Ctrl-C or SIGTERM during the trial: FAILED, its folder kept."""
        trial.set_user_attr(keys.STATUS, TrialStatus.INTERRUPTED)
        trial.set_user_attr(keys.TRIAL_DIR, str(trial_dir))
        study.tell(trial, state=TrialState.FAIL)

    def give_back(self, study: optuna.Study, trial: Trial) -> None:
        """End a proposal that found the budget full (another worker took the last slot); a
        queued config (baseline, repair, retry) goes back in the queue for whoever runs next."""
        trial.set_user_attr(keys.STATUS, TrialStatus.UNUSED)
        trial.set_user_attr(keys.REASON, "the budget was filled by other workers first")
        study.tell(trial, state=TrialState.FAIL)
        if "fixed_params" in study._storage.get_trial_system_attrs(trial._trial_id):
            attrs = {k: v for k, v in trial.user_attrs.items() if k in _QUEUE_ATTRS}
            study.enqueue_trial(trial.params, user_attrs=attrs)

    def orphan_interrupted(self, trial: FrozenTrial) -> bool:
        """Mark an orphan (its worker is gone, nothing measured) interrupted. False: another
        worker settled it first."""
        storage = self.store.storage
        storage.set_trial_user_attr(trial._trial_id, keys.STATUS, TrialStatus.INTERRUPTED)
        return storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)

    def queue_again(self, study: optuna.Study, trial: Trial | FrozenTrial) -> None:
        """Queue the config of a trial that ended through no fault of its own (an interrupted
        orphan, a wait for memory in vain) again, once."""
        if not trial.user_attrs.get(keys.REQUEUED):
            attrs = {k: v for k, v in trial.user_attrs.items() if k in (keys.ROLE, keys.REPAIR_OF)}
            study.enqueue_trial(trial.params, user_attrs={**attrs, keys.REQUEUED: True})

    def queue_repair(self, study: optuna.Study, trial: Trial, space: SearchSpace) -> None:
        """Queue an OOM config one step back towards what fits (once: never a repair's)."""
        if trial.user_attrs.get(keys.ROLE) == keys.ROLE_REPAIR:
            return
        fits = [
            t.params
            for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if t.user_attrs.get(keys.STATUS) == TrialStatus.OK
        ]
        params = repair(space, trial.params, fits)
        if params is None:
            logger.info("trial %d ran out of memory and no knob can be turned down", trial.number)
            return
        study.enqueue_trial(
            params, user_attrs={keys.ROLE: keys.ROLE_REPAIR, keys.REPAIR_OF: trial.number}
        )


def flat_metrics(m: Measurement) -> dict[str, float | None]:
    """The measurement's metrics as stored: a value that is not finite (a percentile of no
    requests) is null, never a placeholder number."""
    assert m.summary is not None
    unset = {
        name
        for name in OPTIONAL
        if getattr(m.summary, name) is None  # not searched, not measured, not counted
    }
    out = {name: m.summary.metric(name) for name in METRIC_NAMES if name not in unset}
    out["completed"] = float(m.summary.completed)
    out["duration_s"] = m.summary.duration_s
    return {k: (v if math.isfinite(v) else None) for k, v in out.items()}
