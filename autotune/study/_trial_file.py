"""A trial folder as its own record: `trial.json`, written for every trial before its engine
starts, and read back by `tune --reingest` (`_reingest`) when a study's database is lost.

It says what the trial runs: its number, its parameter values, where it came from (baseline,
re-measure, repair, warm start), what it was launched with, and the study's settings that make
trials comparable (`Harness.experiment`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from optuna.trial import Trial

from autotune import store as keys
from autotune.search import FIXED
from autotune.vocab import layout

# The user attributes a trial folder keeps: its origin, and what it was launched with.
KEPT = (
    keys.ROLE,
    keys.REMEASURE_OF,
    keys.REPAIR_OF,
    keys.REQUEUED,
    keys.WARM_FROM,
    keys.DESCRIPTION,
    keys.CONFIG,
    keys.ENV,
    keys.LEASE_ENV,
    keys.WORKER,
)


def write_trial_record(trial_dir: Path, trial: Trial, experiment: dict[str, Any]) -> None:
    """Write `trial.json` (see the module's docstring), atomically (a rename)."""
    attrs = trial.user_attrs
    system = trial.study._storage.get_trial_system_attrs(trial._trial_id)
    data = {
        "number": trial.number,
        "params": trial.params,
        "queued": FIXED in system,  # enqueued (baseline, re-measure, ...), not proposed
        "user_attrs": {k: attrs[k] for k in KEPT if k in attrs},
        "experiment": experiment,
    }
    trial_dir.mkdir(parents=True, exist_ok=True)
    tmp = trial_dir / (layout.TRIAL_RECORD + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    tmp.replace(trial_dir / layout.TRIAL_RECORD)


def used_folders(study_dir: Path) -> dict[int, Path]:
    """Trial number -> folder, for the trial folders in `study_dir` that hold anything."""
    found: dict[int, Path] = {}
    for path in study_dir.glob(f"{layout.TRIAL_PREFIX}*"):
        number = path.name[len(layout.TRIAL_PREFIX) :]
        if number.isdigit() and path.is_dir() and any(path.iterdir()):
            found[int(number)] = path
    return found


@dataclass(frozen=True)
class TrialFolder:
    """A trial folder found in a study folder, and its `trial.json` (None: none readable)."""

    path: Path
    record: dict[str, Any] | None


def read_trial_record(folder: Path) -> dict[str, Any] | None:
    """A folder's `trial.json`, or None where it is missing, unreadable or not a record."""
    try:
        data = json.loads((folder / layout.TRIAL_RECORD).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("params"), dict):
        return None
    data.setdefault("user_attrs", {})
    return data
