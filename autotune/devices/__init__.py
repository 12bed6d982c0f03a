"""Accelerators and CPUs: what a host has, how its devices are shared by trials, their memory.

Discovery (`discover`) lists NPUs (npu-smi), GPUs (NVML, else nvidia-smi: `nvidia_reader`) or
the CPU's NUMA nodes, with the topology the tools give; `--devices 0-3,6` limits it
(`parse_device_list`, `select_devices`). A `DevicePool` hands disjoint, topology-near device
sets to trials that run at once, each as a `Lease` with the environment that shows it its
devices; on CPU the devices are core slots (`split_cpu`). The memory readers (NVML or
nvidia-smi, npu-smi, NUMA meminfo) judge whether a config fits before it is launched,
`wait_released` waits after a teardown until the devices are free.
"""

from autotune.devices._ascend import NPU_SMI_INFO, NpuDevice, NpuSmiInfo, parse_npu_smi_info
from autotune.devices._cpu import cpu_memory
from autotune.devices._cpu_slots import split_cpu
from autotune.devices._discover import discover
from autotune.devices._host import (
    cpu_flags,
    describe_host,
    hardware_line,
    installed_version,
    serve_command,
    vllm_distributions,
)
from autotune.devices._hostlock import HostHold, hold_host
from autotune.devices._inventory import Device, DeviceError, Inventory
from autotune.devices._lanes import plan_lanes
from autotune.devices._memory import device_memory, gpu_compute_capability
from autotune.devices._numa import binding_problem, format_cpulist, parse_cpulist
from autotune.devices._nvidia import (
    NVIDIA_APPS_QUERY,
    NVIDIA_COMPUTE_CAP_QUERY,
    NVIDIA_GPU_QUERY,
    NvidiaGpu,
    gpu_devices,
    parse_compute_caps,
    parse_nvidia_apps,
    parse_nvidia_gpus,
)
from autotune.devices._nvml import NvidiaReader, NvmlReader, nvidia_reader
from autotune.devices._pool import DevicePool, Lease
from autotune.devices._records import (
    DeviceMemory,
    DeviceProcess,
    SmiParseError,
    ToolRunner,
    run_tool,
)
from autotune.devices._release import (
    ReleaseResult,
    memory_before_launch,
    process_reader,
    wait_released,
)
from autotune.devices._selection import (
    discover_selected,
    format_device_list,
    parse_device_list,
    select_devices,
)
from autotune.devices._topology import NPU_SMI_TOPO, NVIDIA_TOPO, Topology, parse_topology
from autotune.vocab.platform import PLATFORMS, AnyPlatform, Platform

__all__ = [
    "NPU_SMI_INFO",
    "NPU_SMI_TOPO",
    "NVIDIA_APPS_QUERY",
    "NVIDIA_COMPUTE_CAP_QUERY",
    "NVIDIA_GPU_QUERY",
    "NVIDIA_TOPO",
    "PLATFORMS",
    "AnyPlatform",
    "Device",
    "DeviceError",
    "DeviceMemory",
    "DevicePool",
    "DeviceProcess",
    "HostHold",
    "Inventory",
    "Lease",
    "NpuDevice",
    "NpuSmiInfo",
    "NvidiaGpu",
    "NvidiaReader",
    "NvmlReader",
    "Platform",
    "ReleaseResult",
    "SmiParseError",
    "ToolRunner",
    "Topology",
    "binding_problem",
    "cpu_flags",
    "cpu_memory",
    "describe_host",
    "device_memory",
    "discover",
    "discover_selected",
    "format_cpulist",
    "format_device_list",
    "gpu_compute_capability",
    "gpu_devices",
    "hardware_line",
    "hold_host",
    "installed_version",
    "memory_before_launch",
    "nvidia_reader",
    "parse_compute_caps",
    "parse_cpulist",
    "parse_device_list",
    "parse_npu_smi_info",
    "parse_nvidia_apps",
    "parse_nvidia_gpus",
    "parse_topology",
    "plan_lanes",
    "process_reader",
    "run_tool",
    "select_devices",
    "serve_command",
    "split_cpu",
    "vllm_distributions",
    "wait_released",
]
