"""A trial's outcome (`Measurement`) and how it is kept: `measurement.json` beside the trial's
request records, written before anyone records the trial and read back by a tuner that resumes
or re-ingests it; and the one place a trial's summary is made from its runs' records
(`summary_of`), for a fresh measurement, a folder read back, or bounds fixed after the run.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.bench import (
    RequestRecord,
    Summary,
    pooled_summary,
    read_records,
    with_agreement,
    with_cost,
    with_intervals,
    with_rates,
    write_records,
)
from autotune.measure._agreement import Agreement, Output, read_outputs
from autotune.store import TrialFacts
from autotune.vocab import layout
from autotune.vocab.status import TrialStatus


@dataclass
class Measurement:
    """The outcome of one trial on the device."""

    status: str
    reason: str = ""
    summary: Summary | None = None
    engine: TrialFacts = field(default_factory=TrialFacts)
    device_s: float = 0.0
    log_tail: str = ""
    teardown_error: str | None = None
    spread: dict[str, float] = field(default_factory=dict)  # half-range over repeated runs
    at_s: float | None = None  # when the benchmark ended (epoch s; None: when it is recorded)
    # The records of the runs the summary is of (one, or `repeats`; a pruned run's finished
    # requests), kept in memory so that new bounds re-summarize them without a read
    # (`resummarized`); on disk they are `requests.jsonl` / `runs/`.
    runs: list[list[RequestRecord]] = field(default_factory=list, repr=False, compare=False)
    # With --min-agreement: the greedy outputs (`greedy.json`) and their agreement with the
    # baseline's (None for the baseline until it is recorded as the reference).
    greedy: list[Output] | None = field(default=None, repr=False, compare=False)
    agreement: Agreement | None = None

    @property
    def ok(self) -> bool:
        return self.summary is not None and self.status == TrialStatus.OK


def _with_peak(summary: Summary, engine: TrialFacts) -> Summary:
    peak = engine.peak_memory_bytes
    if peak is None:
        return summary
    return summary.model_copy(update={"peak_memory_gib": round(peak / 2**30, 3)})


def cut_short(record: RequestRecord) -> bool:
    return record.error is not None and record.error.startswith("aborted")


def with_counters(summary: Summary, engine: TrialFacts) -> Summary:
    """The summary with the rates of what the engine counted (`engine.counters`)."""
    return with_rates(summary, engine.counters)


def _with_capacity(summary: Summary, capacity: dict[str, Any]) -> Summary:
    return summary.model_copy(update={"capacity_rps": float(capacity.get("rate") or 0.0)})


def write_trial_records(trial_dir: Path, records: Sequence[RequestRecord]) -> None:
    write_records(trial_dir / layout.REQUESTS, records)


def save_measurement(trial_dir: Path, m: Measurement) -> None:
    """Write the outcome next to the trial's log, atomically (a rename)."""
    data = {
        "status": m.status,
        "reason": m.reason,
        "engine": m.engine.stored(),
        "device_s": m.device_s,
        "log_tail": m.log_tail,
        "teardown_error": m.teardown_error,
        "spread": m.spread,
        "agreement": m.agreement.to_dict() if m.agreement is not None else None,
    }
    trial_dir.mkdir(parents=True, exist_ok=True)
    tmp = trial_dir / (layout.MEASUREMENT + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(trial_dir / layout.MEASUREMENT)


def load_measurement(trial_dir: Path, slos: Mapping[str, float]) -> Measurement | None:
    """A trial's saved outcome, its summary rebuilt from `requests.jsonl`; None if absent."""
    try:
        data = json.loads((trial_dir / layout.MEASUREMENT).read_text())
    except (OSError, ValueError):
        return None
    m = Measurement(
        status=str(data.get("status", TrialStatus.CRASH)),
        reason=str(data.get("reason", "")),
        engine=TrialFacts.read(data.get("engine")),
        device_s=float(data.get("device_s") or 0.0),
        log_tail=str(data.get("log_tail") or ""),
        teardown_error=data.get("teardown_error"),
        spread=dict(data.get("spread") or {}),
        greedy=read_outputs(trial_dir),
        agreement=Agreement.read(data.get("agreement")),
    )
    if m.status in (TrialStatus.OK, TrialStatus.PRUNED):
        try:
            m.runs = _saved_runs(trial_dir, m)
        except (OSError, ValueError):
            return None
        m.summary = summary_of(m, slos)
    return m


def _saved_runs(trial_dir: Path, m: Measurement) -> list[list[RequestRecord]]:
    """The records `measure` kept of the runs its summary is of."""
    if m.status == TrialStatus.PRUNED:
        return [[r for r in read_records(trial_dir / layout.REQUESTS) if not cut_short(r)]]
    repeats = m.engine.repeats or 0
    if repeats > 1:
        folder = trial_dir / layout.RUNS_DIR
        return [read_records(folder / layout.run_records(k)) for k in range(repeats)]
    return [read_records(trial_dir / layout.REQUESTS)]


def summary_of(m: Measurement, slos: Mapping[str, float]) -> Summary:
    """The trial's summary, the one place it is made: its runs' records summarized within
    `slos` (a run's batches pooled, `pooled_summary`), with each metric's 90% interval (not
    for a capacity search, whose levels ran at different rates), then what its engine facts
    add: the capacity
    search's rate, the offline batch's peak memory, the rates of the engine's counters, the
    cost per million tokens. `measure` and `load_measurement` (a folder read back) both end
    here; so does `resummarized`, for bounds fixed after the run."""
    summary = pooled_summary(m.runs or [[]], slos)
    if m.engine.capacity is not None:
        summary = _with_capacity(summary, m.engine.capacity)
    elif m.runs:
        summary = with_intervals(summary, m.runs)
    summary = with_counters(_with_peak(summary, m.engine), m.engine)
    if m.engine.cost is not None:
        summary = with_cost(summary, m.engine.cost.per_device_hour, m.engine.cost.devices)
    if m.agreement is not None:
        summary = with_agreement(summary, m.agreement.exact, m.agreement.tokens)
    return summary


def resummarized(m: Measurement, slos: Mapping[str, float]) -> Measurement:
    """`m` with its summary made again within `slos` from the records it holds (goodput
    counts the requests within every bound); `m` itself where it holds none (a stand-in)."""
    if m.summary is None or not m.runs:
        return m
    return dataclasses.replace(m, summary=summary_of(m, slos))
