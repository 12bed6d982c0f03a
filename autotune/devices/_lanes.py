"""How many trials run at once on this host, and the pool they lease their devices from.

`--parallel N` runs N trials side by side; `auto` runs one per device (GPU, NPU) or one per
NUMA node (CPU). On GPU and NPU hosts the pool holds the devices (limited by `--devices`) and
each trial leases tensor x pipeline parallel of them. On CPU the cores are split into N
disjoint slots (`split_cpu`) that share the memory; a CPU study with one trial at a time and no
`--devices` needs no pool: its engine gets every core, as without the tuner.
"""

from __future__ import annotations

from pathlib import Path

from autotune.devices._cpu_slots import split_cpu
from autotune.devices._discover import Runner
from autotune.devices._inventory import DeviceError
from autotune.devices._pool import DevicePool
from autotune.devices._selection import discover_selected


def plan_lanes(
    platform: str,
    parallel: int | str,
    devices: str | None = None,
    *,
    run: Runner | None = None,
    root: Path = Path("/"),
) -> tuple[DevicePool | None, int]:
    """(pool, trials at once) for a space of `platform` (cpu, cuda, ascend, or any: whatever
    the host has). Raises DeviceError when the host cannot give what was asked."""
    if parallel != "auto" and (not isinstance(parallel, int) or parallel < 1):
        raise DeviceError(f"--parallel must be a number >= 1 or auto, not {parallel!r}")
    if platform == "cpu" and parallel == 1 and devices is None:
        return None, 1
    inventory = discover_selected(
        "auto" if platform == "any" else platform, devices, run=run, root=root
    )
    if inventory.platform == "cpu":
        lanes = len(inventory.devices) if parallel == "auto" else int(parallel)
        return DevicePool(split_cpu(inventory, lanes, root=root)), lanes
    pool = DevicePool(inventory)
    lanes = pool.size if parallel == "auto" else int(parallel)
    if lanes > pool.size:
        raise DeviceError(
            f"--parallel {lanes} needs at least {lanes} {inventory.platform} devices; "
            f"{pool.size} are given"
        )
    return pool, lanes
