"""benchmarks/confirm_rounds.py's analysis: the spread of one round's log ratio, per kind."""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from confirm_rounds import analyze


def row(round_: int, kind: str, ratio: float, background: str = "nice") -> dict[str, object]:
    first = {"output_throughput": 1000.0, "p90_tpot_ms": 10.0, "p90_ttft_ms": 300.0}
    second = {k: v * ratio for k, v in first.items()}
    return {"round": round_, "kind": kind, "background": background, "wall_s": 100.0 + round_,
            "first": first, "second": second}  # fmt: skip


def test_the_spread_of_a_rounds_ratio_is_read_per_kind() -> None:
    apart = [0.8, 1.2, 0.95, 1.05]
    turns = [0.97, 1.03, 1.0, 0.99]
    rows = [row(i, "apart", r) for i, r in enumerate(apart)]
    rows += [row(10 + i, "turns", r, "waves") for i, r in enumerate(turns)]
    rows.append({"round": 99, "kind": "turns", "background": "nice", "wall_s": 5.0})  # failed
    table = analyze(rows)
    want = statistics.stdev(math.log(r) for r in apart)
    assert table["apart"]["sd output_throughput"] == pytest.approx(want)
    assert table["turns"]["rounds"] == 4 and table["turns, waves"]["rounds"] == 4
    assert table["turns"]["sd output_throughput"] < table["apart"]["sd output_throughput"]
    assert 0 < table["turns"]["4-round half-width"] < table["apart"]["4-round half-width"]
