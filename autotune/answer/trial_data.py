"""A study's trials as plain data: the stable columns of `show --format json|csv`, and the
one-line summary `autotune studies` prints.

Pure functions over stored trials (`TrialRecord`) and study attributes; nothing here reads a
store or prints. Every value is a JSON type: a metric that is not finite (a latency with no
sample) is None, never NaN or a placeholder. The column names are documented in
docs/metrics.md ("Trial data columns").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autotune.answer.export import default_choice
from autotune.answer.selection import pareto_front, study_objectives
from autotune.bench import METRIC_NAMES
from autotune.store import StudyFacts, TrialRecord
from autotune.vocab.status import FAILURE_KINDS

# The metrics every row names (None where a trial has no value): what the store records of a
# measurement (`flat_metrics`), the counts beside them included.
METRIC_COLUMNS: tuple[str, ...] = (*METRIC_NAMES, "completed", "duration_s")
# The scalar columns, in the order a CSV file has them; then `param.NAME`, `metric.NAME`,
# `spread.NAME` (JSON: the dicts `params`, `metrics`, `spread`).
COLUMNS: tuple[str, ...] = (
    "number",
    "state",
    "status",
    "failure_kind",
    "reason",
    "role",
    "stage",
    "description",
    "feasible",
    "on_front",
    "device_s",
    "host",
    "devices",
)
NESTED: tuple[str, ...] = ("params", "metrics", "spread")
PREFIXES = {"params": "param.", "metrics": "metric.", "spread": "spread."}


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def trial_row(t: TrialRecord, on_front: bool = False) -> dict[str, Any]:
    """One trial as a JSON-ready dict: the COLUMNS, then `params`, `metrics` (every name of
    METRIC_COLUMNS, None where not measured, then any other stored one) and `spread`."""
    metrics = {name: _finite(t.metrics.get(name)) for name in METRIC_COLUMNS}
    metrics.update({k: _finite(v) for k, v in t.metrics.items() if k not in metrics})
    return {
        "number": t.number,
        "state": t.state,
        "status": t.status,
        "failure_kind": t.status if t.status in FAILURE_KINDS else None,
        "reason": t.reason,
        "role": t.role,
        "stage": t.stage,
        "description": t.description,
        "feasible": t.feasible,
        "on_front": on_front,
        "device_s": _finite(t.device_s),
        "host": t.worker.host,
        "devices": t.worker.devices,
        "params": {k: _finite(v) for k, v in t.params.items()},
        "metrics": metrics,
        "spread": {k: _finite(v) for k, v in t.spread.items()},
    }


def trial_rows(records: Sequence[TrialRecord], facts: StudyFacts) -> list[dict[str, Any]]:
    """Every trial of a study as `trial_row` dicts, in trial order; `on_front` is membership
    of the feasible Pareto front of the study's objectives."""
    front = {t.number for t in pareto_front(records, study_objectives(facts))}
    return [trial_row(t, t.number in front) for t in sorted(records, key=lambda t: t.number)]


def flat_columns(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The CSV header of `rows`: COLUMNS, then `param.NAME` (in the order trials name them),
    `metric.NAME` (METRIC_COLUMNS first) and `spread.NAME`."""
    columns = list(COLUMNS)
    for key in NESTED:
        names: dict[str, None] = {}
        for row in rows:
            names.update(dict.fromkeys(row[key]))
        columns.extend(PREFIXES[key] + name for name in names)
    return columns


def flat_row(row: dict[str, Any]) -> dict[str, Any]:
    """A `trial_row` with its dicts spread into prefixed columns (`metric.p99_ttft_ms`)."""
    flat = {k: v for k, v in row.items() if k not in NESTED}
    for key in NESTED:
        flat.update({PREFIXES[key] + name: value for name, value in row[key].items()})
    return flat


@dataclass(frozen=True)
class StudySummary:
    """A study in one line: how many trials were measured of how many, the throughput of the
    trial `export` would write (the confirmed winner, else the front's pick), and when it was
    created."""

    name: str
    measured: int
    total: int
    best_throughput: float | None
    best_trial: int | None
    created: str


def study_summary(name: str, records: Sequence[TrialRecord], facts: StudyFacts) -> StudySummary:
    best = default_choice(records, facts)
    return StudySummary(
        name=name,
        measured=sum(t.measured for t in records),
        total=len(records),
        best_throughput=best.metric("output_throughput") if best else None,
        best_trial=best.number if best else None,
        created=facts.created or "",
    )
