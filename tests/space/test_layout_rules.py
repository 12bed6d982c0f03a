"""The layout's constraint rules (TP x PP x PCP x DP devices, expert parallel, EPLB, context
parallel) against vLLM 0.32's own `ParallelConfig`: for every combination of a grid, the rules
that mirror its checks refuse exactly what it refuses, and the devices an engine holds are its
`world_size_across_dp`. The rules are not copied into the test: vLLM's class is the judge."""

from __future__ import annotations

import importlib.util
import itertools
from typing import Any

import pytest

from autotune.engine import devices_of
from autotune.space import ModelInfo, check_constraints

needs_vllm = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None, reason="needs vLLM's own ParallelConfig"
)


def moe(experts: int = 8) -> ModelInfo:
    return ModelInfo(
        num_attention_heads=32,
        num_key_value_heads=8,
        hidden_size=4096,
        num_hidden_layers=4,
        head_dim=128,
        num_experts=experts,
        moe_intermediate_size=1024,
    )


def dense() -> ModelInfo:
    return ModelInfo(num_attention_heads=32, hidden_size=4096, num_hidden_layers=4)


# The rules that stand for a ParallelConfig check (the others name engines vLLM runs as another).
MIRRORED = (
    "must be divisible by dcp_size",
    "When PCP is enabled",
    "EPLB requires",
    "to use EPLB",
    "load balancing is only",
    "num_redundant",
)


def vllm_refuses(options: dict[str, Any]) -> str | None:
    """What vLLM's ParallelConfig says of `options` on a CUDA host (None: it takes them)."""
    from pydantic import ValidationError
    from vllm.config import ParallelConfig

    try:
        config = ParallelConfig(**options)
    except (ValidationError, ValueError) as err:
        return str(err)
    assert config.world_size_across_dp == devices_of(options)
    return None


GRID = {
    "tensor_parallel_size": [1, 2, 4],
    "data_parallel_size": [1, 2],
    "prefill_context_parallel_size": [1, 2],
    "decode_context_parallel_size": [1, 2, 4],
    "enable_expert_parallel": [False, True],
    "enable_eplb": [False, True],
}


@needs_vllm
def test_the_parallel_rules_refuse_what_vllms_parallel_config_refuses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from vllm.platforms import current_platform

    # The CUDA side's checks (EPLB is refused on any other platform by the same class).
    monkeypatch.setattr(type(current_platform), "is_cuda_alike", lambda self=None: True)
    checked = 0
    for values in itertools.product(*GRID.values()):
        options = dict(zip(GRID, values, strict=True))
        if options["enable_eplb"]:
            options["eplb_config"] = {"num_redundant_experts": 0}
        ours = [
            p
            for p in check_constraints(options, moe(), devices=64, platform="cuda")
            if any(m in p for m in MIRRORED)
        ]
        theirs = vllm_refuses(options)
        assert bool(ours) == (theirs is not None), (options, ours, theirs)
        if theirs is not None:  # vLLM's first refusal, in its own words, is among ours
            assert any(p.rstrip(".") in theirs for p in ours), (ours, theirs)
        checked += 1
    redundant = {"eplb_config": {"num_redundant_experts": 2}}
    ours = check_constraints(redundant, moe(), platform="cuda")
    theirs = vllm_refuses(redundant)
    assert ours and theirs is not None and ours[0] in theirs
    assert checked == 3 * 2 * 2 * 3 * 2 * 2


@needs_vllm
def test_eplb_is_refused_off_cuda_as_vllm_refuses_it() -> None:
    """On this CPU host vLLM's ParallelConfig refuses EPLB: so does the rule on cpu / ascend."""
    options = {"enable_eplb": True, "enable_expert_parallel": True, "data_parallel_size": 2}
    theirs = vllm_refuses(options)
    assert theirs is not None and "only supported on CUDA" in theirs
    for platform in ("cpu", "ascend"):
        (ours,) = check_constraints(options, moe(), devices=2, platform=platform)
        assert "only supported on CUDA devices" in ours


@pytest.mark.parametrize(
    ("options", "devices", "problem"),
    [
        ({"data_parallel_size": 2, "tensor_parallel_size": 4}, 8, None),
        (
            {"data_parallel_size": 2, "tensor_parallel_size": 4},
            4,
            "tensor_parallel_size * pipeline_parallel_size * data_parallel_size (4 * 1 * 2) "
            "must be <= the devices given (4)",
        ),
        ({"prefill_context_parallel_size": 2, "tensor_parallel_size": 4}, 8, None),
        ({"prefill_context_parallel_size": 2, "tensor_parallel_size": 8}, 8, "(8 * 1 * 2)"),
        ({"decode_context_parallel_size": 2, "tensor_parallel_size": 8}, 8, None),  # TP's ranks
        ({"data_parallel_size": 0}, 8, "data_parallel_size (0) must be >= 1"),
    ],
)
def test_every_rank_is_a_device(options: dict[str, Any], devices: int, problem: str | None) -> None:
    """An engine holds TP x PP x PCP x DP devices (a DP rank is a world of its own); DCP
    reuses the TP ranks."""
    found = check_constraints(options, moe(), devices=devices, platform="cuda")
    if problem is None:
        assert found == []
    else:
        assert len(found) == 1 and problem in found[0], found


@pytest.mark.parametrize(
    "options",
    [
        {"enable_expert_parallel": True, "data_parallel_size": 2},
        {"all2all_backend": "deepep_low_latency"},
        {"expert_placement_strategy": "round_robin"},
    ],
)
def test_a_dense_model_is_never_given_an_expert_option(options: dict[str, Any]) -> None:
    found = check_constraints(options, dense(), devices=2, platform="cuda")
    assert any("mixture-of-experts models only; this model is dense" in p for p in found)
    assert not [p for p in check_constraints(options, moe(), devices=2) if "dense" in p]


def test_engines_vllm_runs_as_another_are_measured_once() -> None:
    """EP over one rank splits nothing; an all2all backend without EP and DP is never called."""
    (one,) = check_constraints({"enable_expert_parallel": True}, moe(), platform="cuda")
    assert "over one rank" in one
    (unused,) = check_constraints(
        {"all2all_backend": "deepep_high_throughput", "tensor_parallel_size": 2},
        moe(),
        devices=2,
        platform="cuda",
    )
    assert "used only with expert parallel and data_parallel_size > 1" in unused
    fine = {"all2all_backend": "deepep_high_throughput", "enable_expert_parallel": True}
    assert check_constraints({**fine, "data_parallel_size": 2}, moe(), 2, "cuda") == []


def test_eplb_places_experts_evenly() -> None:
    """fused_moe/layer.py: EPLB needs (experts + redundant) divisible by the EP ranks."""
    options = {"enable_eplb": True, "enable_expert_parallel": True, "data_parallel_size": 4}
    assert check_constraints(options, moe(8), devices=4, platform="cuda") == []
    (uneven,) = check_constraints(options, moe(6), devices=4, platform="cuda")
    assert uneven == (
        "EPLB currently only supports even distribution of experts across ranks. "
        "Got 6 experts and 4 EP ranks."
    )
    redundant = {**options, "eplb_config": {"num_redundant_experts": 2}}
    assert check_constraints(redundant, moe(6), devices=4, platform="cuda") == []


def test_ascend_flash_comm_needs_expert_parallel_on_a_moe_model() -> None:
    """vllm_ascend/platform.py (0.23.0): "Flash Comm v1 requires enable_expert_parallel=True
    for MoE models."."""
    options: dict[str, Any] = {
        "tensor_parallel_size": 2,
        "additional_config": {"enable_flashcomm1": True},
    }
    (found,) = check_constraints(options, moe(), devices=2, platform="ascend")
    assert found == "Flash Comm v1 requires enable_expert_parallel=True for MoE models."
    with_ep = {**options, "enable_expert_parallel": True}
    assert check_constraints(with_ep, moe(), devices=2, platform="ascend") == []
    assert check_constraints(options, dense(), devices=2, platform="ascend") == []


def test_model_info_reads_the_experts_of_each_family() -> None:
    base = {"num_attention_heads": 4, "hidden_size": 256, "num_hidden_layers": 2}
    for key in ("num_experts", "num_local_experts", "n_routed_experts"):
        model = ModelInfo.model_validate({**base, key: 16})
        assert model.is_moe and model.num_experts == 16, key
    assert not ModelInfo.model_validate(base).is_moe
    mla = {"kv_lora_rank": 512, "num_nextn_predict_layers": 1}
    deepseek = ModelInfo.model_validate({**base, **mla})
    assert deepseek.is_mla and deepseek.mtp_layers == 1
