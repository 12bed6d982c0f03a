"""The simulated multi-device host (tests/sim_devices.py) speaks the recorded formats and its
memory follows the engines on it: what the end-to-end tests on it rest on."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from sim_devices import SMI_FIXTURES, Host, allocate, engines, install, release, usage

from autotune.devices import device_memory, discover, wait_released
from autotune.devices._ascend import parse_npu_smi_info
from autotune.engine._failures import classify_log
from autotune.vocab.status import TrialStatus

OnPath = Callable[[Host], Path]


@pytest.fixture
def on_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> OnPath:
    """Install a simulated host, its tool first on PATH; returns its state folder."""

    def make(host: Host) -> Path:
        state = tmp_path / "sim"
        bin_dir = install(state, host)
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
        monkeypatch.setenv("SIM_DEVICES", str(state))
        return state

    return make


def test_npu_smi_stand_in_reads_as_the_recorded_910b3_table(on_path: OnPath) -> None:
    on_path(Host.ascend_910b3({2: 41052 - 3408}, foreign_pid=1333928))
    text = subprocess.run(["npu-smi", "info"], capture_output=True, text=True, check=True).stdout
    recorded = (SMI_FIXTURES / "npu_smi_910b3_x8_one_process.txt").read_text()
    assert {len(line) for line in text.splitlines()} == {
        len(line) for line in recorded.splitlines()
    }
    ours, theirs = parse_npu_smi_info(text), parse_npu_smi_info(recorded)
    assert [(d.npu, d.chip, d.name, d.hbm_total_bytes) for d in ours.devices] == [
        (d.npu, d.chip, d.name, d.hbm_total_bytes) for d in theirs.devices
    ]
    assert ours.devices[2].hbm_used_bytes == theirs.devices[2].hbm_used_bytes
    assert [(p.device, p.pid) for p in ours.processes] == [
        (p.device, p.pid) for p in theirs.processes
    ]
    assert ours.idle_npus == theirs.idle_npus
    inventory = discover("ascend")  # the topology matrix comes with it
    assert inventory.topology is not None and inventory.devices[4].cores == "0-23"


def test_a_named_cuda_host_reads_as_its_product_with_an_nvlink_matrix(on_path: OnPath) -> None:
    """The simulated landscapes' 8x A100 80GB host (benchmarks/sim/cli.py)."""
    on_path(Host("cuda", 8, 81920, 512, name="NVIDIA A100-SXM4-80GB", compute_cap="8.0"))
    inventory = discover("cuda")
    assert [d.id for d in inventory.devices] == list(range(8))
    assert {d.name for d in inventory.devices} == {"NVIDIA A100-SXM4-80GB"}
    assert {d.total_bytes for d in inventory.devices} == {81920 * 2**20}
    assert inventory.topology is not None
    assert inventory.topology.link(0, 7) == "NV12" and inventory.devices[5].cores == "24-47"
    cap = subprocess.run(
        ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert cap.split() == ["8.0"] * 8


def test_memory_follows_an_engine_and_is_released_after_the_delay(on_path: OnPath) -> None:
    state = on_path(Host.cuda_a10g({}, release_delay_s=0.6))
    env = {"CUDA_VISIBLE_DEVICES": "2,3"}
    assert allocate(state, env, tp=2, util=0.9) is None
    assert device_memory("cuda", [2]).available_bytes < 0.11 * 23028 * 2**20  # type: ignore[union-attr]
    assert device_memory("cuda", [0]).available_bytes > 0.98 * 23028 * 2**20  # type: ignore[union-attr]
    # A second engine on the same devices fails as vLLM does, and is classified an OOM.
    error = allocate(state, env, tp=1, util=0.5)
    assert error is not None and classify_log(error).kind == TrialStatus.OOM
    release(state)
    started = time.monotonic()
    result = wait_released("cuda", [os.getpid()], ["cuda:2", "cuda:3"], timeout_s=60, poll_s=0.05)
    assert result.released and time.monotonic() - started > 0.4  # waited for the 0.6 s release
    assert usage(state)[1][2] == 263  # idle again


def test_an_engine_killed_without_a_word_is_released_too(on_path: OnPath) -> None:
    state = on_path(Host.ascend_910b3({}, release_delay_s=0.3))
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import sim_devices, pathlib, os; "
        "sim_devices.allocate(pathlib.Path(sys.argv[2]), {'ASCEND_RT_VISIBLE_DEVICES': '5'}, "
        "1, 0.9); os._exit(0)"
    )
    tests = str(Path(__file__).resolve().parents[1])
    subprocess.run([sys.executable, "-c", code, tests, str(state)], check=True)
    (engine,) = engines(state)
    assert engine["devices"] == [5] and engine["free_t"] is None
    assert usage(state)[1][5] > 50000  # noticed dead now, released after the delay
    time.sleep(0.4)
    assert usage(state)[1][5] == 3408
