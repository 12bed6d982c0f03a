"""`split_cpu`: the CPU's cores as disjoint slots for trials that run side by side."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.devices import DeviceError, Inventory, discover, parse_cpulist, split_cpu
from devices.fake_host import RECORDED_MEMTOTAL, fake_host


def two_sockets(root: Path) -> Inventory:
    """Made up: 2 nodes x 6 cores x 2 threads, siblings numbered as Linux does (n, n+12)."""
    siblings = {cpu: f"{cpu % 12},{cpu % 12 + 12}" for cpu in range(24)}
    fake_host(root, {0: "0-5,12-17", 1: "6-11,18-23"}, siblings=siblings)
    return discover("cpu", root=root)


def cores(inventory: Inventory) -> list[str]:
    return [d.cores or "" for d in inventory.devices]


def test_slots_stay_in_their_node_and_keep_siblings_together(tmp_path: Path) -> None:
    slots = split_cpu(two_sockets(tmp_path), 4, root=tmp_path)
    assert slots.ids == [0, 1, 2, 3]
    assert cores(slots) == ["0-2,12-14", "3-5,15-17", "6-8,18-20", "9-11,21-23"]
    assert [d.numa_node for d in slots.devices] == [0, 0, 1, 1]
    assert [d.total_bytes for d in slots.devices] == [RECORDED_MEMTOTAL // 2] * 4


def test_uneven_splits_give_the_first_slots_one_more_core(tmp_path: Path) -> None:
    slots = split_cpu(two_sockets(tmp_path), 5, root=tmp_path)
    assert cores(slots) == ["0-1,12-13", "2-3,14-15", "4-5,16-17", "6-8,18-20", "9-11,21-23"]


def test_fewer_slots_than_nodes_take_whole_nodes(tmp_path: Path) -> None:
    fake_host(tmp_path, {0: "0-3", 1: "4-7", 2: "8-11"})
    slots = split_cpu(discover("cpu", root=tmp_path), 2, root=tmp_path)
    assert cores(slots) == ["0-3", "4-11"]
    assert [d.numa_node for d in slots.devices] == [0, None]  # the second spans nodes 1-2
    assert slots.devices[1].total_bytes == 2 * RECORDED_MEMTOTAL


def test_reserved_cores_are_in_no_slot(tmp_path: Path) -> None:
    slots = split_cpu(two_sockets(tmp_path), 2, reserve=1, root=tmp_path)
    assert cores(slots) == ["0-5,12-17", "6-10,18-22"]  # core 11 (CPUs 11 and 23) is kept out


@pytest.mark.parametrize("count", [1, 2, 3, 5, 7, 12])
def test_slots_are_disjoint_and_cover_every_cpu(tmp_path: Path, count: int) -> None:
    slots = split_cpu(two_sockets(tmp_path), count, root=tmp_path)
    cpus = [cpu for text in cores(slots) for cpu in parse_cpulist(text)]
    assert sorted(cpus) == list(range(24))
    assert len(slots.devices) == count


def test_more_slots_than_physical_cores_is_an_error(tmp_path: Path) -> None:
    inventory = two_sockets(tmp_path)
    with pytest.raises(DeviceError, match="cannot split 12 physical cores into 13 slots"):
        split_cpu(inventory, 13, root=tmp_path)
    with pytest.raises(DeviceError, match=r"into 12 slots \(1 reserved\)"):
        split_cpu(inventory, 12, reserve=1, root=tmp_path)
    with pytest.raises(DeviceError, match="slots must be >= 1"):
        split_cpu(inventory, 0, root=tmp_path)


def test_only_a_cpu_inventory_is_split() -> None:
    with pytest.raises(DeviceError, match="not cuda"):
        split_cpu(Inventory("cuda", []), 2)
