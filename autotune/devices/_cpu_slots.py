"""CPU "devices" for trials that run side by side: the host's cores split into disjoint slots.

A CPU trial binds its vLLM worker(s) to cores with `VLLM_CPU_OMP_THREADS_BIND`; a trial with
tensor parallel k takes k slots (one per worker, joined with `|`). How cores are split:

- by physical core: SMT siblings (`thread_siblings_list`) always stay in one slot;
- with at least as many slots as NUMA nodes, no slot crosses a node: each node gets at least one
  slot and the rest go, one by one, to the node with the most cores per slot; a node's cores
  are cut into contiguous runs whose sizes differ by at most one (the first runs are larger);
- with fewer slots than nodes, each slot takes whole, consecutive nodes;
- `reserve` physical cores, the highest-numbered, are left out of every slot (for the API
  server and the load client, which otherwise compete with the workers).

A slot's memory is its node's divided by the slots on that node: trials on a node share it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from autotune.devices._inventory import Device, DeviceError, Inventory
from autotune.devices._numa import core_groups, format_cpulist, parse_cpulist
from autotune.vocab.platform import Platform


@dataclass
class _Node:
    device: Device
    cores: list[list[int]]  # physical cores, each a list of SMT siblings
    slots: int = 0


def split_cpu(
    inventory: Inventory, slots: int, *, reserve: int = 0, root: Path = Path("/")
) -> Inventory:
    """The CPU inventory as `slots` disjoint core sets (devices 0..slots-1), split as above."""
    if inventory.platform != Platform.CPU:
        raise DeviceError(
            f"only a CPU inventory is split into core slots, not {inventory.platform}"
        )
    if slots < 1 or reserve < 0:
        raise DeviceError(f"slots must be >= 1 and reserve >= 0 (got {slots} and {reserve})")
    nodes = [
        _Node(d, core_groups(parse_cpulist(d.cores or ""), root))
        for d in sorted(inventory.devices, key=lambda d: d.id)
    ]
    _reserve(nodes, reserve)
    nodes = [node for node in nodes if node.cores]
    physical = sum(len(node.cores) for node in nodes)
    if slots > physical:
        raise DeviceError(
            f"cannot split {physical} physical cores into {slots} slots"
            + (f" ({reserve} reserved)" if reserve else "")
        )
    if slots < len(nodes):
        devices = _whole_nodes(nodes, slots)
    else:
        _share_slots(nodes, slots)
        devices = [dev for node in nodes for dev in _node_slots(node)]
    numbered = [Device(i, d.name, d.total_bytes, d.used_bytes, "cpu", d.numa_node, d.cores)
                for i, d in enumerate(devices)]  # fmt: skip
    return Inventory(Platform.CPU, numbered)


def _reserve(nodes: list[_Node], reserve: int) -> None:
    for node in reversed(nodes):
        taken = min(reserve, len(node.cores))
        del node.cores[len(node.cores) - taken :]
        reserve -= taken


def _share_slots(nodes: list[_Node], slots: int) -> None:
    for node in nodes:
        node.slots = 1
    for _ in range(slots - len(nodes)):
        open_nodes = [node for node in nodes if node.slots < len(node.cores)]
        max(open_nodes, key=lambda node: len(node.cores) / node.slots).slots += 1


def _node_slots(node: _Node) -> list[Device]:
    size, extra = divmod(len(node.cores), node.slots)
    devices, start = [], 0
    for k in range(node.slots):
        end = start + size + (1 if k < extra else 0)
        cpus = [cpu for core in node.cores[start:end] for cpu in core]
        name = f"node {node.device.id} slot {k}"
        devices.append(_slot(name, cpus, [node], node.slots, node.device.numa_node))
        start = end
    return devices


def _whole_nodes(nodes: list[_Node], slots: int) -> list[Device]:
    devices = []
    for k in range(slots):
        group = nodes[k * len(nodes) // slots : (k + 1) * len(nodes) // slots]
        cpus = [cpu for node in group for core in node.cores for cpu in core]
        names = format_cpulist(node.device.id for node in group)
        numa = group[0].device.numa_node if len(group) == 1 else None
        devices.append(_slot(f"nodes {names}", cpus, group, 1, numa))
    return devices


def _slot(name: str, cpus: list[int], group: list[_Node], share: int, numa: int | None) -> Device:
    total = _memory(n.device.total_bytes for n in group)
    used = _memory(n.device.used_bytes for n in group)
    return Device(
        0,
        name,
        None if total is None else total // share,
        None if used is None else used // share,
        "cpu",
        numa,
        format_cpulist(cpus),
    )


def _memory(values: Iterable[int | None]) -> int | None:
    """The sum of the nodes' bytes; None if any node's is unknown."""
    total = 0
    for value in values:
        if value is None:
            return None
        total += value
    return total
