"""A `vllm serve` command with data and expert parallel, imported as the baseline on the
stand-in 8 x H100 host (tests/sim_devices.py): the trial leases every device its engine holds
(TP 4 x DP 2 = 8), and the export, the cost and `size` count them. Before, a lease counted
TP x PP only: the engine was given 4 GPUs, and vLLM's DP rank 1 found none of its own."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml
from sim_devices import Host, engines, install
from typer.testing import CliRunner, Result

from autotune.answer.sizing import replica_devices
from autotune.cli import app
from autotune.store import StudyStore, default_storage_url

TESTS = Path(__file__).resolve().parents[1]
ENGINE_COMMAND = f"{{python}} {TESTS / 'fake_engine.py'}"
SERVE = """\
export VLLM_LOGGING_LEVEL=INFO
vllm serve {model} -dp 2 -tp 4 --enable-expert-parallel \\
    --max-num-seqs 64 --max-model-len 512 --port 8000
"""
SPACE = """\
name: seqs
platform: cuda
parameters:
  - {name: max_num_seqs, type: int, low: 16, high: 256, log: true, baseline: 128}
"""


def invoke(*args: str | Path) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture
def h100x8(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state = tmp_path / "sim"
    host = Host("cuda", 8, 81559, 500, name="NVIDIA H100 80GB HBM3", compute_cap="9.0")
    host.nvml = False  # nvidia-smi's text, as a host without the driver library reads
    monkeypatch.setenv("PATH", f"{install(state, host)}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SIM_DEVICES", str(state))
    return state


def moe_model(tiny_model: Path, folder: Path) -> Path:
    shutil.copytree(tiny_model, folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(num_experts=8, moe_intermediate_size=128)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_an_imported_dp_ep_command_leases_all_eight_gpus(
    h100x8: Path, tiny_model: Path, tmp_path: Path
) -> None:
    model = moe_model(tiny_model, tmp_path / "moe")
    script = tmp_path / "serve.sh"
    script.write_text(SERVE.format(model=model))
    space = tmp_path / "space.yaml"
    space.write_text(SPACE)
    root = tmp_path / "studies"
    result = invoke(
        "tune", "--study", "ep", "--model", model, "--baseline", script,
        "--engine-command", ENGINE_COMMAND, "--space", space,
        "--workload", "random:input=32,output=8,prompts=8,warmup=1", "--rate", "100",
        "--root", root, "--trials", "1", "--parallel", "1", "--devices", "0-7",
        "--device-cost-per-hour", "2.0",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (base,) = StudyStore(default_storage_url(root, "ep"), create=False).trials("ep")
    assert base.role == "baseline" and base.status == "ok", base.reason
    assert base.config["data-parallel-size"] == 2 and base.config["tensor-parallel-size"] == 4
    assert base.config["enable-expert-parallel"] is True
    # The lease: all eight GPUs; the engine took each of them (TP 4 for each of 2 DP ranks).
    assert base.lease_env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    (engine,) = engines(h100x8)
    assert sorted(engine["devices"]) == list(range(8))
    assert base.worker.devices == "0-7"
    assert base.engine.cost is not None and base.engine.cost.devices == 8
    out = tmp_path / "best.yaml"
    assert invoke("export", "ep", "--root", root, "-o", out).exit_code == 0
    exported = yaml.safe_load(out.read_text())
    assert exported["data-parallel-size"] == 2 and exported["enable-expert-parallel"] is True
    assert replica_devices(base.config) == 8  # what `size` counts per replica
