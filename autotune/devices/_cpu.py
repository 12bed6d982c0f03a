"""Host memory of one NUMA node, computed exactly as vLLM's CPU backend computes it.

vLLM 0.32 (`vllm/utils/cpu_resource_utils.py: get_memory_node_info`) sizes the CPU KV cache and
checks `gpu_memory_utilization` against these numbers, not against `free`: total is the node's
MemTotal, available is MemFree + Active(file) + Inactive(file) + SReclaimable, both clamped to
the cgroup memory limit when one is set below MemTotal. Without per-node meminfo (no NUMA
nodes exposed) it falls back to psutil's system-wide numbers, and on macOS always does.
"""

from __future__ import annotations

import sys
from pathlib import Path

import psutil

from autotune.devices._records import DeviceMemory

_UNLIMITED_V1 = 1 << 62  # cgroup v1 reports "no limit" as a value near PAGE_COUNTER_MAX


def cpu_memory(node: int = 0, root: Path = Path("/")) -> DeviceMemory:
    """Total and available memory of NUMA node `node` as vLLM sees it (`root`: for tests)."""
    device = f"cpu:node{node}"
    if sys.platform == "darwin":
        return _psutil_memory(device)
    meminfo_path = root / "sys/devices/system/node" / f"node{node}" / "meminfo"
    if not meminfo_path.exists():
        return _psutil_memory(device)
    meminfo = _read_node_meminfo(meminfo_path)
    total = meminfo["MemTotal"]
    available = (
        meminfo["MemFree"]
        + meminfo["Active(file)"]
        + meminfo["Inactive(file)"]
        + meminfo["SReclaimable"]
    )
    limit, usage = _cgroup_limit_and_usage(root)
    if limit is not None and limit < total:
        total = limit
        available = max(0, min(available, limit - (usage or 0)))
    return DeviceMemory(device=device, total_bytes=total, available_bytes=available)


def _psutil_memory(device: str) -> DeviceMemory:
    vm = psutil.virtual_memory()
    return DeviceMemory(device=device, total_bytes=vm.total, available_bytes=vm.available)


def _read_node_meminfo(path: Path) -> dict[str, int]:
    """`Node 0 MemTotal:       12019916 kB` lines, in bytes by key."""
    meminfo: dict[str, int] = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        meminfo[parts[2].rstrip(":")] = int(parts[3]) * 1024
    return meminfo


def _cgroup_limit_and_usage(root: Path) -> tuple[int | None, int | None]:
    """The cgroup memory limit and current usage in bytes (v2, else v1), None where unset."""
    if sys.platform != "linux":
        return None, None
    cgroup = root / "sys/fs/cgroup"
    v2_limit = _read_int(cgroup / "memory.max")
    if v2_limit is not None:
        return v2_limit, _read_int(cgroup / "memory.current")
    v1_limit = _read_int(cgroup / "memory/memory.limit_in_bytes")
    if v1_limit is None or v1_limit >= _UNLIMITED_V1:
        return None, None
    return v1_limit, _read_int(cgroup / "memory/memory.usage_in_bytes")


def _read_int(path: Path) -> int | None:
    """An integer file's value; None when absent, empty, `max` or not a number."""
    try:
        value = path.read_text().strip()
    except OSError:
        return None
    if not value or value == "max":
        return None
    try:
        return int(value)
    except ValueError:
        return None
