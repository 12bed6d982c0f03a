"""The layout stage's plan and the parameters a dense model is never offered."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from autotune.engine import EngineConfig, devices_of
from autotune.space import (
    ModelInfo,
    SpaceError,
    layout_names,
    layout_plan,
    load_space,
    restrict_to_model,
)

SPACE = """
name: moe
platform: cuda
parameters:
  - {name: tensor_parallel_size, type: categorical, choices: [1, 2, 4, 8], baseline: 1}
  - {name: data_parallel_size, type: categorical, choices: [1, 2, 4, 8], baseline: 1}
  - {name: enable_expert_parallel, type: bool, baseline: false}
  - {name: all2all_backend, type: categorical, choices: [null, deepep_low_latency],
     baseline: null, only_if: {enable_expert_parallel: [true]}}
  - {name: max_num_seqs, type: int, low: 16, high: 1024, log: true, baseline: 256}
"""


def qwen3_moe() -> ModelInfo:
    return ModelInfo(
        num_attention_heads=32,
        num_key_value_heads=4,
        hidden_size=2048,
        num_hidden_layers=4,
        head_dim=128,
        num_experts=128,
        moe_intermediate_size=768,
        vocab_size=151936,
    )


def dense() -> ModelInfo:
    return ModelInfo(num_attention_heads=32, hidden_size=4096, num_hidden_layers=4)


def test_devices_count_every_rank() -> None:
    assert devices_of({"tensor_parallel_size": 4, "data_parallel_size": 2}) == 8
    assert devices_of({"prefill_context_parallel_size": 2, "pipeline_parallel_size": 2}) == 4
    assert devices_of({"decode_context_parallel_size": 4, "tensor_parallel_size": 4}) == 4
    config = EngineConfig(model="m", args={"data_parallel_size": 2, "tensor_parallel_size": 4})
    assert config.devices == 8  # the lease, the cost and the capacity line read this


def test_the_plan_fills_the_node_with_layouts_nearest_the_baseline_first(
    write_space: Callable[..., Path],
) -> None:
    space = load_space(write_space(SPACE))
    baseline = space.baseline_params()
    # The all2all backend tunes a chosen layout: the second stage searches it.
    assert layout_names(space) == [
        "tensor_parallel_size",
        "data_parallel_size",
        "enable_expert_parallel",
    ]
    plan = layout_plan(space, baseline, qwen3_moe(), devices=8)
    assert len(plan) == 5  # the baseline and five: LAYOUT_LIMIT
    shown = [
        (p["tensor_parallel_size"], p["data_parallel_size"], p["enable_expert_parallel"])
        for p in plan
    ]
    # Eight devices each: one parallel size changed (DP8, TP8), then the same with EP, ...
    assert shown[:4] == [(1, 8, False), (8, 1, False), (1, 8, True), (8, 1, True)], shown
    for params in plan:
        assert params["max_num_seqs"] == 256  # the scheduler at its baseline
        options, _ = space.to_engine(params)
        assert devices_of(options) == 8
    # Every plan point is a distinct engine, and none is the baseline's.
    engines = [space.to_engine(space.effective(p)) for p in plan]
    assert len({repr(e) for e in engines}) == len(plan)
    assert space.to_engine(baseline) not in engines


def test_on_two_devices_the_plan_is_tp2_and_dp2_with_and_without_ep(
    write_space: Callable[..., Path],
) -> None:
    space = load_space(write_space(SPACE))
    plan = layout_plan(space, space.baseline_params(), qwen3_moe(), devices=2)
    shown = {
        (p["tensor_parallel_size"], p["data_parallel_size"], p["enable_expert_parallel"])
        for p in plan
    }
    assert {(2, 1, False), (1, 2, False), (2, 1, True), (1, 2, True)} <= shown
    assert all(devices_of(space.to_engine(p)[0]) <= 2 for p in plan)


def test_no_plan_for_a_dense_or_unknown_model(write_space: Callable[..., Path]) -> None:
    space = load_space(write_space(SPACE))
    assert layout_plan(space, space.baseline_params(), dense(), devices=8) == []
    assert layout_plan(space, space.baseline_params(), None, devices=8) == []


def test_a_dense_model_is_not_offered_expert_parallel(write_space: Callable[..., Path]) -> None:
    space = load_space(write_space(SPACE))
    kept, notes = restrict_to_model(space, dense())
    assert [p.name for p in kept.parameters] == [
        "tensor_parallel_size",
        "data_parallel_size",
        "max_num_seqs",
    ]
    assert len(notes) == 2 and "the model is dense (no experts)" in notes[0]
    assert restrict_to_model(space, qwen3_moe()) == (space, [])
    assert restrict_to_model(space, None) == (space, [])
    only = write_space(
        "name: ep\nparameters:\n  - {name: enable_expert_parallel, type: bool, baseline: false}\n",
        "ep.yaml",
    )
    with pytest.raises(SpaceError, match="every parameter is for mixture-of-experts models"):
        restrict_to_model(load_space(only), dense())


def test_shipped_gpu_spaces_plan_expert_parallel_layouts_on_eight_devices() -> None:
    for name in ("cuda", "ascend"):
        space = load_space(name)
        plan = layout_plan(space, space.baseline_params(), qwen3_moe(), devices=8)
        assert plan, name
        assert any(p.get("enable_expert_parallel") for p in plan), (name, plan)
        assert all(devices_of(space.to_engine(p)[0]) == 8 for p in plan), (
            name
        )  # a node deployed whole


def test_a_model_is_not_offered_what_its_architecture_rules_out() -> None:
    """MLA backends for a model without MLA (and the others for one with it), MTP drafts for a
    checkpoint without MTP layers: dropped before the study, with the rule's words."""
    space = load_space("cuda")
    kept, notes = restrict_to_model(space, dense())
    backends = next(p for p in kept.parameters if p.name == "attention_backend")
    assert backends.choices == [None, "FLASH_ATTN", "FLASHINFER", "TRITON_ATTN"]  # type: ignore[union-attr]
    methods = next(p for p in kept.parameters if p.name == "speculative_method")
    assert "mtp" not in methods.choices  # type: ignore[union-attr]
    assert any("dropped speculative_method mtp" in n for n in notes)
    deepseek = ModelInfo(
        num_attention_heads=128,
        hidden_size=7168,
        num_hidden_layers=4,
        kv_lora_rank=512,
        num_experts=256,
        mtp_layers=1,
    )
    kept, _ = restrict_to_model(space, deepseek)
    backends = next(p for p in kept.parameters if p.name == "attention_backend")
    assert backends.choices == [None, "FLASHMLA", "CUTLASS_MLA", "FLASHINFER_MLA", "TRITON_MLA"]  # type: ignore[union-attr]
    assert "mtp" in next(p for p in kept.parameters if p.name == "speculative_method").choices  # type: ignore[union-attr]
    assert "enable_expert_parallel" in kept.names


def test_api_server_count_needs_vllm_serve() -> None:
    from autotune.engine import DEFAULT_COMMAND
    from autotune.space import restrict_to_command

    space = load_space("cuda")
    kept, notes = restrict_to_command(space, DEFAULT_COMMAND)
    assert "api_server_count" not in kept.names and len(notes) == 1
    assert "one API server whatever --api-server-count says" in notes[0]
    assert restrict_to_command(space, "vllm serve") == (space, [])
