"""`autotune.answer.trial_data`: every trial as JSON-ready rows, their CSV columns, a study's
line."""

from __future__ import annotations

import json
import math
from typing import Any

from autotune.answer.trial_data import (
    COLUMNS,
    METRIC_COLUMNS,
    flat_columns,
    flat_row,
    study_summary,
    trial_rows,
)
from autotune.bench import METRIC_NAMES
from autotune.store import StudyFacts, TrialRecord

ATTRS = StudyFacts.read(
    {
        "objectives": [
            {"metric": "output_throughput", "direction": "maximize"},
            {"metric": "p99_ttft_ms", "direction": "minimize"},
        ],
        "created": "2026-12-01T10:20:30+00:00",
    }
)


def measured(number: int, tps: float, ttft: float, **kw: Any) -> TrialRecord:
    metrics = {"output_throughput": tps, "p99_ttft_ms": ttft, "p99_tpot_ms": math.inf}
    return TrialRecord(
        number=number,
        state="complete",
        status="ok",
        metrics=metrics,
        constraints={"p99_ttft_ms": ttft - 100.0},
        params={"max_num_seqs": 8 * (number + 1), "enforce_eager": True},
        device_s=12.5,
        worker={"host": "node-a", "pid": 7, "devices": "0,1"},
        spread={"output_throughput": 3.0},
        **kw,
    )


def records() -> list[TrialRecord]:
    return [
        measured(0, 1000.0, 50.0, role="baseline"),
        measured(1, 2000.0, 40.0),  # dominates the baseline
        measured(2, 3000.0, 150.0),  # misses the TTFT SLO: not feasible, not on the front
        TrialRecord(
            number=3,
            state="complete",
            status="oom",
            reason="CUDA out of memory",
            params={"max_num_seqs": 512, "enforce_eager": False},
            device_s=4.0,
        ),
        TrialRecord(number=4, state="running", status="running", params={"kv_cache_mib": 512}),
    ]


def test_every_trial_has_every_column_and_strict_json() -> None:
    rows = trial_rows(list(reversed(records())), ATTRS)
    assert [r["number"] for r in rows] == [0, 1, 2, 3, 4]
    for row in rows:
        assert list(row)[: len(COLUMNS)] == list(COLUMNS)
        assert list(row["metrics"])[: len(METRIC_COLUMNS)] == list(METRIC_COLUMNS)
    text = json.dumps(rows, allow_nan=False)  # raises on NaN / inf
    assert json.loads(text) == rows


def test_the_values_of_a_row() -> None:
    rows = {r["number"]: r for r in trial_rows(records(), ATTRS)}
    best = rows[1]
    assert best["state"] == "complete" and best["status"] == "ok"
    assert best["failure_kind"] is None and best["role"] == ""
    assert best["feasible"] is True and best["on_front"] is True
    assert best["params"] == {"max_num_seqs": 16, "enforce_eager": True}
    assert best["metrics"]["output_throughput"] == 2000.0
    assert best["metrics"]["p99_tpot_ms"] is None  # inf: not a JSON number
    assert best["metrics"]["p50_itl_ms"] is None  # not stored
    assert set(METRIC_NAMES) <= set(best["metrics"])
    assert best["spread"] == {"output_throughput": 3.0}
    assert (best["device_s"], best["host"], best["devices"]) == (12.5, "node-a", "0,1")
    assert rows[0]["role"] == "baseline" and rows[0]["on_front"] is False  # dominated
    assert rows[2]["feasible"] is False and rows[2]["on_front"] is False
    oom = rows[3]
    assert (oom["failure_kind"], oom["reason"]) == ("oom", "CUDA out of memory")
    assert oom["metrics"]["output_throughput"] is None and oom["host"] is None
    assert rows[4]["state"] == "running" and rows[4]["failure_kind"] is None


def test_flat_columns_and_rows_for_csv() -> None:
    rows = trial_rows(records(), ATTRS)
    columns = flat_columns(rows)
    assert columns[: len(COLUMNS)] == list(COLUMNS)
    params = [c for c in columns if c.startswith("param.")]
    assert params == ["param.max_num_seqs", "param.enforce_eager", "param.kv_cache_mib"]
    metrics = [c for c in columns if c.startswith("metric.")]
    assert metrics == [f"metric.{m}" for m in METRIC_COLUMNS]
    assert [c for c in columns if c.startswith("spread.")] == ["spread.output_throughput"]
    flat = flat_row(rows[1])
    assert set(flat) <= set(columns)
    assert flat["metric.output_throughput"] == 2000.0 and flat["param.max_num_seqs"] == 16
    assert "metrics" not in flat and "params" not in flat


def test_a_study_summary() -> None:
    line = study_summary("demo", records(), ATTRS)
    assert (line.name, line.measured, line.total) == ("demo", 3, 5)
    assert (line.best_throughput, line.best_trial) == (2000.0, 1)  # trial 2 misses its SLO
    assert line.created == "2026-12-01T10:20:30+00:00"
    empty = study_summary("new", [], StudyFacts())
    assert (empty.measured, empty.total, empty.best_throughput, empty.created) == (0, 0, None, "")
