"""The memory order of parameters: which configs need at least the memory of others; repair."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.space import SearchSpace, SpaceError, load_space, memory_order, needs_at_least
from autotune.space import repair as repair_params

SPACE = """\
name: m
platform: cuda
parameters:
  - {name: max_num_seqs, type: int, low: 8, high: 512, log: true, baseline: 256}
  - {name: gpu_memory_utilization, type: float, low: 0.5, high: 0.95, step: 0.05, baseline: 0.9}
  - {name: tensor_parallel_size, type: categorical, choices: [1, 2, 4], baseline: 1}
  - {name: enforce_eager, type: bool, baseline: false}
  - {name: block_size, type: categorical, choices: [16, 32], baseline: 16}
  - {name: alloc, type: categorical, env: PYTORCH_CUDA_ALLOC_CONF,
     choices: [null, "expandable_segments:True"], baseline: null}
"""


@pytest.fixture
def space(tmp_path: Path) -> SearchSpace:
    file = tmp_path / "m.yaml"
    file.write_text(SPACE)
    return load_space(file)


def config(**changes: object) -> dict[str, object]:
    base: dict[str, object] = {
        "max_num_seqs": 64,
        "gpu_memory_utilization": 0.8,
        "tensor_parallel_size": 2,
        "enforce_eager": True,
        "block_size": 16,
        "alloc": None,
    }
    return {**base, **changes}


def test_default_orders_come_from_the_option_names(space: SearchSpace) -> None:
    orders = {p.name: memory_order(p) for p in space.parameters}
    assert orders == {
        "max_num_seqs": "up",
        "gpu_memory_utilization": "up",
        "tensor_parallel_size": "down",
        "enforce_eager": [True, False],
        "block_size": "none",
        "alloc": "exact",  # an env var of unknown effect: configs must agree on it
    }


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({}, True),  # the same config
        ({"max_num_seqs": 128}, True),  # more sequences
        ({"gpu_memory_utilization": 0.9}, True),  # a larger share
        ({"tensor_parallel_size": 1}, True),  # fewer devices: more per device
        ({"enforce_eager": False}, True),  # graphs take memory
        ({"block_size": 32}, True),  # no effect on memory
        ({"max_num_seqs": 128, "gpu_memory_utilization": 0.7}, False),  # one lower
        ({"tensor_parallel_size": 4}, False),
        ({"max_num_seqs": 32}, False),
        ({"alloc": "expandable_segments:True"}, False),  # unknown effect: not comparable
    ],
)
def test_needs_at_least(space: SearchSpace, changes: dict[str, object], expected: bool) -> None:
    assert needs_at_least(space, config(**changes), config()) is expected


def test_memory_field_overrides_the_default(tmp_path: Path) -> None:
    file = tmp_path / "o.yaml"
    file.write_text(
        "name: o\nplatform: cuda\nparameters:\n"
        "  - {name: alloc, type: categorical, env: PYTORCH_CUDA_ALLOC_CONF, memory: none,\n"
        "     choices: [a, b], baseline: a}\n"
        "  - {name: kv_cache_dtype, type: categorical, memory: [fp8, auto],\n"
        "     choices: [auto, fp8], baseline: auto}\n"
    )
    space = load_space(file)
    assert needs_at_least(
        space, {"alloc": "b", "kv_cache_dtype": "auto"}, {"alloc": "a", "kv_cache_dtype": "fp8"}
    )
    assert not needs_at_least(
        space, {"alloc": "a", "kv_cache_dtype": "fp8"}, {"alloc": "a", "kv_cache_dtype": "auto"}
    )


def test_a_memory_list_must_order_every_choice(tmp_path: Path) -> None:
    file = tmp_path / "bad.yaml"
    file.write_text(
        "name: bad\nparameters:\n"
        "  - {name: kv_cache_dtype, type: categorical, memory: [fp8],\n"
        "     choices: [auto, fp8], baseline: auto}\n"
    )
    with pytest.raises(SpaceError, match=r"memory: must list every choice once"):
        load_space(file)


def test_repair_halves_the_gap_to_the_largest_known_fit(space: SearchSpace) -> None:
    oom = config(gpu_memory_utilization=0.95)
    fits = [config(gpu_memory_utilization=0.75), config(gpu_memory_utilization=0.6)]
    repaired = repair_params(space, oom, fits)
    assert repaired == {**oom, "gpu_memory_utilization": 0.85}


def test_repair_without_a_known_fit_goes_halfway_to_the_low_end(space: SearchSpace) -> None:
    repaired = repair_params(space, config(gpu_memory_utilization=0.9), [])
    assert repaired is not None and repaired["gpu_memory_utilization"] == 0.7


def test_repair_turns_to_the_next_knob_when_the_first_is_at_its_low_end(
    space: SearchSpace,
) -> None:
    oom = config(gpu_memory_utilization=0.5, max_num_seqs=256)
    repaired = repair_params(space, oom, [config(max_num_seqs=16)])
    assert repaired == {**oom, "max_num_seqs": 64}  # geometric midpoint of 16 and 256


def test_repair_gives_up_when_nothing_can_go_lower(space: SearchSpace) -> None:
    assert repair_params(space, config(gpu_memory_utilization=0.5, max_num_seqs=8), []) is None


def test_shipped_cpu_space_orders(tmp_path: Path) -> None:
    space = load_space("cpu")
    orders = {p.name: memory_order(p) for p in space.parameters}
    assert orders["kv_cache_mib"] == "up" and orders["max_num_seqs"] == "up"
    assert orders["omp_bind"] == "none"  # thread binding moves no memory


def test_configs_agree_on_parameters_of_unknown_memory_effect(space: SearchSpace) -> None:
    from autotune.space import comparable

    assert comparable(space, config(max_num_seqs=512, block_size=32), config())
    assert not comparable(space, config(alloc="expandable_segments:True"), config())


def test_allocated_bytes_orders_configs_with_a_given_kv_size(tiny_model: Path) -> None:
    from autotune.space import ModelInfo, allocated_bytes

    model = ModelInfo.from_path(tiny_model)
    small = allocated_bytes(
        {"kv_cache_memory_bytes": 2**30, "max_num_seqs": 256}, model, tiny_model, "cpu"
    )
    large = allocated_bytes(
        {"kv_cache_memory_bytes": 2**31, "max_num_seqs": 8}, model, tiny_model, "cpu"
    )
    assert small is not None and large is not None
    assert 2**30 < small < large  # weights and activations on top of the KV cache
    # Where vLLM sizes the KV cache itself, there is no total to order by.
    assert allocated_bytes({"gpu_memory_utilization": 0.9}, model, tiny_model, "cuda") is None
