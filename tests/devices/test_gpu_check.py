"""scripts/gpu-check.sh, the device check for a real GPU, run here on the simulated 4-GPU host
(tests/sim_devices.py) where the engine stand-in's memory is the simulation's, not torch's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from sim_devices import Host, install

REPO = Path(__file__).resolve().parents[2]


def gpu_check(out: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu-check.sh"), str(out)],
        capture_output=True, text=True, timeout=120, env={**os.environ, **env},
    )  # fmt: skip


def test_every_check_passes_on_the_simulated_host_with_a_gpu_held(tmp_path: Path) -> None:
    """NVML (the stand-in tests/sim_nvml.py, importable as `pynvml`) and nvidia-smi both there."""
    state = tmp_path / "sim"
    bin_dir = install(state, Host.cuda_a10g({0: 20000}, release_delay_s=1.0))
    shim = tmp_path / "py"
    shim.mkdir()
    (shim / "pynvml.py").write_text("from sim_nvml import *  # noqa: F403\n")
    tests = Path(__file__).resolve().parents[1]
    done = gpu_check(
        tmp_path / "out", PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", SIM_DEVICES=str(state),
        PYTHONPATH=f"{shim}{os.pathsep}{tests}",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    findings = json.loads((tmp_path / "out" / "findings.json").read_text())
    checks = {c["check"]: c for c in findings["checks"]}
    assert len(checks) == 7 and all(c["ok"] for c in checks.values()), checks
    assert checks["GPUs listed"]["source"] == "NVML"
    assert checks["NVML and nvidia-smi agree"]["caps"] == [[8, 6], [8, 6]]
    assert checks["CUDA_VISIBLE_DEVICES honoured"]["leased"] != 0  # GPU 0 is held
    assert checks["released before the next lease"]["teardown_s"] >= 1.0  # the release delay
    assert checks["a config that does not fit is an oom"]["kind"] == "oom"
    assert (tmp_path / "out" / "smi" / "query_gpu.txt").read_text().count("NVIDIA A10G") == 4


def test_a_host_without_nvidia_smi_is_told_so_in_one_line(tmp_path: Path) -> None:
    bare = tmp_path / "bin"  # what the script needs, and no nvidia-smi (even on a GPU host)
    bare.mkdir()
    for tool in ("bash", "dirname", "timeout", "python3"):
        (bare / tool).symlink_to(shutil.which(tool) or sys.executable)
    done = gpu_check(tmp_path / "out", PATH=str(bare))
    assert done.returncode == 2
    assert done.stdout.strip().splitlines() == [
        "gpu-check: not a GPU host here: nvidia-smi is not installed: cannot list cuda devices"
    ]
