"""benchmarks/noise_anatomy.py's analysis: each row of its table is the spread it names, read
from the samples' own runs (the collection itself starts real engines: run it by hand)."""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import noise_anatomy

METRICS = noise_anatomy.METRICS


def runs(*rates: float) -> list[dict[str, float]]:
    return [{"output_throughput": r, "p90_ttft_ms": 100.0, "p90_tpot_ms": 10.0} for r in rates]


def sample(kind: str, round_: int, rates: list[float], cost: float) -> dict[str, Any]:
    return {
        "round": round_, "kind": kind, "status": "ok", "device_s": cost,
        "runs": runs(*rates), "sample": runs(statistics.median(rates))[0],
    }  # fmt: skip


def test_each_row_is_the_spread_it_names() -> None:
    # Engines at 1000, 1100, 900 tok/s; on each, runs 5% either side of it.
    levels = [1000.0, 1100.0, 900.0]
    rows = []
    for i, level in enumerate(levels):
        rows.append(sample("short", i, [level * 0.95, level, level * 1.05], 60.0))
        rows.append(sample("long", i, [level], 90.0))
        rows.append(sample("sized", i, [level * 1.01], 45.0))
    rows.append({"round": 9, "kind": "long", "status": "oom", "runs": []})  # left out
    table = noise_anatomy.analyze(rows)

    between = statistics.stdev(math.log(v) for v in levels)
    first = table["one short run (the first), between engines"]
    assert first["output_throughput"] == pytest.approx(between)  # each first run: level x 0.95
    assert first["p90_ttft_ms"] == 0.0 and first["n"] == 3
    within = table["between runs on one engine"]["output_throughput"]
    logs = [math.log(0.95), 0.0, math.log(1.05)]
    centred = [x - statistics.fmean(logs) for x in logs]
    assert within == pytest.approx(math.sqrt(3 * sum(d * d for d in centred) / (9 - 3)))
    median = table["the median of 3 runs, between engines"]
    assert median["output_throughput"] == pytest.approx(between) and median["device_s"] == 60.0
    long = table["one 640-prompt run, between engines"]
    assert long["output_throughput"] == pytest.approx(between) and long["device_s"] == 90.0
    assert long["n"] == 3  # the failed sample is no sample
    assert table["a sized run (the demo's protocol), between engines"]["device_s"] == 45.0
