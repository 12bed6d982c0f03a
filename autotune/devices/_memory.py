"""The memory a trial's device has now, to judge whether a config fits before launching it."""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Sequence
from pathlib import Path

from autotune.devices._ascend import NPU_SMI_INFO, parse_npu_smi_info
from autotune.devices._cpu import cpu_memory
from autotune.devices._nvml import nvidia_reader
from autotune.devices._records import DeviceMemory, SmiParseError, ToolRunner, run_tool
from autotune.vocab.platform import AnyPlatform, Platform

logger = logging.getLogger(__name__)


class _NotInstalled(Exception):
    pass


def device_memory(
    platform: AnyPlatform,
    ids: Sequence[int] | None = None,
    *,
    run: ToolRunner | None = None,
    root: Path = Path("/"),
) -> DeviceMemory | None:
    """Memory of the devices a trial runs on: the tightest of `ids` (a tensor-parallel trial's
    every worker must fit its own device), numbered as the device pool numbers them (the
    tools' indices; on Atlas A3, the chips in listing order); without `ids`, `cuda:0` or the
    first NPU. On CPU: NUMA node 0.

    `platform` is `cpu`, `cuda`, `ascend` or `any` (the GPU or NPU whose tool is installed,
    else the CPU). None when the tool fails or reports no memory: then nothing is estimated.
    """
    tools = {Platform.CUDA: _gpus, Platform.ASCEND: _npus}
    order: dict[str, list[Platform]] = {
        Platform.CUDA: [Platform.CUDA],
        Platform.ASCEND: [Platform.ASCEND],
        "any": [Platform.CUDA, Platform.ASCEND],
        Platform.CPU: [],
    }
    if platform not in order:
        raise ValueError(f"unknown platform {platform!r}: expected cpu, cuda, ascend or any")
    for candidate in order[platform]:
        try:
            memories = tools[candidate](run or run_tool)
        except _NotInstalled:
            continue
        except (subprocess.SubprocessError, SmiParseError, OSError) as err:
            logger.warning("cannot read %s device memory: %s", candidate, err)
            return None
        return _tightest(memories, ids)
    if platform != "any" and platform != Platform.CPU:
        logger.warning("no device tool for %s is installed: memory unknown", platform)
        return None
    return cpu_memory(0, root)


def _tightest(
    memories: dict[int, DeviceMemory | None], ids: Sequence[int] | None
) -> DeviceMemory | None:
    """The memory of the device of `ids` with the least available (the first device without
    `ids`); None where one of them reports none or is not listed."""
    if not memories:
        return None
    chosen = [min(memories)] if ids is None else list(ids)
    found = [memories.get(i) for i in chosen]
    if any(m is None for m in found):
        return None
    return min((m for m in found if m is not None), key=lambda m: m.available_bytes)


def gpu_compute_capability(*, run: ToolRunner | None = None) -> tuple[int, int] | None:
    """The lowest compute capability of the host's GPUs, as NVML (else nvidia-smi) reports it;
    None when neither is there, one fails or reports none (then nothing is judged by it)."""
    try:
        caps = nvidia_reader(run).compute_caps()
    except FileNotFoundError:
        return None
    except (subprocess.SubprocessError, SmiParseError, OSError) as err:
        logger.warning("cannot read the GPUs' compute capability: %s", err)
        return None
    return min(caps, default=None)


def _gpus(run: ToolRunner) -> dict[int, DeviceMemory | None]:
    try:
        gpus = nvidia_reader(run).gpus()
    except FileNotFoundError as err:
        raise _NotInstalled("nvidia-smi") from err
    return {g.index: g.memory() for g in gpus}


def _npus(run: ToolRunner) -> dict[int, DeviceMemory | None]:
    """By the pool's ids (the runtime's, `NpuDevice.id`)."""
    devices = parse_npu_smi_info(_output(run, list(NPU_SMI_INFO))).devices
    return {d.id: d.memory() for d in devices}


def _output(run: ToolRunner, argv: list[str]) -> str:
    try:
        return run(argv)
    except FileNotFoundError as err:
        raise _NotInstalled(argv[0]) from err
