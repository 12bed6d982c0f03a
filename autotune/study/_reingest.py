"""A lost database rebuilt from the trial folders.

A trial folder holds everything the store would (its `trial.json`, `_trial_file`, beside
`measurement.json` and the records it was summarized from): when a study's database is lost,
`tune --reingest` records each folder's measurement in a new study, as the trial of the same
number, told to Optuna as the trial was. A folder that cannot be (no `trial.json`, no
measurement, a trial interrupted) keeps its number as an interrupted trial, so that no new
trial writes into it. Folders measured with other settings are refused as a whole: mixing them
would compare trials that are not comparable.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import Trial, TrialState, create_trial

from autotune import store as keys
from autotune.measure import Measurement, load_measurement
from autotune.search import FIXED
from autotune.store import StudyStore, TrialSlots
from autotune.study._errors import StudyMismatch
from autotune.study._harness import Harness
from autotune.study._record import Recorder
from autotune.study._trial_file import KEPT, TrialFolder, read_trial_record
from autotune.vocab import layout
from autotune.vocab.status import TrialStatus

logger = logging.getLogger(__name__)


@dataclass
class Reingested:
    """What `reingest` recorded: trials measured (ok or failed as the engine reported) and
    folders kept as interrupted trials."""

    recorded: int = 0
    kept: int = 0
    baseline: bool = False  # the baseline's measurement was among them


def check_reingest(harness: Harness, folders: dict[int, Path]) -> dict[int, TrialFolder]:
    """The folders with their records, read once. Raises StudyMismatch when one was measured
    with other settings than the spec's (checked before the new study is created)."""
    found = {n: TrialFolder(path, read_trial_record(path)) for n, path in sorted(folders.items())}
    for folder in found.values():
        record = folder.record
        changed = harness.differs_from(record.get("experiment") or {}) if record else None
        if changed is not None:
            raise StudyMismatch(
                f"--reingest: {folder.path} was measured with {changed}: give the settings "
                "it was run with"
            )
    return found


def reingest(
    harness: Harness, store: StudyStore, study: optuna.Study, folders: dict[int, TrialFolder]
) -> Reingested:
    """Record the measurements of `folders` in the new, empty `study`, each as the trial of
    its number (see the module's docstring)."""
    recorder = Recorder(harness.spec, store, harness.bounds)
    slots = store.slots(study)
    done = Reingested()
    for number in range(max(folders) + 1):
        folder = folders.get(number)
        record = folder.record if folder is not None else None
        # Loaded one by one: a baseline recorded first fixes its relative bounds.
        saved = load_measurement(folder.path, harness.bounds.values) if folder and record else None
        why = _not_recordable(harness, folder, record, saved)
        if why is None:
            assert folder is not None and record is not None and saved is not None
            if _record(study, recorder, slots, harness, number, folder.path, record, saved):
                done.recorded += 1
                role = record["user_attrs"].get(keys.ROLE)
                done.baseline = done.baseline or (role == keys.ROLE_BASELINE and saved.ok)
                continue
            why = "its parameters are not this space's"
        _keep(study, folder, record, why)
        done.kept += 1
    logger.warning(
        "re-ingested %d measured trials from %s (%d folders kept as interrupted)",
        done.recorded,
        harness.spec.study_dir,
        done.kept,
    )
    return done


def _not_recordable(
    harness: Harness,
    folder: TrialFolder | None,
    record: dict[str, Any] | None,
    saved: Measurement | None,
) -> str | None:
    """Why trial `folder` cannot be recorded (None: it can)."""
    if folder is None:
        return "no folder: a proposal never launched, lost with the study's database"
    if record is None:
        return f"its folder has no {layout.TRIAL_RECORD} (an older version's, or not started)"
    if saved is None:
        return "its folder has no complete measurement"
    if saved.status == TrialStatus.INTERRUPTED:
        return "it was interrupted"
    if harness.bounds.pending() and record["user_attrs"].get(keys.ROLE) != keys.ROLE_BASELINE:
        return "no baseline was re-ingested to fix its bounds relative to it"
    return None


def _record(
    study: optuna.Study,
    recorder: Recorder,
    slots: TrialSlots,
    harness: Harness,
    number: int,
    folder: Path,
    record: dict[str, Any],
    saved: Measurement,
) -> bool:
    """Record `folder`'s measurement as trial `number`: created running with its parameters
    and origin (queued or proposed, as the design counts them: `_design.design_index`), then
    told as a trial is. False when its parameters are not points of this space any more."""
    params, distributions = record["params"], harness.space.distributions()
    try:
        frozen = create_trial(
            state=TrialState.RUNNING,
            params=params,
            distributions={name: distributions[name] for name in params},
            user_attrs={k: v for k, v in record["user_attrs"].items() if k in KEPT},
        )
    except (KeyError, ValueError):
        return False
    trial_id = study._storage.create_new_trial(study._study_id, template_trial=frozen)
    trial = Trial(study, trial_id)
    if trial.number != number:  # the study was not empty: never tell a trial another's runs
        raise RuntimeError(f"re-ingest made trial {trial.number} for folder {folder}")
    if record.get("queued"):
        study._storage.set_trial_system_attr(trial_id, FIXED, params)
    trial.set_user_attr(keys.REINGESTED, True)
    slot = slots.claim(number, harness.spec.trials)  # a measured trial holds one for good
    if slot is not None:
        recorder.slot(trial, slot)
    if saved.at_s is None:  # when its benchmark ended: when its outcome was written
        saved.at_s = os.stat(folder / layout.MEASUREMENT).st_mtime
    recorder.tell(study, trial, saved, folder)
    return True


def _keep(
    study: optuna.Study, folder: TrialFolder | None, record: dict[str, Any] | None, why: str
) -> None:
    """Hold the next trial number as an interrupted trial, so that no new trial writes into
    its folder (added in number order to a new study: the number is the one asked for)."""
    attrs: dict[str, Any] = {
        keys.STATUS: TrialStatus.INTERRUPTED,
        keys.REASON: f"lost with the study's database; not re-ingested: {why}",
        keys.REINGESTED: True,
    }
    if folder is not None:
        attrs[keys.TRIAL_DIR] = str(folder.path)
    queued = {FIXED: record["params"]} if record is not None and record.get("queued") else None
    study.add_trial(create_trial(state=TrialState.FAIL, user_attrs=attrs, system_attrs=queued))
