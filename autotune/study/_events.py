"""Progress events the runner emits; the CLI renders them (nothing here prints)."""

from __future__ import annotations

from dataclasses import dataclass

import optuna

from autotune.measure import Measurement


@dataclass(frozen=True)
class TrialStarted:
    number: int
    index: int
    total: int
    description: str


@dataclass(frozen=True)
class TrialFinished:
    number: int
    index: int
    total: int
    measurement: Measurement
    study: optuna.Study


@dataclass(frozen=True)
class TrialSkipped:
    number: int
    status: str
    reason: str


Event = TrialStarted | TrialFinished | TrialSkipped
