"""`--devices 0-3,6`: the device list a user gives, and limiting an inventory to it; and the
selection the user already made for every program (`CUDA_VISIBLE_DEVICES=4,5,6,7`,
`ASCEND_RT_VISIBLE_DEVICES`), inherited as the pool that `--devices` narrows."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from autotune.devices._discover import discover
from autotune.devices._inventory import VISIBLE_DEVICES, DeviceError, Inventory
from autotune.devices._numa import format_cpulist
from autotune.devices._records import ToolRunner

logger = logging.getLogger(__name__)

_SINGLE = re.compile(r"^\d+$")
_RANGE = re.compile(r"^(\d+)\s*-\s*(\d+)$")
_NEGATIVE = re.compile(r"^-\s*\d")


def parse_device_list(text: str) -> list[int]:
    """`0-3,6` -> [0, 1, 2, 3, 6], in the order written.

    Raises DeviceError (a ValueError) with a one-line message for an empty list or item, a
    range that is not `LOW-HIGH` with LOW <= HIGH, a negative id, or an id listed twice.
    """
    if not text.strip():
        raise DeviceError("--devices is empty: give ids such as 0-3,6")
    ids: list[int] = []
    for item in (part.strip() for part in text.split(",")):
        ids.extend(_item(item, text))
    seen: set[int] = set()
    for device in ids:
        if device in seen:
            raise DeviceError(f"device {device} is listed twice in --devices {text.strip()!r}")
        seen.add(device)
    return ids


def _item(item: str, text: str) -> list[int]:
    where = f"in --devices {text.strip()!r}"
    if not item:
        raise DeviceError(f"empty item {where}: give ids such as 0-3,6")
    if _SINGLE.match(item):
        return [int(item)]
    if _NEGATIVE.match(item):
        raise DeviceError(f"negative device id {item!r} {where}")
    match = _RANGE.match(item)
    if match is None:
        raise DeviceError(f"bad item {item!r} {where}: expected an id (3) or a range (0-3)")
    low, high = int(match[1]), int(match[2])
    if low > high:
        raise DeviceError(f"bad range {item!r} {where}: its start is above its end")
    return list(range(low, high + 1))


def format_device_list(ids: list[int]) -> str:
    """[0, 1, 2, 3, 6] -> `0-3,6`; the inverse of `parse_device_list` for sorted ids."""
    return format_cpulist(ids)


def select_devices(inventory: Inventory, ids: list[int], where: str = "on this host") -> Inventory:
    """The inventory limited to `ids` (in id order). Raises DeviceError naming unknown ids
    (`where`: what holds the inventory, for that line)."""
    known = set(inventory.ids)
    unknown = [device for device in ids if device not in known]
    if unknown:
        noun = "device" if len(unknown) == 1 else "devices"
        available = format_device_list(inventory.ids) or "none"
        raise DeviceError(
            f"no {inventory.platform} {noun} {format_device_list(unknown)} {where}: "
            f"available are {available}"
        )
    wanted = set(ids)
    return replace(inventory, devices=[d for d in inventory.devices if d.id in wanted])


def discover_selected(
    platform: str,
    devices: str | None,
    *,
    run: ToolRunner | None = None,
    root: Path = Path("/"),
    env: Mapping[str, str] | None = None,
) -> Inventory:
    """`discover(platform)` limited to the selection inherited from `env` (default: this
    process's; see `inherited`), then to the `--devices` list within it, if one is given. The
    list is checked first, so that a malformed one runs no device tool."""
    wanted = parse_device_list(devices) if devices is not None else None
    inventory = discover(platform, run=run, root=root)
    inventory, where = inherited(inventory, os.environ if env is None else env)
    return inventory if wanted is None else select_devices(inventory, wanted, where)


def inherited(inventory: Inventory, env: Mapping[str, str]) -> tuple[Inventory, str]:
    """The devices of `inventory` that the selection in `env` allows (`CUDA_VISIBLE_DEVICES`
    on a GPU host, `ASCEND_RT_VISIBLE_DEVICES` on an NPU host: the ids the variable takes, which
    the leases' own variable uses too: nvidia-smi's indices, the CANN runtime's NPU ids, which
    in a container differ from npu-smi's), said in one line; and where the
    devices are, for an error line. Without the variable: the inventory as it is. Raises
    DeviceError for an empty selection, one that is not a list of ids, or an id the host
    lacks."""
    name = VISIBLE_DEVICES.get(inventory.platform)
    if name is None or name not in env:
        return inventory, "on this host"
    text = env[name].strip()
    if not text:
        raise DeviceError(
            f"{name} is set and empty: no {inventory.platform} device is visible to this "
            "process; unset it, or list the devices the tuner may use"
        )
    items = [item.strip() for item in text.split(",")]
    if not all(_SINGLE.match(item) for item in items) or len(set(items)) != len(items):
        raise DeviceError(
            f"{name}={text!r}: expected distinct device ids such as 4,5,6,7 (UUIDs and MIG "
            "names are not read here: unset it and give --devices with the ids "
            "`autotune devices` lists)"
        )
    limited = select_devices(inventory, [int(item) for item in items])
    shown = format_device_list(limited.ids)
    logger.warning(
        "%s=%s inherited: trials use %s devices %s only", name, text, inventory.platform, shown
    )
    return limited, f"among {name}={text}"
