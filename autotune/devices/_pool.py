"""Handing disjoint device sets to trials that run at once.

`DevicePool.acquire(n)` blocks until n devices are free and returns a `Lease` of the nearest n
(by topology, then NUMA node, then consecutive ids; see `nearest_set`). Requests are served in
the order they arrive: a large request is never starved by a stream of small ones, at the cost
of small ones waiting behind a large one that does not fit yet.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Hashable, Sequence
from types import TracebackType

from autotune.devices._hostlock import POLL_S, HostHold, device_keys, owner, try_hold
from autotune.devices._inventory import VISIBLE_DEVICES, Device, DeviceError, DeviceKind, Inventory
from autotune.devices._placement import nearest_set, pair_cost
from autotune.devices._topology import Topology
from autotune.vocab.platform import Platform

logger = logging.getLogger(__name__)


class Lease:
    """Devices held by one trial until released: their ids and the environment that shows them.

    A context manager: leaving the `with` block releases it.
    """

    def __init__(
        self, pool: DevicePool, token: int, devices: list[Device], host: HostHold | None = None
    ) -> None:
        self._pool = pool
        self.token = token
        self.devices = devices
        self._host = host  # the same devices held against other processes on the host

    @property
    def ids(self) -> list[int]:
        return [device.id for device in self.devices]

    @property
    def env(self) -> dict[str, str]:
        """The variables that give a trial exactly these devices.

        ascend: `ASCEND_RT_VISIBLE_DEVICES`; cuda: `CUDA_VISIBLE_DEVICES` with
        `CUDA_DEVICE_ORDER=PCI_BUS_ID` (so ids are nvidia-smi's); cpu:
        `VLLM_CPU_OMP_THREADS_BIND`, one core set per worker joined with `|`.
        """
        platform = self._pool.platform
        ids = ",".join(str(i) for i in self.ids)
        if platform == Platform.ASCEND:
            return {VISIBLE_DEVICES[platform]: ids}
        if platform == Platform.CUDA:
            return {VISIBLE_DEVICES[platform]: ids, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        return {"VLLM_CPU_OMP_THREADS_BIND": "|".join(d.cores or "" for d in self.devices)}

    def release(self) -> None:
        if self._host is not None:  # first: a waiter the pool wakes must find them free
            self._host.release()
        self._pool.release(self)

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"Lease(ids={self.ids}, platform={str(self._pool.platform)!r})"


class DevicePool:
    """Disjoint device sets for trials that run at the same time. Thread-safe.

    Built from an `Inventory` (its platform and topology; on CPU its devices are NUMA nodes or
    the core slots of `split_cpu`), or from plain ids with `platform` ascend or cuda.
    `topology` overrides the inventory's.
    """

    def __init__(
        self,
        devices: Inventory | Sequence[int],
        topology: Topology | None = None,
        *,
        platform: Platform | None = None,
        host_locks: bool = True,
    ) -> None:
        if isinstance(devices, Inventory):
            self.platform: Platform = devices.platform
            listed = list(devices.devices)
            self.topology = topology or devices.topology
        else:
            if platform not in (Platform.ASCEND, Platform.CUDA):
                given = platform and str(platform)  # 'cpu', not <Platform.CPU: 'cpu'>
                raise DeviceError(
                    f"a pool of plain ids needs platform ascend or cuda, not {given!r} "
                    f"(a CPU pool is built from an inventory: its devices carry the cores)"
                )
            self.platform = Platform(platform)
            kind: DeviceKind = "npu" if self.platform == Platform.ASCEND else "gpu"
            listed = [Device(i, f"device {i}", None, None, kind) for i in devices]
            self.topology = topology
        self._devices = {d.id: d for d in listed}
        if len(self._devices) != len(listed):
            raise DeviceError("a device id is given twice")
        if not self._devices:
            raise DeviceError("a device pool needs at least one device")
        self._cost = pair_cost(self.topology, self._groups())
        self._free = set(self._devices)
        self._held: dict[int, frozenset[int]] = {}
        self._cond = threading.Condition()
        self._queue: deque[int] = deque()
        self._tickets = itertools.count()
        # Leases hold their devices against other processes on the host too (lock files);
        # `owner` is what they are told holds them.
        self.host_locks = host_locks
        self.owner = owner()
        self._waiting_on = ""

    @property
    def devices(self) -> list[Device]:
        """Every device of the pool, free or not, in id order."""
        return [self._devices[i] for i in sorted(self._devices)]

    @property
    def size(self) -> int:
        return len(self._devices)

    @property
    def free(self) -> list[int]:
        """The ids free now (a snapshot)."""
        with self._cond:
            return sorted(self._free)

    def acquire(self, n: int, timeout: float | None = None) -> Lease:
        """Lease n devices, waiting until they are free and earlier requests are served.

        Raises ValueError when n is not in 1..size (such a request could never be met), and
        TimeoutError when `timeout` seconds pass first (then nothing is held).
        """
        if not 1 <= n <= self.size:
            raise ValueError(f"cannot lease {n} devices from a pool of {self.size}")
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            ticket = next(self._tickets)
            self._queue.append(ticket)
            try:
                while True:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise TimeoutError(f"{n} devices were not free within {timeout} s")
                    if self._queue[0] != ticket or len(self._free) < n:
                        self._cond.wait(remaining)
                        continue
                    held = self._hold_on_host(n)
                    if held is not None:
                        break
                    # Another process on this host holds some: look again in a moment.
                    self._cond.wait(POLL_S if remaining is None else min(remaining, POLL_S))
                ids, host = held
                self._free.difference_update(ids)
                self._held[ticket] = frozenset(ids)
            finally:
                self._queue.remove(ticket)
                self._cond.notify_all()
        return Lease(self, ticket, [self._devices[i] for i in ids], host)

    def _hold_on_host(self, n: int) -> tuple[list[int], HostHold | None] | None:
        """The nearest n free ids that no other process on the host holds, held against them
        (`autotune.devices._hostlock`); None where fewer than n are to be had now."""
        if not self.host_locks:
            return nearest_set(sorted(self._free), n, self._cost), None
        usable, busy = [], ""
        for i in sorted(self._free):
            probe = try_hold(device_keys(self.platform, [self._devices[i]]), what=self.owner)
            if isinstance(probe, str):
                busy = busy or f"{self._devices[i].name}: {probe}"
                continue
            probe.release()
            usable.append(i)
        if len(usable) >= n:
            ids = nearest_set(usable, n, self._cost)
            held = try_hold(
                device_keys(self.platform, [self._devices[i] for i in ids]), what=self.owner
            )
            if not isinstance(held, str):
                self._waiting_on = ""
                return ids, held
            busy = held
        if busy and busy != self._waiting_on:
            logger.warning("waiting for devices another process on this host holds (%s)", busy)
            self._waiting_on = busy
        return None

    def release(self, lease: Lease) -> None:
        """Give a lease's devices back. Raises ValueError for a lease released already or of
        another pool."""
        with self._cond:
            ids = self._held.pop(lease.token, None) if lease._pool is self else None
            if ids is None:
                raise ValueError(f"{lease!r} is not held in this pool (released already?)")
            self._free.update(ids)
            self._cond.notify_all()

    def _groups(self) -> dict[int, Hashable]:
        """Each device's NUMA node, else its CPU affinity in the topology, where known."""
        groups: dict[int, Hashable] = {}
        for device_id, device in self._devices.items():
            affinity = self.topology.cpu_affinity.get(device_id) if self.topology else None
            numa = self.topology.numa_affinity.get(device_id) if self.topology else None
            group: Hashable = device.numa_node if device.numa_node is not None else numa
            if group is None and affinity is not None:
                group = f"cpus {affinity}"  # npu-smi names CPUs, not nodes
            if group is not None:
                groups[device_id] = group
        return groups
