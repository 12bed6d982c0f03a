"""How many trials run at once on this host, and the pool they lease their devices from.

`--parallel N` runs N trials side by side; `auto` runs one per device (GPU, NPU) or one per
NUMA node (CPU). On GPU and NPU hosts the pool holds the devices (limited by `--devices`) and
each trial leases tensor x pipeline parallel of them. On CPU the cores are split into N
disjoint slots (`split_cpu`) that share the memory; a CPU study with one trial at a time and no
`--devices` needs no pool: its engine gets every core, as without the tuner.
"""

from __future__ import annotations

import logging
from pathlib import Path

from autotune.devices._cpu_slots import split_cpu
from autotune.devices._inventory import DeviceError, Inventory
from autotune.devices._pool import DevicePool
from autotune.devices._records import DeviceProcess, ToolRunner, run_tool
from autotune.devices._release import process_reader
from autotune.devices._selection import discover_selected, select_devices
from autotune.vocab.platform import AnyPlatform, Platform

logger = logging.getLogger(__name__)


def plan_lanes(
    platform: AnyPlatform,
    parallel: int | str,
    devices: str | None = None,
    *,
    busy_share: float = 1.0,
    run: ToolRunner | None = None,
    root: Path = Path("/"),
) -> tuple[DevicePool | None, int]:
    """(pool, trials at once) for a space of `platform` (cpu, cuda, ascend, or any: whatever
    the host has). A GPU or NPU that another job holds (`without_busy`, above `busy_share`
    of its memory in use, or a process on it) is left out. Raises DeviceError when the host
    cannot give what was asked."""
    if parallel != "auto" and (not isinstance(parallel, int) or parallel < 1):
        raise DeviceError(f"--parallel must be a number >= 1 or auto, not {parallel!r}")
    if platform == Platform.CPU and parallel == 1 and devices is None:
        return None, 1
    inventory = discover_selected(
        "auto" if platform == "any" else platform, devices, run=run, root=root
    )
    if inventory.platform == Platform.CPU:
        lanes = len(inventory.devices) if parallel == "auto" else int(parallel)
        return DevicePool(split_cpu(inventory, lanes, root=root)), lanes
    inventory = without_busy(inventory, busy_share, run or run_tool)
    pool = DevicePool(inventory)
    lanes = pool.size if parallel == "auto" else int(parallel)
    if lanes > pool.size:
        raise DeviceError(
            f"--parallel {lanes} needs at least {lanes} {inventory.platform} devices; "
            f"{pool.size} are given"
        )
    return pool, lanes


def without_busy(inventory: Inventory, busy_share: float, run: ToolRunner) -> Inventory:
    """The GPUs or NPUs of `inventory` that no other job holds: used memory at most
    `busy_share` of the total (an idle 910B reports about 3.3 of 64 GB in use, an idle GPU a
    few hundred MB) and no process listed on it. One line per device left out; DeviceError
    when none is left."""
    held = {p.device for p in _processes(inventory.platform, run)}
    prefix = "cuda" if inventory.platform == Platform.CUDA else "npu"
    busy: dict[int, str] = {}
    for d in inventory.devices:
        if d.total_bytes and d.used_bytes is not None and d.used_bytes > busy_share * d.total_bytes:
            busy[d.id] = f"{d.used_bytes / 2**30:.1f} of {d.total_bytes / 2**30:.0f} GiB in use"
        elif f"{prefix}:{d.id}" in held:
            busy[d.id] = "a process holds memory on it"
    if not busy:
        return inventory
    for device, why in busy.items():
        logger.warning(
            "leaving %s %d out of the study: another job holds it (%s)",
            inventory.platform,
            device,
            why,
        )
    free = [d.id for d in inventory.devices if d.id not in busy]
    if not free:
        raise DeviceError(
            f"every {inventory.platform} device given is held by another job "
            f"({', '.join(f'{k}: {v}' for k, v in busy.items())}); free one, or pass --devices"
        )
    return select_devices(inventory, free)


def _processes(platform: Platform, run: ToolRunner) -> list[DeviceProcess]:
    """The processes the device tool lists (none where it cannot list them)."""
    try:
        return process_reader(platform, run)()
    except (OSError, ValueError) as err:
        logger.debug("cannot list %s processes: %s", platform, err)
        return []
