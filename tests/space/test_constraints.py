"""Each constraint rule, feasible and infeasible, on the tiny model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from autotune.space import ModelInfo, SpaceError, check_constraints

MIB = 2**20


def test_kv_bytes_per_token_of_tiny_model(tiny: ModelInfo) -> None:
    assert tiny.kv_bytes_per_token() == 4096
    assert tiny.kv_bytes_per_token("fp8") == 2048
    assert tiny.kv_bytes_per_token_per_worker("auto", tensor_parallel_size=2) == 2048


def test_from_path_reads_config(tmp_path: Path, tiny: ModelInfo) -> None:
    config = {
        "num_attention_heads": 4,
        "hidden_size": 256,
        "num_hidden_layers": 4,
        "max_position_embeddings": 4096,
        "torch_dtype": "bfloat16",
        "vocab_size": 2048,
        "architectures": ["LlamaForCausalLM"],
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    model = ModelInfo.from_path(tmp_path)
    assert model == tiny  # kv heads default to heads, head_dim to hidden / heads


def test_from_path_generated_tiny_model(tiny: ModelInfo, tiny_model: Path) -> None:
    model = ModelInfo.from_path(tiny_model)
    assert model is not None and model.kv_bytes_per_token() == 4096
    assert model.num_attention_heads == tiny.num_attention_heads


def test_from_path_hub_name_and_bad_config(tmp_path: Path) -> None:
    assert ModelInfo.from_path("Qwen/Qwen2.5-7B-Instruct") is None
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(SpaceError, match=r"config\.json: not a usable model config"):
        ModelInfo.from_path(tmp_path)


# (rule, feasible options, infeasible options, extra keyword arguments)
RULE_CASES: dict[str, tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = {
    "batched_tokens_vs_seqs": (
        {"max_num_seqs": 256, "max_num_batched_tokens": 256},
        {"max_num_seqs": 256, "max_num_batched_tokens": 128},
        {},
    ),
    "batched_tokens_vs_seqs_default": ({"max_num_seqs": 8192}, {"max_num_seqs": 8193}, {}),
    "batched_tokens_vs_model_len": (
        {"enable_chunked_prefill": False, "max_num_batched_tokens": 1024, "max_model_len": 1024},
        {"enable_chunked_prefill": False, "max_num_batched_tokens": 512, "max_model_len": 1024},
        {},
    ),
    "model_len_vs_positions": ({"max_model_len": 4096}, {"max_model_len": 8192}, {}),
    "tp_vs_heads": ({"tensor_parallel_size": 4}, {"tensor_parallel_size": 3}, {"devices": 4}),
    "parallel_vs_devices": (
        {"tensor_parallel_size": 2, "pipeline_parallel_size": 2},
        {"tensor_parallel_size": 2, "pipeline_parallel_size": 2},
        {"devices": 4, "bad_devices": 2},
    ),
    "cpu_block_size": ({"block_size": 96}, {"block_size": 100}, {"platform": "cpu"}),
    "kv_cache_fits_request": (
        {"max_model_len": 1024, "kv_cache_memory_bytes": 4 * MIB},
        {"max_model_len": 1024, "kv_cache_memory_bytes": 4 * MIB - 1},
        {},
    ),
    "kv_cache_fits_request_fp8": (
        {"max_model_len": 1024, "kv_cache_memory_bytes": 2 * MIB, "kv_cache_dtype": "fp8"},
        {"max_model_len": 1024, "kv_cache_memory_bytes": 2 * MIB, "kv_cache_dtype": "auto"},
        {},
    ),
    "memory_utilization": (
        {"gpu_memory_utilization": 1.0},
        {"gpu_memory_utilization": 1.2},
        {},
    ),
    "memory_utilization_zero": ({"gpu_memory_utilization": 0.5}, {"gpu_memory_utilization": 0}, {}),
    "parallel_sizes_positive": ({"tensor_parallel_size": 1}, {"tensor_parallel_size": 0}, {}),
    "long_prefill_vs_model_len": (
        {"long_prefill_token_threshold": 1024, "max_model_len": 1024},
        {"long_prefill_token_threshold": 2048, "max_model_len": 1024},
        {},
    ),
    "long_prefill_without_chunking": (
        {"long_prefill_token_threshold": 512},  # chunked prefill on: vLLM's default
        {
            "long_prefill_token_threshold": 512,
            "enable_chunked_prefill": False,
            "max_num_batched_tokens": 4096,
        },
        {},
    ),
    "capture_with_eager": (
        {"max_cudagraph_capture_size": 256, "enforce_eager": False},
        {"max_cudagraph_capture_size": 256, "enforce_eager": True},
        {},
    ),
    "async_with_ngram": (
        {"async_scheduling": None, "speculative_config": {"method": "ngram"}},
        {"async_scheduling": False, "speculative_config": {"method": "ngram"}},
        {},
    ),
    "async_off_without_drafts": (
        {"async_scheduling": False},
        {"async_scheduling": False, "speculative_config": {"method": "ngram"}},
        {},
    ),
}


@pytest.mark.parametrize("case", sorted(RULE_CASES))
def test_rule(case: str, tiny: ModelInfo) -> None:
    good, bad, kwargs = RULE_CASES[case]
    kwargs = dict(kwargs)
    devices = kwargs.pop("devices", 1)
    bad_devices = kwargs.pop("bad_devices", devices)
    assert check_constraints(good, tiny, devices=devices, **kwargs) == []
    problems = check_constraints(bad, tiny, devices=bad_devices, **kwargs)
    assert len(problems) == 1, problems


def test_messages_are_readable(tiny: ModelInfo) -> None:
    problems = check_constraints({"max_num_seqs": 256, "max_num_batched_tokens": 128}, tiny)
    assert problems == ["max_num_batched_tokens (128) must be >= max_num_seqs (256)"]


def test_platform_defaults(tiny: ModelInfo) -> None:
    # max_num_batched_tokens defaults to 2048 on CPU and 8192 elsewhere.
    assert check_constraints({"max_num_seqs": 4096}, tiny, platform="cpu")
    assert not check_constraints({"max_num_seqs": 4096}, tiny, platform="cuda")
    # Block size 16 is fine on GPU, not on CPU.
    assert check_constraints({"block_size": 16}, tiny, platform="cpu")
    assert not check_constraints({"block_size": 16}, tiny, platform="cuda")


def test_without_chunked_prefill_default_batch_fits_the_model(tiny: ModelInfo) -> None:
    # vLLM raises its default max_num_batched_tokens to max_model_len without chunked prefill.
    options = {"enable_chunked_prefill": False, "max_model_len": 4096}
    assert check_constraints(options, tiny, platform="cpu") == []


def test_kv_cache_rule_uses_model_len_from_the_model(tiny: ModelInfo) -> None:
    # No max_model_len: the model's 4096 positions need 16 MiB.
    assert check_constraints({"kv_cache_memory_bytes": 16 * MIB}, tiny) == []
    assert check_constraints({"kv_cache_memory_bytes": 8 * MIB}, tiny)


def test_kv_cache_rule_is_per_worker(tiny: ModelInfo) -> None:
    options = {"max_model_len": 1024, "kv_cache_memory_bytes": 2 * MIB, "tensor_parallel_size": 2}
    assert check_constraints(options, tiny, devices=2) == []


def test_kv_heads_fewer_than_tp(tiny: ModelInfo) -> None:
    gqa = tiny.model_copy(update={"num_attention_heads": 8, "num_key_value_heads": 2})
    assert check_constraints({"tensor_parallel_size": 4}, gqa, devices=4) == []
    odd = tiny.model_copy(update={"num_attention_heads": 12, "num_key_value_heads": 3})
    assert check_constraints({"tensor_parallel_size": 2}, odd, devices=2)


def test_without_model_only_model_independent_rules(tiny: ModelInfo) -> None:
    options = {
        "max_model_len": 100_000,
        "kv_cache_memory_bytes": 1,
        "tensor_parallel_size": 3,
        "block_size": 100,
    }
    problems = check_constraints(options, None, devices=3, platform="cpu")
    assert problems == ["block_size (100) must be a multiple of 32 on CPU"]
    assert len(check_constraints(options, tiny, devices=3, platform="cpu")) == 4


def heads_only(heads: int | None, kv: int | None) -> ModelInfo | None:
    """A model of which only the head counts matter (the parallel rules read nothing else)."""
    if heads is None:
        return None
    config = {"num_attention_heads": heads, "num_key_value_heads": kv, "hidden_size": heads}
    return ModelInfo.model_validate({**config, "num_hidden_layers": 1})


@pytest.mark.parametrize(
    ("tp", "pp", "heads", "kv", "problem"),
    [
        (8, 1, 32, 8, None),
        (2, 4, 32, 8, None),
        (16, 1, 32, 8, "pipeline_parallel_size (16 * 1) must be <= the devices given (8)"),
        (4, 4, None, None, "(4 * 4) must be <= the devices given (8)"),
        (3, 1, 32, 8, "tensor_parallel_size (3) must divide num_attention_heads (32)"),
        (3, 1, 48, 8, "tensor_parallel_size (3) must divide or be a multiple of KV heads (8)"),
        (4, 1, 32, 2, None),  # TP a multiple of the KV heads: KV heads are replicated
        (0, 1, None, None, "tensor_parallel_size (0) and pipeline_parallel_size (1) must be >= 1"),
        (0, 1, 32, 8, "tensor_parallel_size (0) and pipeline_parallel_size (1) must be >= 1"),
        (1, 0, 32, 8, "tensor_parallel_size (1) and pipeline_parallel_size (0) must be >= 1"),
    ],
)  # fmt: skip
def test_parallel_config_on_eight_devices(
    tp: int, pp: int, heads: int | None, kv: int | None, problem: str | None
) -> None:
    """TP x PP against the devices given and the model's attention and KV heads."""
    options = {"tensor_parallel_size": tp, "pipeline_parallel_size": pp}
    problems = check_constraints(options, heads_only(heads, kv), devices=8)
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problem in problems[0], problems
