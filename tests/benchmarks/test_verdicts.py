"""The confirm step's verdicts on a scripted host (benchmarks/verdict_stats.py): a config
confirmed against itself shows a significant gain no more often than the interval's nominal
5% under every drift pattern, a large gain is found, and the baseline is never the loser of a
bound relative to itself (the same through the Confirmer: tests/study/test_noise_runner.py).
The real-engine calibration is `benchmarks/verdicts.py`."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import verdict_stats

STUDIES = 400  # per pattern: the false-gain share's sd is about 1.1 points at 5%


@pytest.mark.parametrize("name", sorted(verdict_stats.PATTERNS))
def test_one_config_against_itself_shows_no_more_false_gains_than_nominal(name: str) -> None:
    kinds = verdict_stats.scripted_verdicts(verdict_stats.PATTERNS[name], 1.0, STUDIES, seed=3)
    assert kinds.count("gain") / STUDIES <= 0.08, kinds.count("gain")  # nominal 5%, +2.7 sd
    # The paired relative bounds: the baseline holds bounds relative to itself in every
    # round, so a null confirm step always has a winner, and it is the baseline.
    assert kinds.count("no winner") == 0 and kinds.count("defaults") >= 0.9 * STUDIES


@pytest.mark.parametrize("name", ["quiet", "ramp", "step"])
def test_a_threefold_gain_is_told_apart(name: str) -> None:
    # max_num_seqs 128 against 4 on the demo's workload: about 3x (benchmarks/verdicts.py).
    pattern = verdict_stats.PATTERNS[name]
    bounds = verdict_stats.THROUGHPUT_ONLY
    kinds = verdict_stats.scripted_verdicts(pattern, 3.0, 100, seed=5, bounds=bounds)
    assert kinds.count("gain") >= 90, kinds
