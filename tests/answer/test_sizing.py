"""`size_for`: the fewest devices for a rate, from measured capacities (pure)."""

from __future__ import annotations

import pytest

from autotune.answer.sizing import size_for
from autotune.store import TrialRecord


def trial(number: int, capacity: float | None, tp: int = 1, **kw: object) -> TrialRecord:
    metrics = {} if capacity is None else {"capacity_rps": capacity}
    config = {"model": "m", "tensor-parallel-size": tp}
    fields = {"state": "complete", "status": "ok", "metrics": metrics, "config": config,
              "constraints": {"p99_ttft_ms": -0.1}, "description": f"tp={tp}"}  # fmt: skip
    return TrialRecord.model_validate({"number": number, **fields, **kw})


def test_fewer_devices_win_over_a_larger_capacity_per_engine() -> None:
    records = [
        trial(0, 3.0, tp=1),  # 10 req/s: 4 replicas x 1 = 4 devices
        trial(1, 9.0, tp=4),  # 2 replicas x 4 = 8 devices
        trial(2, 6.0, tp=2),  # 2 x 2 = 4 devices, more capacity per device than trial 0
        trial(3, None),  # no capacity measured
        trial(4, 50.0, status="oom"),
        trial(5, 40.0, constraints={"p99_ttft_ms": 0.3}),  # no rate held the SLOs
    ]
    rows = size_for(records, rate=10.0, devices_per_host=8)
    assert [(r.number, r.replicas, r.per_replica, r.devices, r.hosts) for r in rows] == [
        (0, 4, 1, 4, 1),
        (2, 2, 2, 4, 1),
        (1, 2, 4, 8, 1),
    ]
    assert [r.devices for r in size_for(records, rate=6.0)] == [2, 2, 4]  # 2x1, 1x2, 1x4
    assert size_for(records, rate=30.0, devices_per_host=4)[0].hosts == 3  # 10 devices


def test_a_rate_must_be_positive() -> None:
    with pytest.raises(ValueError, match="the rate must be > 0"):
        size_for([], rate=0)
