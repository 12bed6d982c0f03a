"""`plan_lanes`: how many trials run at once and the pool they lease from, per platform."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from autotune.devices import NPU_SMI_INFO, DeviceError, plan_lanes
from devices.fake_host import GPU_HOST, NPU_HOST, fake_host, kunpeng_like, tools


def two_nodes(root: Path) -> Path:
    return fake_host(root, {0: "0-7", 1: "8-15"})


def test_one_cpu_trial_at_a_time_needs_no_pool(tmp_path: Path) -> None:
    assert plan_lanes("cpu", 1, root=two_nodes(tmp_path)) == (None, 1)


def test_cpu_lanes_are_disjoint_core_slots(tmp_path: Path) -> None:
    pool, lanes = plan_lanes("cpu", 4, root=two_nodes(tmp_path))
    assert lanes == 4 and pool is not None
    assert [d.cores for d in pool.devices] == ["0-3", "4-7", "8-11", "12-15"]
    auto, n = plan_lanes("cpu", "auto", root=two_nodes(tmp_path / "b"))
    assert n == 2 and auto is not None  # one per NUMA node
    assert [d.cores for d in auto.devices] == ["0-7", "8-15"]


def test_cpu_devices_pick_numa_nodes(tmp_path: Path) -> None:
    pool, lanes = plan_lanes("cpu", 1, "1", root=two_nodes(tmp_path))
    assert lanes == 1 and pool is not None
    assert pool.acquire(1).env == {"VLLM_CPU_OMP_THREADS_BIND": "8-15"}


def test_npu_lanes_default_to_one_per_device(tmp_path: Path) -> None:
    pool, lanes = plan_lanes("ascend", "auto", run=tools(NPU_HOST), root=kunpeng_like(tmp_path))
    assert pool is not None and pool.size == 8 and lanes == 8
    limited, two = plan_lanes(
        "ascend", 2, "0-3", run=tools(NPU_HOST), root=kunpeng_like(tmp_path / "b")
    )
    assert limited is not None and limited.size == 4 and two == 2
    assert limited.acquire(2).env == {"ASCEND_RT_VISIBLE_DEVICES": "0,1"}


def test_gpu_pool_on_a_space_of_any_platform(tmp_path: Path) -> None:
    root = fake_host(tmp_path, {0: "0-15"})
    pool, lanes = plan_lanes("any", 1, run=tools(GPU_HOST), root=root)
    assert pool is not None and pool.platform == "cuda" and lanes == 1


@pytest.mark.parametrize(
    ("parallel", "devices", "message"),
    [
        (5, "0-3", "--parallel 5 needs at least 5 ascend devices; 4 are given"),
        (0, None, "--parallel must be a number >= 1 or auto"),
        (2, "9", "no ascend device 9 on this host"),
    ],
)
def test_impossible_lanes_are_one_clear_error(
    tmp_path: Path, parallel: int, devices: str | None, message: str
) -> None:
    with pytest.raises(DeviceError, match=message):
        plan_lanes("ascend", parallel, devices, run=tools(NPU_HOST), root=kunpeng_like(tmp_path))


def test_more_cpu_lanes_than_cores_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DeviceError, match="cannot split 16 physical cores into 17 slots"):
        plan_lanes("cpu", 17, root=two_nodes(tmp_path))


def test_an_npu_another_job_holds_is_left_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The recorded 910B3 host where NPU 2 holds 41 of 64 GB (and a process): trials never
    get it; idle NPUs (3.3-3.4 GB in use, the firmware's) are all given."""
    busy = {**NPU_HOST, NPU_SMI_INFO: "npu_smi_910b3_x8_one_process.txt"}
    pool, lanes = plan_lanes(
        "ascend", "auto", busy_share=0.1, run=tools(busy), root=kunpeng_like(tmp_path)
    )
    assert pool is not None and lanes == 7
    assert [d.id for d in pool.devices] == [0, 1, 3, 4, 5, 6, 7]
    assert "leaving ascend 2 out of the study: another job holds it (40.1 of 64 GiB in use)" in (
        caplog.text
    )
    idle, eight = plan_lanes(
        "ascend", "auto", busy_share=0.1, run=tools(NPU_HOST), root=kunpeng_like(tmp_path / "b")
    )
    assert idle is not None and eight == 8


def test_a_host_whose_every_gpu_is_held_says_so(tmp_path: Path) -> None:
    """The recorded A10G x4 host runs a TP-4 vLLM on all four GPUs (21.4 of 22.5 GiB each)."""
    root = fake_host(tmp_path, {0: "0-15"})
    with pytest.raises(DeviceError, match="every cuda device given is held by another job"):
        plan_lanes("cuda", 1, busy_share=0.1, run=tools(GPU_HOST), root=root)
    pool, _ = plan_lanes("cuda", 1, busy_share=1.0, run=tools(GPU_HOST), root=root)
    assert pool is not None and pool.size == 4  # a threshold of 1: nothing is judged busy


def test_an_inherited_cuda_visible_devices_is_the_pool_and_devices_narrow_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Issue 34: a user on a shared host types CUDA_VISIBLE_DEVICES=2,3; discovery listed every
    # GPU nvidia-smi shows, and the leases then overwrote the variable: trials on GPUs 0-1.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    root = fake_host(tmp_path, {0: "0-15"})
    pool, lanes = plan_lanes("cuda", "auto", run=tools(GPU_HOST), root=root)
    assert pool is not None and [d.id for d in pool.devices] == [2, 3] and lanes == 2
    assert pool.acquire(1).env["CUDA_VISIBLE_DEVICES"] == "2"
    assert "CUDA_VISIBLE_DEVICES=2,3 inherited: trials use cuda devices 2-3 only" in caplog.text
    narrowed, one = plan_lanes("cuda", 1, "3", run=tools(GPU_HOST), root=root)
    assert narrowed is not None and [d.id for d in narrowed.devices] == [3] and one == 1
    with pytest.raises(DeviceError, match=r"no cuda device 1 among CUDA_VISIBLE_DEVICES=2,3: "):
        plan_lanes("cuda", 1, "1", run=tools(GPU_HOST), root=root)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "ASCEND_RT_VISIBLE_DEVICES is set and empty: no ascend device is visible"),
        ("0,x", "ASCEND_RT_VISIBLE_DEVICES='0,x': expected distinct device ids such as"),
        ("1,1", "expected distinct device ids"),
        ("9", "no ascend device 9 on this host: available are 0-7"),
    ],
)
def test_an_inherited_selection_that_cannot_be_read_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str, message: str
) -> None:
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", value)
    with pytest.raises(DeviceError, match=re.escape(message)):
        plan_lanes("ascend", 1, run=tools(NPU_HOST), root=kunpeng_like(tmp_path))
