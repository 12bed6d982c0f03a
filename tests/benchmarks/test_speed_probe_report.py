"""benchmarks/speed_probe.py's report: the spreads it prints, raw and as the tuner weighs them,
from rows of probe readings and throughputs (no engine)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

from speed_probe import report  # noqa: E402


def rows(readings: list[float], throughputs: list[float]) -> list[dict[str, object]]:
    return [
        {"hogs": 0, "reading": r, "output_throughput": t, "engine_mean_tpot_ms": 1000.0 / t}
        for r, t in zip(readings, throughputs, strict=True)
    ]


def test_a_probe_that_follows_the_throughput_undoes_its_spread() -> None:
    moves = [1.0, 0.7, 0.9, 1.1, 0.8, 0.95]
    out = report(rows([100.0 * m for m in moves], [50.0 * m for m in moves]))["all"]
    assert out["corr_throughput"] == pytest.approx(1.0)
    assert out["sd_log_throughput"] > 0.1 and out["sd_log_corrected"] == pytest.approx(0.0)
    assert 0.95 < out["weight"] < 1.0 and out["sd_log_tuner"] < 0.01


def test_a_steady_probe_weighs_nothing_and_leaves_the_spread() -> None:
    readings = [100.0, 101.0, 99.0, 100.5, 99.5, 100.0]  # within the probe's own 2%
    throughputs = [50.0, 40.0, 55.0, 45.0, 52.0, 48.0]
    out = report(rows(readings, throughputs))["all"]
    assert out["weight"] == 0.0
    assert out["sd_log_tuner"] == out["sd_log_throughput"] > 0.05
