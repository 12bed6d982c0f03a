"""Accelerator memory and processes, as the device tools report them.

Reads what nvidia-smi, npu-smi and the kernel's NUMA meminfo say about device memory and the
processes holding it: to judge whether a config fits before it is launched, and to wait after a
trial's teardown until its processes have released the devices.
"""

from autotune.devices._ascend import NPU_SMI_INFO, NpuDevice, NpuSmiInfo, parse_npu_smi_info
from autotune.devices._cpu import cpu_memory
from autotune.devices._memory import device_memory
from autotune.devices._nvidia import (
    NVIDIA_APPS_QUERY,
    NVIDIA_GPU_QUERY,
    NvidiaGpu,
    gpu_devices,
    parse_nvidia_apps,
    parse_nvidia_gpus,
)
from autotune.devices._records import DeviceMemory, DeviceProcess, SmiParseError
from autotune.devices._release import ReleaseResult, run_tool, wait_released

__all__ = [
    "NPU_SMI_INFO",
    "NVIDIA_APPS_QUERY",
    "NVIDIA_GPU_QUERY",
    "DeviceMemory",
    "DeviceProcess",
    "NpuDevice",
    "NpuSmiInfo",
    "NvidiaGpu",
    "ReleaseResult",
    "SmiParseError",
    "cpu_memory",
    "device_memory",
    "gpu_devices",
    "parse_npu_smi_info",
    "parse_nvidia_apps",
    "parse_nvidia_gpus",
    "run_tool",
    "wait_released",
]
