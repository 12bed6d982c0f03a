"""benchmarks/export_margin.py: the noise margin export keeps lowers how often the deployed
config truly misses its SLO, on the same seeded studies, without costing the mean share."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import export_margin


def test_the_margin_deploys_fewer_configs_that_truly_miss_their_slo() -> None:
    table = export_margin.run(600, 15, export_margin.Noise(p99=0.17, throughput=0.2))
    plain, margin = table["no margin"], table["margin (default)"]
    miss = "deploys a truly missing config"
    assert plain[miss] >= 0.02  # the landscape can fail: without a margin, picks miss
    assert margin[miss] <= 0.6 * plain[miss]
    assert margin["mean share"] >= plain["mean share"] - 0.01
    assert margin["refused (nothing feasible)"] == plain["refused (nothing feasible)"]
