"""`discover`: NPUs, GPUs or CPU NUMA nodes, from recorded tool outputs and a made-up /sys."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import pytest

from autotune.devices import (
    NPU_SMI_INFO,
    NPU_SMI_TOPO,
    NVIDIA_GPU_QUERY,
    NVIDIA_TOPO,
    Device,
    DeviceError,
    discover,
)
from devices.fake_host import GPU_HOST, NPU_HOST, RECORDED_MEMTOTAL, fake_host, kunpeng_like, tools

MIB = 1 << 20


def test_ascend_npus_with_their_cpu_affinity(tmp_path: Path) -> None:
    inventory = discover("ascend", run=tools(NPU_HOST), root=kunpeng_like(tmp_path))
    assert inventory.platform == "ascend"
    assert inventory.ids == list(range(8))
    assert inventory.devices[0] == Device(
        0, "910B3", 65536 * MIB, 3318 * MIB, "npu", numa_node=6, cores="144-167"
    )
    assert [d.numa_node for d in inventory.devices] == [6, 6, 4, 4, 0, 0, 2, 2]
    assert inventory.topology is not None and inventory.topology.link(0, 5) == "HCCS"


def test_numa_node_unknown_without_sysfs_nodes(tmp_path: Path) -> None:
    inventory = discover("ascend", run=tools(NPU_HOST), root=tmp_path)
    assert [d.numa_node for d in inventory.devices] == [None] * 8
    assert inventory.devices[7].cores == "48-71"


def test_npus_without_topology_still_listed(tmp_path: Path) -> None:
    broken = subprocess.CalledProcessError(1, ["npu-smi"], stderr="unsupported")
    run = tools({NPU_SMI_INFO: "npu_smi_910b3_x8_idle.txt", NPU_SMI_TOPO: broken})
    inventory = discover("ascend", run=run, root=tmp_path)
    assert inventory.ids == list(range(8)) and inventory.topology is None
    assert inventory.devices[0].cores is None
    assert inventory.devices[0].used_bytes == 3440 * MIB


def test_a3_chips_are_numbered_in_listing_order(tmp_path: Path) -> None:
    run = tools({NPU_SMI_INFO: "npu_smi_a3_ascend910_x8_processes.txt"})
    inventory = discover("ascend", run=run, root=tmp_path)
    assert inventory.ids == list(range(16))  # 8 NPUs x 2 chips
    assert inventory.devices[3].name == "Ascend910 (NPU 1 chip 1)"
    assert inventory.topology is None  # npu-smi's matrix names NPUs, not chips


def test_cuda_gpus_joined_with_the_topology_by_index(tmp_path: Path) -> None:
    # The CSV (4 x A10G) and the matrix (DGX-1, 8 x V100) come from different hosts: this checks
    # that devices take their NUMA node and cores from the matrix row of their index.
    run = tools({**GPU_HOST, NVIDIA_TOPO: "nvidia_smi_topo_v100_x8_dgx1.txt"})
    inventory = discover("cuda", run=run, root=tmp_path)
    assert inventory.platform == "cuda"
    assert inventory.devices[0] == Device(
        0, "NVIDIA A10G", 23028 * MIB, 21963 * MIB, "gpu", numa_node=0, cores="0-11,24-35"
    )
    assert inventory.ids == [0, 1, 2, 3]


def test_auto_prefers_npu_smi_then_nvidia_smi_then_the_cpu(tmp_path: Path) -> None:
    root = kunpeng_like(tmp_path)
    both = tools({**NPU_HOST, **GPU_HOST})
    assert discover(run=both, root=root).platform == "ascend"
    assert discover(run=tools(GPU_HOST), root=root).platform == "cuda"
    cpu = discover(run=tools({}), root=root)
    assert cpu.platform == "cpu" and cpu.ids == list(range(8))


def test_auto_passes_over_a_failing_tool(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    failing = subprocess.CalledProcessError(9, ["npu-smi", "info"], stderr="dcmi init failed\n")
    run = tools({NPU_SMI_INFO: failing, **GPU_HOST})
    with caplog.at_level(logging.WARNING):
        assert discover(run=run, root=tmp_path).platform == "cuda"
    assert (
        "npu-smi failed: Command '['npu-smi', 'info']' returned non-zero exit status 9.: "
        "dcmi init failed" in caplog.text
    )


@pytest.mark.parametrize(
    ("platform", "outputs", "message"),
    [
        ("cuda", {}, "nvidia-smi is not installed: cannot list cuda devices"),
        ("ascend", {}, "npu-smi is not installed: cannot list ascend devices"),
        (
            "cuda",
            {NVIDIA_GPU_QUERY: subprocess.CalledProcessError(6, ["nvidia-smi"], "", "No devices")},
            "nvidia-smi failed: Command '['nvidia-smi']' returned non-zero exit status 6.: No",
        ),
        ("cuda", {NVIDIA_GPU_QUERY: "nvidia_compute_apps_empty.csv"}, "nvidia-smi lists no device"),
        (
            "ascend",
            {NPU_SMI_INFO: "nvidia_query_gpu_a10g_x4.csv"},
            "npu-smi output not understood: npu-smi info lists no NPU",
        ),
        ("gpu", {}, "unknown platform 'gpu': expected auto, cpu, cuda or ascend"),
    ],
)
def test_explicit_platform_errors_are_one_line(
    tmp_path: Path, platform: str, outputs: dict[tuple[str, ...], str | Exception], message: str
) -> None:
    with pytest.raises(DeviceError) as raised:
        discover(platform, run=tools(outputs), root=tmp_path)
    assert str(raised.value).startswith(message)
    assert "\n" not in str(raised.value)


def test_cpu_one_device_per_numa_node_with_cpus(tmp_path: Path) -> None:
    # Made up: two nodes of 8 CPUs, a memory-only node 2 (CXL), and a cpuset that allows 0-11.
    root = fake_host(tmp_path, {0: "0-7", 1: "8-15", 2: ""}, allowed="0-11")
    inventory = discover("cpu", run=tools(NPU_HOST), root=root)
    assert inventory.platform == "cpu" and inventory.ids == [0, 1]
    node1 = inventory.devices[1]
    assert (node1.name, node1.kind, node1.numa_node, node1.cores) == (
        "Test CPU @ 2.0GHz", "cpu", 1, "8-11",
    )  # fmt: skip
    assert node1.total_bytes == RECORDED_MEMTOTAL
    assert node1.used_bytes is not None and 0 < node1.used_bytes < RECORDED_MEMTOTAL


def test_cpu_without_numa_nodes_is_one_device(tmp_path: Path) -> None:
    (tmp_path / "sys/devices/system/cpu").mkdir(parents=True)
    (tmp_path / "sys/devices/system/cpu/online").write_text("0-3\n")
    inventory = discover("cpu", root=tmp_path)
    assert inventory.ids == [0] and inventory.devices[0].cores == "0-3"
    assert inventory.devices[0].name == "cpu"


def test_cpu_with_no_allowed_cpu_is_an_error(tmp_path: Path) -> None:
    root = fake_host(tmp_path, {0: "0-3"}, allowed="8-9")
    with pytest.raises(DeviceError, match="no CPU of any NUMA node is available"):
        discover("cpu", root=root)
