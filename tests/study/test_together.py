"""Whether a confirm round's engines may run at once, in turns (`Harness.together`): only on a
CPU host taken whole, online, with the KV cache sizes given and memory available for all."""

from __future__ import annotations

from typing import Any

import pytest

from autotune.bench import CapacitySearch, LoadProfile
from autotune.devices import DeviceMemory, DevicePool
from autotune.measure import Workplan
from autotune.space import SearchSpace
from autotune.study import Harness, Machine
from autotune.study._harness import ENGINE_OVERHEAD_BYTES
from study.fakes import FakeMeasure, MakeSpec

GIB = 2**30
REST = {"max_num_batched_tokens": 2048, "enable_prefix_caching": True}
TWO = [{"max_num_seqs": 8, "kv_cache_mib": 512, **REST},
       {"max_num_seqs": 64, "kv_cache_mib": 1024, **REST}]  # fmt: skip


def harness(make_spec: MakeSpec, space: SearchSpace, measure: FakeMeasure, *,
            available: float = 20 * GIB, **more: Any) -> Harness:  # fmt: skip
    plan = Workplan([], [], LoadProfile(concurrency=4), {}, **more.pop("plan", {}))
    memory = DeviceMemory("cpu:node0", int(24 * GIB), int(available))
    machine = Machine(device_memory=lambda ids: memory, **more)
    return Harness(make_spec(), space, measure, machine=machine, plan=plan)


def test_two_engines_that_fit_run_together_on_the_host_held_whole(
    make_spec: MakeSpec, space: SearchSpace, measure: FakeMeasure
) -> None:
    held = harness(make_spec, space, measure).together(TWO)
    assert held is not None
    with held as configs:
        assert [c.args["max_num_seqs"] for c in configs] == [8, 64]
        assert configs[1].args["kv_cache_memory_bytes"] == 1024 * 2**20


@pytest.mark.parametrize(
    ("more", "why"),
    [
        ({"available": 2 * ENGINE_OVERHEAD_BYTES}, "engines need about"),
        ({"pool": DevicePool([0, 1], platform="cuda", host_locks=False)}, "CPU host taken"),
        ({"plan": {"scenario": "offline"}}, "only online"),
        ({"plan": {"capacity": CapacitySearch()}}, "without a capacity search"),
    ],
)
def test_engines_run_one_after_the_other_where_they_cannot_share_the_host(
    make_spec: MakeSpec, space: SearchSpace, measure: FakeMeasure, more: dict[str, Any],
    why: str, caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    h = harness(make_spec, space, measure, **more)
    with caplog.at_level("INFO"):
        assert h.together(TWO) is None
        assert h.together(TWO) is None
    said = [r.getMessage() for r in caplog.records if "one engine at a time" in r.getMessage()]
    assert len(said) == 1 and why in said[0], said  # said once per study


def test_a_kv_cache_vllm_sizes_itself_keeps_engines_apart(
    make_spec: MakeSpec, space: SearchSpace, measure: FakeMeasure
) -> None:
    h = harness(make_spec, space, measure)
    no_kv = [{"max_num_seqs": 8, **REST}, {"max_num_seqs": 64, **REST}]
    space_without = space.model_copy(
        update={"parameters": [p for p in space.parameters if p.name != "kv_cache_mib"]}
    )
    h.space = space_without
    assert "KV cache size is not given" in (h._apart([h.engine_config(p) for p in no_kv]) or "")
