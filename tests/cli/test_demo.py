"""The README's main job, `scripts/demo.sh`, as a slower host than the developers' meets it.

The fake engine's decode step is made slow enough that the baseline's p99 TTFT is above the
2,000 ms the demo once fixed (the bound that failed on a 2-core host in issue 14); the demo's
baseline-relative SLOs must still end in the Pareto table and an exported YAML. (The real
engine runs the same script once, in tests/e2e/conftest.py.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from autotune.store import StudyStore

REPO = Path(__file__).resolve().parents[2]
FAKE = REPO / "tests" / "fake_engine.py"


def run_demo(tmp_path: Path, tiny_model: Path, **env: str) -> subprocess.CompletedProcess[str]:
    settings = {
        **os.environ,
        "AUTOTUNE": f"{sys.executable} -m autotune",
        "MODEL": str(tiny_model),
        "ROOT": str(tmp_path / "studies"),
        "SPACE": "cpu-quick",
        "ENGINE_COMMAND": f"{{python}} {FAKE}",
        "WORKLOAD": "random:input=64,output=2,prompts=8,warmup=0",
        "CONCURRENCY": "8",
        "TRIALS": "3",
        "ROUNDS": "1",
        "SEED": "3",
        "FAKE_ENGINE_STARTUP_S": "0.2",
        "FAKE_ENGINE_STEP_S": "2.0",  # 1,000x the default: seconds to a first token
        "PRECISION": "off",  # one batch a trial: a batch is seconds of this host
        **env,
    }
    return subprocess.run(
        ["bash", str(REPO / "scripts" / "demo.sh")],
        capture_output=True, text=True, timeout=600, env=settings, cwd=REPO,
    )  # fmt: skip


def test_the_demo_ends_in_a_yaml_on_a_slow_host(tmp_path: Path, tiny_model: Path) -> None:
    out = run_demo(tmp_path, tiny_model)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    study = tmp_path / "studies" / "demo"
    store = StudyStore(f"sqlite:///{study / 'study.db'}", create=False)
    trials = store.trials("demo")
    base = next(t for t in trials if t.role == "baseline")
    assert base.metric("p99_ttft_ms") > 2000  # the old fixed SLO: nothing could meet it
    slos = store.study_facts("demo").slos
    # The demo's question: a TPOT the defaults miss (0.8x theirs), a TTFT at most 3x theirs.
    assert slos["p90_tpot_ms"] == 0.8 * base.metric("p90_tpot_ms")
    assert slos["p90_ttft_ms"] == 3 * base.metric("p90_ttft_ms")
    assert "Pareto front" in out.stdout and "(baseline " in out.stdout
    assert "p90 TTFT" in out.stdout and "p99 TTFT" not in out.stdout.split("Pareto front")[0]
    # The front once (tune's), its latencies at the percentile the SLOs judge.
    assert out.stdout.count("Pareto front of") == 1 and "TTFT p50/p90 ms" in out.stdout
    config = yaml.safe_load((study / "best.yaml").read_text())
    assert config["model"] == str(tiny_model) and "max-num-seqs" in config
    header = (study / "best.yaml").read_text().splitlines()[0]
    assert header.startswith("# vllm-autotune: study 'demo', trial ")
    assert "confirm:" in out.stdout


def test_the_demo_exports_the_closest_config_when_nothing_is_feasible(
    tmp_path: Path, tiny_model: Path
) -> None:
    """An SLO no config can meet (a tenth of the baseline's TTFT): exit 3 from `tune` is
    answered with the closest config, exported and marked INFEASIBLE; the script succeeds."""
    out = subprocess.run(
        ["bash", str(REPO / "scripts" / "demo.sh")],
        capture_output=True, text=True, timeout=600, cwd=REPO,
        env={
            **os.environ, "AUTOTUNE": f"{sys.executable} -m autotune", "MODEL": str(tiny_model),
            "ROOT": str(tmp_path / "studies"), "SPACE": "cpu-quick", "TRIALS": "2",
            "ENGINE_COMMAND": f"{{python}} {FAKE}", "CONCURRENCY": "8",
            "WORKLOAD": "random:input=32,output=4,prompts=8,warmup=0",
            "FAKE_ENGINE_STARTUP_S": "0.1", "SLOS": "p90_ttft_ms=baseline*0.1",
        },
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "Closest: trial" in out.stdout and "confirm: skipped" in out.stdout
    # The demo's runs are sized to their decision (no PRECISION given: the tool's default):
    # each trial says what ended its batches.
    store = StudyStore(f"sqlite:///{tmp_path / 'studies' / 'demo' / 'study.db'}", create=False)
    assert all(t.engine.sized for t in store.trials("demo") if t.measured)
    text = (tmp_path / "studies" / "demo" / "best.yaml").read_text()
    assert "# INFEASIBLE: it misses p90_ttft_ms" in text
    assert "closest to the constraints" in text.splitlines()[0]
