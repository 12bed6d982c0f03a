"""What nvidia-smi's CSV queries say about GPUs and the processes holding their memory: the
reader of NVIDIA GPUs where NVML cannot be loaded (`_nvml.py` chooses).

The parsers take the output of `--format=csv,noheader,nounits` and also accept it with the
header line and the ` MiB` units (`--format=csv`). A field nvidia-smi cannot give reads
`[N/A]` or `[Not Supported]`; it becomes None.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from autotune.devices._records import MIB, DeviceMemory, DeviceProcess, SmiParseError, ToolRunner
from autotune.devices._topology import NVIDIA_TOPO, Topology, parse_topology

logger = logging.getLogger(__name__)

NVIDIA_GPU_QUERY = (
    "nvidia-smi",
    "--query-gpu=index,uuid,name,memory.total,memory.used,memory.free",
    "--format=csv,noheader,nounits",
)
NVIDIA_APPS_QUERY = (
    "nvidia-smi",
    "--query-compute-apps=gpu_uuid,pid,used_memory",
    "--format=csv,noheader,nounits",
)

# One line per GPU: `8.6`, `9.0`, `12.0` (the major and minor version of its architecture).
NVIDIA_COMPUTE_CAP_QUERY = ("nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader")

_MISSING = frozenset({"[N/A]", "[Not Supported]", "N/A", "[Unknown Error]", ""})


@dataclass(frozen=True)
class NvidiaGpu:
    """One GPU as `nvidia-smi --query-gpu` lists it; memory in bytes, None where unknown."""

    index: int
    uuid: str
    name: str
    total_bytes: int | None
    used_bytes: int | None
    free_bytes: int | None

    @property
    def device(self) -> str:
        return f"cuda:{self.index}"

    def memory(self) -> DeviceMemory | None:
        """Total and free memory, or None where the GPU does not report them (unified memory)."""
        if self.total_bytes is None or self.free_bytes is None:
            return None
        return DeviceMemory(self.device, self.total_bytes, self.free_bytes)


def parse_nvidia_gpus(text: str) -> list[NvidiaGpu]:
    """GPUs from `nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.used,memory.free`."""
    gpus = []
    for fields in _csv_rows(text, header_starts="index"):
        if len(fields) < 6:
            raise SmiParseError(f"expected 6 fields in a --query-gpu line, got {fields!r}")
        index = _int_field(fields[0])
        if index is None:
            raise SmiParseError(f"GPU index is not a number: {fields!r}")
        # A name with a comma would split in two: the name is what lies between uuid and memory.
        gpus.append(
            NvidiaGpu(
                index=index,
                uuid=fields[1],
                name=", ".join(fields[2:-3]),
                total_bytes=_mib_field(fields[-3]),
                used_bytes=_mib_field(fields[-2]),
                free_bytes=_mib_field(fields[-1]),
            )
        )
    return gpus


def parse_nvidia_apps(
    text: str, uuid_to_device: Mapping[str, str] | None = None
) -> list[DeviceProcess]:
    """Processes from `nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory`.

    A process's device is `uuid_to_device[gpu_uuid]` (see `gpu_devices`) or, unmapped, the UUID.
    Blank output means no process holds a GPU. A row whose pid nvidia-smi cannot give is left
    out: it cannot be matched to a process of ours.
    """
    names = uuid_to_device or {}
    processes = []
    for fields in _csv_rows(text, header_starts="gpu_uuid"):
        if len(fields) != 3:
            raise SmiParseError(f"expected 3 fields in a --query-compute-apps line, got {fields!r}")
        uuid, pid_text, used_text = fields
        pid = _int_field(pid_text)
        if pid is None:
            logger.debug("nvidia-smi lists a process without a pid on %s: %r", uuid, fields)
            continue
        device = names.get(uuid, uuid)
        processes.append(DeviceProcess(device=device, pid=pid, used_bytes=_mib_field(used_text)))
    return processes


def parse_compute_caps(text: str) -> list[tuple[int, int]]:
    """(major, minor) of each GPU from `nvidia-smi --query-gpu=compute_cap`, in its order; a
    GPU that reports none (`[N/A]`) is left out."""
    caps = []
    for fields in _csv_rows(text, header_starts="compute_cap"):
        value = fields[0]
        if value in _MISSING:
            continue
        major, dot, minor = value.partition(".")
        if not (dot and major.isdigit() and minor.isdigit()):
            raise SmiParseError(f"not a compute capability: {value!r}")
        caps.append((int(major), int(minor)))
    return caps


def gpu_devices(gpus: list[NvidiaGpu]) -> dict[str, str]:
    """UUID -> `cuda:INDEX`, to name the devices of `parse_nvidia_apps`."""
    return {gpu.uuid: gpu.device for gpu in gpus}


@dataclass(frozen=True)
class SmiReader:
    """NVIDIA GPUs read from nvidia-smi's output, each query run by `run` (`run_tool`, or a
    test's recorded output); the same answers as `NvmlReader`'s."""

    run: ToolRunner
    source = "nvidia-smi"

    def gpus(self) -> list[NvidiaGpu]:
        return parse_nvidia_gpus(self.run(list(NVIDIA_GPU_QUERY)))

    def apps(self, names: Mapping[str, str] | None = None) -> list[DeviceProcess]:
        """Processes holding GPU memory, on `cuda:INDEX` where `names` maps their GPU's UUID
        (`gpu_devices`), else on the UUID."""
        return parse_nvidia_apps(self.run(list(NVIDIA_APPS_QUERY)), names)

    def compute_caps(self) -> list[tuple[int, int]]:
        return parse_compute_caps(self.run(list(NVIDIA_COMPUTE_CAP_QUERY)))

    def topology(self) -> Topology:
        return parse_topology(self.run(list(NVIDIA_TOPO)))


def _csv_rows(text: str, header_starts: str) -> list[list[str]]:
    rows = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith(header_starts):
            continue
        rows.append([field.strip() for field in line.split(",")])
    return rows


def _int_field(value: str) -> int | None:
    if value in _MISSING:
        return None
    try:
        return int(value)
    except ValueError as err:
        raise SmiParseError(f"not a number: {value!r}") from err


def _mib_field(value: str) -> int | None:
    """`21963` or `21963 MiB` -> bytes; `[N/A]` -> None."""
    number = value.removesuffix("MiB").strip()
    mib = _int_field(number)
    return None if mib is None else mib * MIB
