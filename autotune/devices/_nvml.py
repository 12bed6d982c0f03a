"""NVIDIA GPUs read through NVML (`pynvml`, from nvidia-ml-py: the library vLLM's CUDA platform
reads them with, and nvidia-smi's own), and the choice between it and nvidia-smi's text
(`_nvidia.py`), the fallback where NVML cannot be loaded (no nvidia-ml-py, or no driver library).

Both readers answer alike: GPUs by NVML's index, which is nvidia-smi's (PCI bus order; trials run
with `CUDA_DEVICE_ORDER=PCI_BUS_ID`), processes on `cuda:INDEX`, and the links between GPUs named
as `nvidia-smi topo -m` names them: `NV#` where NVLink joins two GPUs (# the links between the
two, or every active link of the GPU where an NVSwitch stands between them, as nvidia-smi prints
NV18 on an H100 SXM host), else the PCIe path through their nearest common ancestor.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import ModuleType
from typing import Any, Protocol

from autotune.devices._numa import format_cpulist
from autotune.devices._nvidia import NvidiaGpu, SmiReader
from autotune.devices._records import DeviceProcess, ToolRunner, run_tool
from autotune.devices._topology import Topology

logger = logging.getLogger(__name__)

# nvmlDeviceGetTopologyCommonAncestor's levels (NVML_TOPOLOGY_*) as `nvidia-smi topo -m` names them.
_ANCESTORS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


class NvidiaReader(Protocol):
    """What the tuner reads of a host's NVIDIA GPUs; `source` names where from, for the user."""

    source: str

    def gpus(self) -> list[NvidiaGpu]: ...

    def apps(self, names: Mapping[str, str] | None = None) -> list[DeviceProcess]: ...

    def compute_caps(self) -> list[tuple[int, int]]: ...

    def topology(self) -> Topology: ...


class NvmlError(OSError):
    """NVML answered a query with an error (a device tool that failed, as the callers see it)."""


def nvidia_reader(run: ToolRunner | None = None) -> NvidiaReader:
    """NVML where the host's own tools are asked for (`run` None or `run_tool`) and NVML loads;
    nvidia-smi through `run` otherwise (a test's recorded output, or a host without NVML)."""
    if run is None or run is run_tool:
        nvml = _module()
        if nvml is not None and _loads(nvml):
            return NvmlReader(nvml)
    return SmiReader(run or run_tool)


def _module() -> ModuleType | None:
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def _loads(nvml: ModuleType) -> bool:
    """Whether NVML initialises here (no more than nvidia-smi does at each run)."""
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as err:
        logger.debug("NVML cannot be loaded (%s): GPUs are read with nvidia-smi", err)
        return False
    nvml.nvmlShutdown()
    return True


class NvmlReader:
    """NVIDIA GPUs read through `nvml` (the `pynvml` module, or a stand-in of it), one NVML
    session per read; NVML's errors are raised as NvmlError."""

    source = "NVML"

    def __init__(self, nvml: ModuleType) -> None:
        self._nvml = nvml

    @contextmanager
    def _handles(self) -> Iterator[list[Any]]:
        nvml = self._nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as err:
            raise NvmlError(f"NVML: {err}") from err
        try:
            yield [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        except nvml.NVMLError as err:
            raise NvmlError(f"NVML: {err}") from err
        finally:
            nvml.nvmlShutdown()

    def gpus(self) -> list[NvidiaGpu]:
        nvml = self._nvml
        gpus = []
        with self._handles() as handles:
            for index, handle in enumerate(handles):
                try:
                    memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                    total, used, free = memory.total, memory.used, memory.free
                except nvml.NVMLError:  # unified memory (GH200, GB10) reports none
                    total = used = free = None
                name = _text(nvml.nvmlDeviceGetName(handle))
                uuid = _text(nvml.nvmlDeviceGetUUID(handle))
                gpus.append(NvidiaGpu(index, uuid, name, total, used, free))
        return gpus

    def apps(self, names: Mapping[str, str] | None = None) -> list[DeviceProcess]:
        """Processes holding GPU memory (`names` is not needed: NVML knows each GPU's index)."""
        nvml = self._nvml
        with self._handles() as handles:
            return [
                DeviceProcess(f"cuda:{index}", proc.pid, proc.usedGpuMemory)
                for index, handle in enumerate(handles)
                for proc in nvml.nvmlDeviceGetComputeRunningProcesses(handle)
            ]

    def compute_caps(self) -> list[tuple[int, int]]:
        nvml = self._nvml
        with self._handles() as handles:
            caps = [nvml.nvmlDeviceGetCudaComputeCapability(h) for h in handles]
        return [(int(major), int(minor)) for major, minor in caps]

    def topology(self) -> Topology:
        links: dict[tuple[int, int], str] = {}
        cpu_affinity: dict[int, str] = {}
        numa_affinity: dict[int, int] = {}
        with self._handles() as handles:
            nvlinks = [self._nvlinks(h) for h in handles]
            buses = [_text(self._nvml.nvmlDeviceGetPciInfo(h).busId) for h in handles]
            for a, handle in enumerate(handles):
                for b, peer in enumerate(handles):
                    if a != b:
                        links[(a, b)] = self._link(handle, peer, nvlinks[a], buses[b])
                if cpus := self._cpus(handle):
                    cpu_affinity[a] = format_cpulist(cpus)
                if (node := self._numa_node(handle)) is not None:
                    numa_affinity[a] = node
        return Topology(links, cpu_affinity, numa_affinity)

    def _link(self, handle: Any, peer: Any, nvlinks: list[str], peer_bus: str) -> str:
        nvml = self._nvml
        status = nvml.nvmlDeviceGetP2PStatus(handle, peer, nvml.NVML_P2P_CAPS_INDEX_NVLINK)
        if status == nvml.NVML_P2P_STATUS_OK and nvlinks:
            return f"NV{sum(bus == peer_bus for bus in nvlinks) or len(nvlinks)}"
        level = nvml.nvmlDeviceGetTopologyCommonAncestor(handle, peer)
        return _ANCESTORS.get(int(level), "SYS")

    def _nvlinks(self, handle: Any) -> list[str]:
        """The PCI bus id at the far end of each of the GPU's active NVLinks (a peer GPU's, or
        an NVSwitch's); [] where it has none."""
        nvml = self._nvml
        remote = []
        for link in range(nvml.NVML_NVLINK_MAX_LINKS):
            try:
                if nvml.nvmlDeviceGetNvLinkState(handle, link) != nvml.NVML_FEATURE_ENABLED:
                    continue
                remote.append(_text(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId))
            except nvml.NVMLError:  # no such link (NOT_SUPPORTED, INVALID_ARGUMENT): the last
                break
        return remote

    def _cpus(self, handle: Any) -> list[int]:
        """The CPUs NVML names as the GPU's affinity (a bitmask of 64-bit words)."""
        words = max(1, ((os.cpu_count() or 64) + 63) // 64)
        try:
            mask = self._nvml.nvmlDeviceGetCpuAffinity(handle, words)
        except self._nvml.NVMLError:
            return []
        return [
            w * 64 + bit for w, word in enumerate(mask) for bit in range(64) if int(word) >> bit & 1
        ]

    def _numa_node(self, handle: Any) -> int | None:
        try:
            node = int(self._nvml.nvmlDeviceGetNumaNodeId(handle))
        except (self._nvml.NVMLError, AttributeError):  # an older driver or nvidia-ml-py
            return None
        return node if node >= 0 else None


def _text(value: str | bytes) -> str:
    """NVML's strings: `str` from recent nvidia-ml-py, `bytes` from older ones."""
    return value.decode() if isinstance(value, bytes) else value
