"""A check's outcome, and the host inputs the checks read (each replaceable by a test)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import psutil

from autotune.devices import Inventory, run_tool

Status = Literal["ok", "warn", "fail"]
GIB = 1 << 30


@dataclass(frozen=True)
class Check:
    """One check: `detail` says what was found, `fix` what to do about it when not ok."""

    name: str
    status: Status
    detail: str
    fix: str = ""

    @property
    def ok(self) -> bool:
        """Passed, perhaps with a warning."""
        return self.status != "fail"


@dataclass(frozen=True)
class HostInputs:
    """Where the checks read the host."""

    root: Path = Path("/")  # sysfs and procfs (/proc/cpuinfo, NUMA nodes, /proc/PID/maps)
    run: Callable[[list[str]], str] = run_tool  # device tools (npu-smi, nvidia-smi)
    processes: Callable[[], Iterable[psutil.Process]] = psutil.process_iter
    shm_dir: Path | None = None  # None: /dev/shm
    loopback: str = "127.0.0.1"
    cpu_kvcache_space_gib: float | None = None  # VLLM_CPU_KVCACHE_SPACE, read by the CLI


def free_bytes(inventory: Inventory, device_id: int) -> int | None:
    """Memory of a device not in use now (on CPU: what vLLM counts as available)."""
    device = inventory.device(device_id)
    if device.total_bytes is None or device.used_bytes is None:
        return None
    return device.total_bytes - device.used_bytes


def size_text(value: int | None) -> str:
    """`12.3 GiB`, `7 MiB`."""
    if value is None:
        return "?"
    return f"{value / GIB:.1f} GiB" if value >= GIB else f"{value / (1 << 20):.0f} MiB"
