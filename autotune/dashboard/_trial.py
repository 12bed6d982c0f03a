"""One trial's view: config, export, metrics, latency distributions, engine log, profile."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from pydantic import Field

from autotune.answer.export import render_export
from autotune.bench import read_records
from autotune.dashboard import _charts as charts
from autotune.dashboard._catalog import Catalog
from autotune.dashboard._data import (
    View,
    export_name,
    read_study,
    signature,
)
from autotune.dashboard._labels import LATENCIES, STATS, failure_kind, metric_label, outcome
from autotune.predict import REPORTED
from autotune.store import TrialRecord
from autotune.vocab import layout
from autotune.vocab.numbers import interval_text

LOG_BYTES = 64 * 1024  # the end of engine.log that the page shows
OTHER_METRICS = (
    "output_throughput",
    "total_throughput",
    "request_throughput",
    "goodput",
    "capacity_rps",
    "peak_memory_gib",
    "completed",
    "errors",
    "error_rate",
    "duration_s",
)


class UnknownTrial(LookupError):
    """No trial of that number in the study."""


class LatencyRow(View):
    latency: str
    values: dict[str, float | None]  # stat -> ms
    spread_p99: float | None = None
    interval_p99: str = ""  # the p99's 90% interval, as `show` prints it


class Profile(View):
    """What `autotune profile` wrote for the trial (`profiles/trial-NNNN/summary.json`)."""

    trace: str | None = None  # a file inside the profile folder, downloadable
    top_ops: list[dict[str, Any]] = Field(default_factory=list)
    phases: dict[str, float] | None = None
    note: str = ""


class TrialView(View):
    """Everything the trial page shows."""

    study: str
    number: int
    role: str = ""
    state: str
    status: str
    outcome: str
    kind: str = ""
    reason: str = ""
    description: str = ""
    measured: bool
    feasible: bool
    params: dict[str, Any] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    latencies: list[LatencyRow] = Field(default_factory=list)
    others: list[list[Any]] = Field(default_factory=list)  # [label, value]
    constraints: dict[str, float] = Field(default_factory=dict)
    engine: dict[str, Any] = Field(default_factory=dict)
    device_s: float | None = None
    trial_dir: str | None = None
    repair_of: int | None = None
    has_config: bool
    export_name: str
    export_yaml: str
    export_env: str | None = None
    serve_command: str
    log: str = ""
    log_source: str = ""
    records_note: str = ""
    # The engine model's prediction, made before the trial ran: [metric, low, mid, high,
    # measured] rows (autotune.predict).
    predicted: list[list[Any]] = Field(default_factory=list)
    figures: dict[str, Any] = Field(default_factory=dict)
    profile: Profile | None = None
    signature: str = ""


def find_trial(records: list[TrialRecord], number: int) -> TrialRecord:
    for t in records:
        if t.number == number:
            return t
    raise UnknownTrial(f"no trial {number} in this study (it has {len(records)} trials)")


def trial_view(catalog: Catalog, name: str, number: int) -> TrialView:
    _, records, facts = read_study(catalog.store(name), name)
    t = find_trial(records, number)
    text = render_export(name, t, facts, export_name(name, number), f"trial {number}")
    log, source = engine_log_tail(t)
    figures, note = latency_figures(t)
    return TrialView(
        study=name,
        number=t.number,
        role=t.role,
        state=t.state,
        status=t.status,
        outcome=outcome(t),
        kind=failure_kind(t),
        reason=t.reason,
        description=t.description,
        measured=t.measured,
        feasible=t.feasible,
        params=t.params,
        env=t.env,
        latencies=latency_rows(t),
        others=[[metric_label(m), t.metrics[m]] for m in OTHER_METRICS if m in t.metrics],
        constraints=t.constraints,
        engine=t.engine.stored(),
        device_s=t.device_s,
        trial_dir=t.trial_dir,
        repair_of=t.repair_of,
        has_config=bool(t.config),
        export_name=export_name(name, number),
        export_yaml=text.yaml,
        export_env=text.env,
        serve_command=text.command,
        log=log,
        log_source=source,
        records_note=note,
        predicted=[
            [name, low, mid, high, t.metric(name) if t.measured else None]
            for name, (low, mid, high) in (t.prediction.get("metrics") or {}).items()
            if name in REPORTED
        ],
        figures=figures,
        profile=read_profile(trial_profile_dir(catalog, name, t)),
        signature=signature(records, facts),
    )


def export_text(catalog: Catalog, name: str, number: int) -> tuple[str, str, str | None]:
    """(file name, YAML, env file text) exactly as `autotune export --trial N -o NAME` writes;
    UnknownTrial where export would refuse (no such trial, or no config yet)."""
    _, records, facts = read_study(catalog.store(name), name)
    t = find_trial(records, number)
    if not t.config:
        raise UnknownTrial(f"trial {number} has no engine config to export")
    filename = export_name(name, number)
    text = render_export(name, t, facts, filename, f"trial {number}")
    return filename, text.yaml, text.env


def latency_rows(t: TrialRecord) -> list[LatencyRow]:
    rows = []
    for latency in LATENCIES:
        values = {s: t.metrics.get(f"{s}_{latency}_ms") for s in STATS}
        if any(v is not None for v in values.values()):
            name = f"p99_{latency}_ms"
            interval = interval_text(t.metric(name), t.intervals.get(name), ",.2f")
            rows.append(
                LatencyRow(
                    latency=latency.upper(),
                    values=values,
                    spread_p99=t.spread.get(name),
                    interval_p99=interval,
                )
            )
    return rows


def engine_log_tail(t: TrialRecord) -> tuple[str, str]:
    """The end of the trial's engine.log, else the tail stored with the trial."""
    if t.trial_dir:
        path = Path(t.trial_dir) / layout.ENGINE_LOG
        try:
            with path.open("rb") as log:
                size = log.seek(0, 2)
                log.seek(max(0, size - LOG_BYTES))
                data = log.read()
            text = data.decode("utf-8", errors="replace")
            if size > LOG_BYTES:
                text = text.split("\n", 1)[-1]
            return text, f"{path} (last {min(size, LOG_BYTES):,} bytes)"
        except OSError:
            pass
    if t.log_tail:
        return t.log_tail, "the tail stored with the trial (engine.log is not readable here)"
    return "", ""


def latency_figures(t: TrialRecord) -> tuple[dict[str, Any], str]:
    """TTFT and TPOT histograms from the trial's requests.jsonl, or why there are none."""
    if not t.trial_dir:
        return {}, "the trial has no folder"
    path = Path(t.trial_dir) / layout.REQUESTS
    try:
        records = [r for r in read_records(path) if r.ok]
    except FileNotFoundError:
        return {}, f"no per-request records at {path} (not measured, or not on this machine)"
    except (OSError, ValueError) as exc:
        return {}, f"per-request records unreadable: {exc}"
    ttft = [r.ttft * 1000 for r in records if r.ttft is not None]
    tpot = [r.tpot * 1000 for r in records if r.tpot is not None]
    figures = {
        "ttft": charts.histogram([v for v in ttft if math.isfinite(v)], "TTFT", "TTFT (ms)"),
        "tpot": charts.histogram([v for v in tpot if math.isfinite(v)], "TPOT", "TPOT (ms)"),
    }
    return figures, f"{len(records)} successful requests from {path}"


def trial_profile_dir(catalog: Catalog, name: str, t: TrialRecord) -> Path | None:
    """`ROOT/STUDY/profiles/trial-NNNN`, or the same beside the trial's own folder."""
    leaf = Path(layout.PROFILES_DIR) / layout.trial_name(t.number)
    candidates = [catalog.study_dir(name) / leaf]
    if t.trial_dir:
        candidates.append(Path(t.trial_dir).parent / leaf)
    return next((c for c in candidates if (c / layout.PROFILE_SUMMARY).is_file()), None)


def read_profile(folder: Path | None) -> Profile | None:
    if folder is None:
        return None
    try:
        data = json.loads((folder / layout.PROFILE_SUMMARY).read_text())
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        ops = [
            {
                "name": str(op.get("name", "?")),
                "self_ms": float(op.get("self_ms", math.nan)),
                "share": float(op.get("share", math.nan)),
            }
            for op in data.get("top_ops") or []
            if isinstance(op, dict)
        ]
        phases = data.get("phases")
        phases = {k: float(v) for k, v in phases.items()} if isinstance(phases, dict) else None
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        return Profile(note=f"{folder / layout.PROFILE_SUMMARY} is unreadable: {exc}")
    trace = data.get("trace")
    ok = isinstance(trace, str) and profile_file(folder, trace) is not None
    note = "" if ok or not trace else f"trace file {trace!r} is not in {folder}"
    return Profile(trace=trace if ok else None, top_ops=ops, phases=phases, note=note)


def profile_file(folder: Path, name: str) -> Path | None:
    """The file `name` directly inside `folder`, or None (never a path outside it)."""
    if not name or "/" in name or "\\" in name or name in (".", ".."):
        return None
    path = (folder / name).resolve()
    if path.parent != folder.resolve() or not path.is_file():
        return None
    return path


def profile_download(catalog: Catalog, name: str, number: int, file: str) -> Path | None:
    """The profile file to send for `/studies/NAME/trials/N/profile/FILE`, if allowed."""
    _, records, _ = read_study(catalog.store(name), name)
    folder = trial_profile_dir(catalog, name, find_trial(records, number))
    return profile_file(folder, file) if folder is not None else None
