"""Finding the devices of a host: NPUs (npu-smi), GPUs (nvidia-smi), else the CPU's NUMA nodes.

Accelerators come with their topology where the tool's matrix can be read (`npu-smi info -t
topo`, `nvidia-smi topo -m`); a device's NUMA node and cores are its affinity there. The CPU
inventory has one device per NUMA node that has CPUs this process may use.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Callable
from pathlib import Path

from autotune.devices._ascend import NPU_SMI_INFO, parse_npu_smi_info
from autotune.devices._cpu import cpu_memory
from autotune.devices._inventory import Device, DeviceError, DeviceKind, Inventory
from autotune.devices._numa import (
    allowed_cpus,
    format_cpulist,
    node_of,
    numa_cpus,
    online_cpus,
    parse_cpulist,
)
from autotune.devices._nvml import nvidia_reader
from autotune.devices._records import SmiParseError, ToolRunner, run_tool
from autotune.devices._topology import NPU_SMI_TOPO, Topology, parse_topology, renumbered
from autotune.vocab.platform import Platform

logger = logging.getLogger(__name__)

_TOOLS = {Platform.ASCEND: "npu-smi", Platform.CUDA: "nvidia-smi"}
_ORDER: dict[str, tuple[Platform, ...]] = {
    "auto": (Platform.ASCEND, Platform.CUDA),
    Platform.ASCEND: (Platform.ASCEND,),
    Platform.CUDA: (Platform.CUDA,),
    Platform.CPU: (),
}
_TOOL_ERRORS = (subprocess.SubprocessError, SmiParseError, OSError)


def discover(
    platform: str = "auto", *, run: ToolRunner | None = None, root: Path = Path("/")
) -> Inventory:
    """The devices of `platform`: `ascend`, `cuda`, `cpu`, or `auto`.

    `auto` takes the first installed tool of npu-smi and nvidia-smi that lists a device, else
    the CPU; a tool that is installed but fails is logged and passed over. An explicit `ascend`
    or `cuda` raises DeviceError when its tool is missing, fails or lists nothing. `run` runs a
    tool's argv and returns its stdout (default `run_tool`); `root` is where sysfs and procfs
    are read (for tests).
    """
    if platform not in _ORDER:
        raise DeviceError(f"unknown platform {platform!r}: expected auto, cpu, cuda or ascend")
    runner = run or run_tool
    readers: dict[Platform, Callable[[ToolRunner, Path], Inventory]] = {
        Platform.ASCEND: _ascend_inventory,
        Platform.CUDA: _cuda_inventory,
    }
    for candidate in _ORDER[platform]:
        tool, level = _TOOLS[candidate], logging.WARNING
        try:
            found = readers[candidate](runner, root)
        except FileNotFoundError:
            problem = f"{tool} is not installed: cannot list {candidate} devices"
            level = logging.DEBUG
        except SmiParseError as err:
            problem = f"{tool} output not understood: {_first_line(err)}"
        except _TOOL_ERRORS as err:
            problem = f"{tool} failed: {_first_line(err)}"
        else:
            if found.devices:
                return found
            problem = f"{tool} lists no device"
        if platform == candidate:
            raise DeviceError(problem)
        logger.log(level, "%s; trying the next platform", problem)
    return _cpu_inventory(root)


def _ascend_inventory(run: ToolRunner, root: Path) -> Inventory:
    chips = parse_npu_smi_info(run(list(NPU_SMI_INFO))).devices
    # Ids are the runtime's (`NpuDevice.id`): in a container given host NPUs 4-7 they are 0-3,
    # and the name says which NPU npu-smi shows. One chip per NPU (A2): the topology matrix,
    # which names NPUs as npu-smi does, is renumbered to match. Several (A3): the matrix names
    # NPUs, not chips: it is not used.
    one_chip_each = len({chip.npu for chip in chips}) == len(chips)
    topology = None
    if one_chip_each:
        read = lambda: parse_topology(run(list(NPU_SMI_TOPO)))  # noqa: E731
        if (matrix := _topology(read, "npu-smi info -t topo")) is not None:
            topology = renumbered(matrix, {chip.npu: chip.id for chip in chips})
    nodes = numa_cpus(root)
    devices = []
    for chip in chips:
        if not one_chip_each:
            name = f"{chip.name} (NPU {chip.npu} chip {chip.chip})"
        else:
            name = chip.name if chip.id == chip.npu else f"{chip.name} (npu-smi NPU {chip.npu})"
        memory = (chip.hbm_total_bytes, chip.hbm_used_bytes)
        devices.append(_accelerator(chip.id, name, "npu", memory, topology, nodes))
    return Inventory(Platform.ASCEND, devices, topology)


def _cuda_inventory(run: ToolRunner, root: Path) -> Inventory:
    """GPUs through NVML, else nvidia-smi (`nvidia_reader`)."""
    reader = nvidia_reader(run)
    gpus = sorted(reader.gpus(), key=lambda g: g.index)
    topology = _topology(reader.topology, f"{reader.source}'s topology")
    nodes = numa_cpus(root)
    devices = [
        _accelerator(gpu.index, gpu.name, "gpu", (gpu.total_bytes, gpu.used_bytes), topology, nodes)
        for gpu in gpus
    ]
    return Inventory(Platform.CUDA, devices, topology, source=reader.source)


def _accelerator(
    device_id: int,
    name: str,
    kind: DeviceKind,
    memory: tuple[int | None, int | None],
    topology: Topology | None,
    nodes: dict[int, list[int]],
) -> Device:
    """An NPU or GPU, with its NUMA node and cores from the topology's affinities."""
    cores = topology.cpu_affinity.get(device_id) if topology else None
    numa = topology.numa_affinity.get(device_id) if topology else None
    if numa is None and cores is not None:
        numa = node_of(parse_cpulist(cores), nodes)
    return Device(device_id, name, memory[0], memory[1], kind, numa, cores)


def _topology(read: Callable[[], Topology], what: str) -> Topology | None:
    """The devices' topology; None (logged) where it cannot be read."""
    try:
        return read()
    except (*_TOOL_ERRORS, ValueError) as err:
        logger.info("no topology from %s: %s", what, _first_line(err))
        return None


def _cpu_inventory(root: Path) -> Inventory:
    nodes = numa_cpus(root) or {0: online_cpus(root)}
    allowed = allowed_cpus(root)
    name = _cpu_model(root)
    devices = []
    for node, cpus in nodes.items():
        usable = [cpu for cpu in cpus if allowed is None or cpu in allowed]
        if not usable:
            continue  # a memory-only node, or one whose CPUs this process may not use
        memory = cpu_memory(node, root)
        used = memory.total_bytes - memory.available_bytes
        devices.append(
            Device(node, name, memory.total_bytes, used, "cpu", node, format_cpulist(usable))
        )
    if not devices:
        raise DeviceError("no CPU of any NUMA node is available to this process")
    return Inventory(Platform.CPU, devices)


def _cpu_model(root: Path) -> str:
    try:
        text = (root / "proc/cpuinfo").read_text()
    except OSError:
        return "cpu"
    for line in text.splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "cpu"


def _first_line(err: BaseException) -> str:
    """One line for an error: its message, and what the tool wrote to stderr where it did."""
    lines = str(err).strip().splitlines()
    text = lines[0] if lines else type(err).__name__
    stderr = getattr(err, "stderr", None)
    if isinstance(stderr, str) and stderr.strip():
        text = f"{text}: {stderr.strip().splitlines()[0]}"
    return text
