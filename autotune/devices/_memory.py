"""The memory a trial's device has now, to judge whether a config fits before launching it."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

from autotune.devices._ascend import NPU_SMI_INFO, parse_npu_smi_info
from autotune.devices._cpu import cpu_memory
from autotune.devices._nvidia import (
    NVIDIA_COMPUTE_CAP_QUERY,
    NVIDIA_GPU_QUERY,
    parse_compute_caps,
    parse_nvidia_gpus,
)
from autotune.devices._records import DeviceMemory, SmiParseError
from autotune.devices._release import Runner, run_tool

logger = logging.getLogger(__name__)


class _NotInstalled(Exception):
    pass


def device_memory(
    platform: str, *, run: Runner | None = None, root: Path = Path("/")
) -> DeviceMemory | None:
    """Memory of the device a single-device trial runs on: NUMA node 0, `cuda:0` or `npu:0`.

    `platform` is `cpu`, `cuda`, `ascend` or `any` (the GPU or NPU whose tool is installed,
    else the CPU). None when the tool fails or reports no memory: then nothing is estimated.
    Devices are numbered as the tools number them; CUDA_VISIBLE_DEVICES is not applied.
    """
    tools = {"cuda": _gpu0, "ascend": _npu0}
    order = {"cuda": ["cuda"], "ascend": ["ascend"], "any": ["cuda", "ascend"], "cpu": []}
    if platform not in order:
        raise ValueError(f"unknown platform {platform!r}: expected cpu, cuda, ascend or any")
    for candidate in order[platform]:
        try:
            return tools[candidate](run or run_tool)
        except _NotInstalled:
            continue
        except (subprocess.SubprocessError, SmiParseError, OSError) as err:
            logger.warning("cannot read %s device memory: %s", candidate, err)
            return None
    if platform != "any" and platform != "cpu":
        logger.warning("no device tool for %s is installed: memory unknown", platform)
        return None
    return cpu_memory(0, root)


def gpu_compute_capability(*, run: Runner | None = None) -> tuple[int, int] | None:
    """The lowest compute capability of the host's GPUs, as nvidia-smi reports it; None when
    nvidia-smi is not installed, fails or reports none (then nothing is judged by it)."""
    try:
        caps = parse_compute_caps(_output(run or run_tool, list(NVIDIA_COMPUTE_CAP_QUERY)))
    except _NotInstalled:
        return None
    except (subprocess.SubprocessError, SmiParseError, OSError) as err:
        logger.warning("cannot read the GPUs' compute capability: %s", err)
        return None
    return min(caps, default=None)


def _gpu0(run: Runner) -> DeviceMemory | None:
    gpus = sorted(parse_nvidia_gpus(_output(run, list(NVIDIA_GPU_QUERY))), key=lambda g: g.index)
    return gpus[0].memory() if gpus else None


def _npu0(run: Runner) -> DeviceMemory | None:
    devices = parse_npu_smi_info(_output(run, list(NPU_SMI_INFO))).devices
    return min(devices, key=lambda d: (d.npu, d.chip)).memory()


def _output(run: Runner, argv: list[str]) -> str:
    try:
        return run(argv)
    except FileNotFoundError as err:
        raise _NotInstalled(argv[0]) from err
