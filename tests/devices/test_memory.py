"""`device_memory`: the memory of the device a single-device trial runs on."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from autotune.devices import NPU_SMI_INFO, NVIDIA_GPU_QUERY, DeviceMemory, device_memory

MIB = 1 << 20


def answers(outputs: dict[tuple[str, ...], str]) -> Callable[[list[str]], str]:
    """A fake `run`: the recorded output of each argv; a tool not listed is not installed."""

    def run(argv: list[str]) -> str:
        if tuple(argv) not in outputs:
            raise FileNotFoundError(2, "No such file or directory", argv[0])
        return outputs[tuple(argv)]

    return run


def node_root(tmp_path: Path) -> Path:
    node = tmp_path / "sys/devices/system/node/node0"
    node.mkdir(parents=True)
    recorded = Path(__file__).resolve().parents[1] / "fixtures" / "smi" / "node0_meminfo"
    shutil.copyfile(recorded, node / "meminfo")
    return tmp_path


def test_cuda_is_gpu_0(smi_text: Callable[[str], str]) -> None:
    run = answers({NVIDIA_GPU_QUERY: smi_text("nvidia_query_gpu_a10g_x4.csv")})
    assert device_memory("cuda", run=run) == DeviceMemory("cuda:0", 23028 * MIB, 1065 * MIB)


def test_ascend_is_npu_0(smi_text: Callable[[str], str]) -> None:
    run = answers({NPU_SMI_INFO: smi_text("npu_smi_a3_ascend910_x8_processes.txt")})
    assert device_memory("ascend", run=run) == DeviceMemory(
        "npu:0", 65536 * MIB, (65536 - 53444) * MIB
    )


def test_a_trials_devices_are_its_lease_and_the_tightest_counts(
    smi_text: Callable[[str], str],
) -> None:
    """A trial on NPUs 2 and 3 of a 910B3 host where NPU 2 holds 41 GB of another job: its
    tensor-parallel workers must each fit, so NPU 2's memory is what the estimate sees."""
    run = answers({NPU_SMI_INFO: smi_text("npu_smi_910b3_x8_one_process.txt")})
    assert device_memory("ascend", [3], run=run) == DeviceMemory(
        "npu:3", 65536 * MIB, (65536 - 3390) * MIB
    )
    assert device_memory("ascend", [3, 2], run=run) == DeviceMemory(
        "npu:2", 65536 * MIB, (65536 - 41052) * MIB
    )
    assert device_memory("ascend", [9], run=run) is None  # not listed: unknown, no estimate
    gpus = answers({NVIDIA_GPU_QUERY: smi_text("nvidia_query_gpu_a10g_x4.csv")})
    assert device_memory("cuda", [2, 0], run=gpus) == DeviceMemory(
        "cuda:2", 23028 * MIB, 1063 * MIB
    )


def test_cpu_is_numa_node_0(tmp_path: Path) -> None:
    root = node_root(tmp_path)
    memory = device_memory("cpu", run=answers({}), root=root)
    assert memory is not None and memory.device == "cpu:node0"
    assert memory.total_bytes == 12019916 * 1024


def test_any_takes_the_installed_tool_else_the_cpu(
    smi_text: Callable[[str], str], tmp_path: Path
) -> None:
    npu = answers({NPU_SMI_INFO: smi_text("npu_smi_910b3_x8_idle.txt")})
    assert device_memory("any", run=npu) == DeviceMemory("npu:0", 65536 * MIB, 62096 * MIB)
    memory = device_memory("any", run=answers({}), root=node_root(tmp_path))
    assert memory is not None and memory.device == "cpu:node0"


def test_unknown_memory_is_none() -> None:
    assert device_memory("cuda", run=answers({})) is None  # nvidia-smi not installed
    gb10 = "0, GPU-x, NVIDIA GB10, [N/A], [N/A], [N/A]\n"
    assert device_memory("cuda", run=answers({NVIDIA_GPU_QUERY: gb10})) is None

    def failing(argv: list[str]) -> str:
        raise subprocess.CalledProcessError(6, argv, output="No devices were found\n")

    assert device_memory("cuda", run=failing) is None
    assert device_memory("ascend", run=answers({NPU_SMI_INFO: "not a table\n"})) is None


def test_unknown_platform() -> None:
    with pytest.raises(ValueError, match="tpu"):
        device_memory("tpu")
