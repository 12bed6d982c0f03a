"""benchmarks/pooled_estimate.py over two replicate studies of the fake engine: each study's
trials predicted as the study would have, each config's estimate judged against its runs in
the other study, never its own."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotune.answer.repeats import compared, config_key
from autotune.cli import app

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import pooled_estimate

REPO = Path(__file__).resolve().parents[2]
FAKE_ENGINE = REPO / "tests" / "fake_engine.py"


def replicate(model: Path, root: Path, study: str) -> Path:
    argv = [
        "tune", "--study", study, "--model", str(model), "--root", str(root),
        "--engine-command", f"{{python}} {FAKE_ENGINE}", "--space", "cpu-quick",
        "--workload", "random:input=32,output=8,prompts=8,warmup=0", "--rate", "100",
        "--trials", "6", "--sampler", "random", "--seed", "3", "--confirm", "0",
        "--screen", "off",
    ]  # fmt: skip
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    return root / study


def test_each_study_is_judged_by_the_others_runs(
    tiny_model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("FAKE_ENGINE_STARTUP_S", "0.1")
    folders = [replicate(tiny_model, tmp_path, f"r{i}") for i in range(2)]
    studies = [pooled_estimate.predicted_study(f) for f in folders]
    # Every measured trial after the first predicted before it ran, by the model of the
    # trials before it (the study itself stored none: --screen off).
    assert studies[0][0].prediction == {}
    assert all(t.prediction for t in studies[0][1:] if t.measured)
    # One seed: the same configs (a re-measure follows the measured incumbent, so the runs
    # may differ in which config they repeat).
    shared = {config_key(t) for t in studies[0]} & {config_key(t) for t in studies[1]}
    assert len(shared) >= 4
    # The truth of study 0 is study 1's runs (their mean of log), never its own.
    truth = pooled_estimate.truth_of(studies, 0)
    for t in compared(studies[1]):
        if t.measured:
            assert truth[config_key(t)]["p99_tpot_ms"] == math.log(t.metric("p99_tpot_ms"))

    # The script's command line, in this process (its imports are this test's).
    out = tmp_path / "pooled.json"
    argv = ["pooled_estimate.py", "--json", str(out), "--replicates", *map(str, folders)]
    monkeypatch.setattr(sys, "argv", argv)
    pooled_estimate.main()
    assert "| p99_tpot_ms |" in capsys.readouterr().out
    table = json.loads(out.read_text())
    for metric in ("p99_ttft_ms", "p99_tpot_ms"):
        entry = table[metric]
        assert entry["n"] >= 8  # the shared configs of both studies
        for way in ("single", "pooled"):
            assert math.isfinite(entry[way]["rms"]) and entry[way]["rms_z"] > 0
            assert set(entry[way]["held"]) == {"0.9", "0.95", "1.05", "1.1", "1.2"}
