"""A stand-in of `pynvml` (nvidia-ml-py) on the simulated host of tests/sim_devices.py: the same
GPUs, memory, processes, compute capability and links as its nvidia-smi stand-in prints, through
NVML's calls, so that the tuner's two readers of NVIDIA GPUs (autotune/devices/_nvml.py) can be
held to one answer. `SIM_DEVICES` names the host's state folder, read at each call as the real
library reads the driver. A host installed with `nvml=False` has no driver library: `nvmlInit`
fails as nvidia-ml-py does where libnvidia-ml.so is missing.

In-process: `monkeypatch.setitem(sys.modules, "pynvml", sim_nvml)`. Standard library only.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import sim_devices

NVML_FEATURE_ENABLED = 1
NVML_NVLINK_MAX_LINKS = 18
NVML_P2P_CAPS_INDEX_NVLINK = 2
NVML_P2P_STATUS_OK = 0
NVML_P2P_STATUS_NOT_SUPPORTED = 5
# nvidia-smi's PCIe paths as NVML's common-ancestor levels (NVML_TOPOLOGY_*).
_LEVELS = {"PIX": 10, "PXB": 20, "PHB": 30, "NODE": 40, "SYS": 50}
_SWITCH_BUS = "00000000:FF:00.0"  # the NVSwitch at the far end of every NVLink


class NVMLError(Exception):
    pass


class NVMLError_LibraryNotFound(NVMLError):
    def __str__(self) -> str:
        return "NVML Shared Library Not Found"


class NVMLError_NotSupported(NVMLError):
    def __str__(self) -> str:
        return "Not Supported"


_sessions = 0


def _state() -> Path:
    return Path(os.environ["SIM_DEVICES"])


def _host() -> sim_devices.Host:
    return sim_devices.load_host(_state())


def nvmlInit() -> None:
    global _sessions
    if not _host().nvml:
        raise NVMLError_LibraryNotFound()
    _sessions += 1


def nvmlShutdown() -> None:
    global _sessions
    _sessions -= 1


def _open() -> None:
    if _sessions <= 0:
        raise NVMLError("Uninitialized")


def nvmlDeviceGetCount() -> int:
    _open()
    return _host().count


def nvmlDeviceGetHandleByIndex(index: int) -> int:
    _open()
    return index


def nvmlDeviceGetName(handle: int) -> bytes:
    return _host().product.encode()


def nvmlDeviceGetUUID(handle: int) -> str:
    return sim_devices._uuid(handle)


def nvmlDeviceGetMemoryInfo(handle: int) -> SimpleNamespace:
    host, used, _ = sim_devices.usage(_state())
    mib = sim_devices.MIB
    total = host.total_mib * mib
    return SimpleNamespace(total=total, used=used[handle] * mib, free=total - used[handle] * mib)


def nvmlDeviceGetComputeRunningProcesses(handle: int) -> list[SimpleNamespace]:
    _, _, processes = sim_devices.usage(_state())
    return [
        SimpleNamespace(pid=pid, usedGpuMemory=mib * sim_devices.MIB)
        for device, pid, mib in processes
        if device == handle
    ]


def nvmlDeviceGetCudaComputeCapability(handle: int) -> tuple[int, int]:
    major, minor = _host().compute_cap.split(".")
    return int(major), int(minor)


def nvmlDeviceGetPciInfo(handle: int) -> SimpleNamespace:
    return SimpleNamespace(busId=f"00000000:{0x18 + 0x10 * handle:02X}:00.0".encode())


def _matrix() -> dict[int, list[str]]:
    """The stand-in nvidia-smi's `topo -m` rows: device -> its cells (links, then affinities)."""
    text = sim_devices.nvidia_smi(_state(), ["topo", "-m"])
    rows = {}
    for line in text.splitlines()[1:]:
        if not line.startswith("GPU"):
            break
        cells = [cell.strip() for cell in line.split("\t")]
        rows[int(cells[0].removeprefix("GPU"))] = cells[1:]
    return rows


def _nvlink_count(handle: int) -> int:
    links = [cell for cell in _matrix()[handle][: _host().count] if cell.startswith("NV")]
    return int(links[0].removeprefix("NV")) if links else 0


def nvmlDeviceGetNvLinkState(handle: int, link: int) -> int:
    if link >= NVML_NVLINK_MAX_LINKS:
        raise NVMLError("Invalid Argument")
    if _nvlink_count(handle) == 0:
        raise NVMLError_NotSupported()
    return NVML_FEATURE_ENABLED if link < _nvlink_count(handle) else 0


def nvmlDeviceGetNvLinkRemotePciInfo(handle: int, link: int) -> SimpleNamespace:
    return SimpleNamespace(busId=_SWITCH_BUS)


def nvmlDeviceGetP2PStatus(a: int, b: int, index: int) -> int:
    nvlink = _matrix()[a][b].startswith("NV")
    return NVML_P2P_STATUS_OK if nvlink else NVML_P2P_STATUS_NOT_SUPPORTED


def nvmlDeviceGetTopologyCommonAncestor(a: int, b: int) -> int:
    cell = _matrix()[a][b]
    if cell not in _LEVELS:
        raise NVMLError_NotSupported()
    return _LEVELS[cell]


def nvmlDeviceGetCpuAffinity(handle: int, words: int) -> list[int]:
    cpus = _matrix()[handle][_host().count]
    mask = [0] * words
    for part in cpus.split(","):
        low, _, high = part.partition("-")
        for cpu in range(int(low), int(high or low) + 1):
            if cpu < 64 * words:
                mask[cpu // 64] |= 1 << (cpu % 64)
    return mask


def nvmlDeviceGetNumaNodeId(handle: int) -> int:
    return int(_matrix()[handle][_host().count + 1])
