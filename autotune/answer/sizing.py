"""How many devices hold a request rate within the SLOs: `autotune size`, from a capacity study.

A capacity study (`--load capacity`) measures, per config, `capacity_rps`: the highest Poisson
rate at which one engine of that config held every SLO (docs/metrics.md). Serving a rate R with
that config takes `ceil(R / capacity)` replicas of the devices one engine holds (TP x PP x PCP x
DP: `EngineConfig.devices`) each. `size_for` ranks the measured configs by the devices that
takes (then by the capacity per device): the first is the fewest devices for R. Pure: records
in, rows out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from autotune.engine import from_yaml_dict
from autotune.store import TrialRecord
from autotune.vocab.status import TrialStatus


@dataclass(frozen=True)
class Sizing:
    """One config serving the rate: `replicas` engines of `per_replica` devices."""

    number: int
    description: str
    capacity_rps: float
    per_replica: int
    replicas: int
    devices: int
    hosts: int | None  # with `devices_per_host`: hosts of that many devices the devices fill


def replica_devices(config: dict[str, object]) -> int:
    """Devices one engine of `config` (a trial's stored options) uses."""
    return from_yaml_dict(dict(config)).devices


def size_for(
    records: Sequence[TrialRecord], rate: float, devices_per_host: int | None = None
) -> list[Sizing]:
    """The measured, feasible configs with a capacity, by the devices that serve `rate`."""
    if not rate > 0:
        raise ValueError(f"the rate must be > 0, not {rate}")
    rows = []
    for t in records:
        capacity = t.metrics.get("capacity_rps")
        if t.status != TrialStatus.OK or not capacity or capacity <= 0:
            continue
        if any(v > 0 for v in t.constraints.values()):
            continue  # no rate held the SLOs (or it erred): nothing to serve with
        per_replica = replica_devices(t.config)
        replicas = math.ceil(rate / capacity - 1e-9)
        devices = replicas * per_replica
        hosts = math.ceil(devices / devices_per_host) if devices_per_host else None
        rows.append(
            Sizing(t.number, t.description, capacity, per_replica, replicas, devices, hosts)
        )
    return sorted(rows, key=lambda r: (r.devices, -r.capacity_rps / r.per_replica, r.number))
