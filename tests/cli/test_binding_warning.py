"""`tune` started with one CPU allowed (`taskset -c N`, a cpuset) warns once that vLLM's own
binding will give every engine no reserved core, and the study goes on (`autotune doctor`
says the same: tests/cli/test_doctor.py). A real `python -m autotune` process on the fake
engine, pinned as `taskset` would pin it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FAKE_ENGINE = Path(__file__).resolve().parents[1] / "fake_engine.py"
WARNING = "warning: this process may run on one physical core of NUMA node"


def tune(model: Path, root: Path, cpus: set[int]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_CPU_")}
    env.update(HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1", FAKE_ENGINE_STARTUP_S="0.1")
    argv = [
        sys.executable, "-m", "autotune", "tune", "--study", "pinned", "--model", str(model),
        "--space", "cpu-quick", "--trials", "1", "--root", str(root), "--precision", "off",
        "--workload", "random:input=32,output=8,prompts=8,warmup=1", "--rate", "100",
        "--engine-command", f"{{python}} {FAKE_ENGINE}",
    ]  # fmt: skip
    return subprocess.run(
        argv, capture_output=True, text=True, env=env, timeout=300,
        preexec_fn=lambda: os.sched_setaffinity(0, cpus),
    )  # fmt: skip


@pytest.mark.skipif(
    any(shutil.which(tool) for tool in ("nvidia-smi", "npu-smi")),
    reason="a GPU or NPU host: the binding is a CPU host's matter",
)
def test_tune_pinned_to_one_cpu_warns_once_and_runs(tiny_model: Path, tmp_path: Path) -> None:
    cpu = min(os.sched_getaffinity(0))
    done = tune(tiny_model, tmp_path / "studies", {cpu})
    assert done.returncode == 0, done.stdout + done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith(WARNING)]
    assert len(warnings) == 1, done.stderr
    assert f"(CPUs {cpu})" in warnings[0] and "`autotune doctor`" in warnings[0]
    assert "trial 0" in done.stdout or "baseline" in done.stdout
