"""Orphans: trials left RUNNING by a worker that is gone (a killed tuner, a dead machine).

A trial is orphaned when its worker's process on this host is gone, when its heartbeat is
older than the store's `stale_after_s`, or when it has had no worker for as long (left by an
older version). On this host its engine, if still alive, is ended, and a trial whose
measurement reached its folder is recorded from there (it was measured; only the store never
heard of it). Any other is marked interrupted, gives its slot back and is queued again, once.
Two workers settling one trial: the first wins, the second skips it.
"""

from __future__ import annotations

import datetime as dt
import logging

import optuna
from optuna.trial import FrozenTrial, Trial, TrialState

from autotune import store as keys
from autotune.engine import reap_stale_engine
from autotune.measure import load_measurement
from autotune.store import StudyStore, TrialSlots, Worker
from autotune.study._harness import Harness
from autotune.study._record import Recorder
from autotune.study._worker import is_dead_here, is_here
from autotune.vocab import layout

logger = logging.getLogger(__name__)


def settle_orphans(
    study: optuna.Study,
    harness: Harness,
    store: StudyStore,
    slots: TrialSlots,
    recorder: Recorder,
) -> None:
    """Settle every orphaned trial of `study` (see the module's docstring)."""
    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    if not running:
        return
    stale = store.stale_trial_ids(study)
    for trial in running:
        stored = trial.user_attrs.get(keys.WORKER)
        worker = None if stored is None else Worker.read(stored)
        if worker is None:
            # Asked an instant ago by a worker about to record itself, or left by an older
            # version: only the second is old.
            started = trial.datetime_start or dt.datetime.now()
            if (dt.datetime.now() - started).total_seconds() < store.stale_after_s:
                continue
        elif trial._trial_id not in stale and not is_dead_here(worker, harness.machine.host):
            continue
        local = worker is None or is_here(worker, harness.machine.host)
        try:
            _settle(study, trial, harness, slots, recorder, local)
        except optuna.exceptions.UpdateFinishedTrialError:
            continue  # settled by another worker meanwhile


def _settle(
    study: optuna.Study,
    trial: FrozenTrial,
    harness: Harness,
    slots: TrialSlots,
    recorder: Recorder,
    local: bool,
) -> None:
    trial_dir = layout.trial_dir(harness.spec.study_dir, trial.number)
    if local:
        reap_stale_engine(trial_dir)
        saved = load_measurement(trial_dir, harness.bounds.values)
        if saved is not None:
            logger.warning("recording trial %d from %s", trial.number, trial_dir)
            recorder.tell(study, Trial(study, trial._trial_id), saved, trial_dir)
            return
    logger.warning("trial %d was left running by a worker that is gone", trial.number)
    if not recorder.orphan_interrupted(trial):
        return
    slots.release(trial.number)
    recorder.queue_again(study, trial)
