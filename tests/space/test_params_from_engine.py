"""`SearchSpace.params_from_engine`: the inverse of `to_engine`, for imported baselines."""

from __future__ import annotations

import pytest

from autotune.space import SpaceError, load_space


def test_cpu_options_and_env_map_back_to_parameters() -> None:
    space = load_space("cpu")
    options = {
        "max_num_seqs": 64,
        "kv_cache_memory_bytes": 2048 * 2**20,
        "enable_prefix_caching": False,
        "max_model_len": 1024,
    }
    env = {"VLLM_CPU_OMP_THREADS_BIND": "{cores}", "VLLM_CPU_SGL_KERNEL": "1"}
    params, used_options, used_env = space.params_from_engine(options, env)
    assert params["max_num_seqs"] == 64
    assert params["kv_cache_mib"] == 2048  # unscaled
    assert params["enable_prefix_caching"] is False
    assert params["omp_bind"] == "{cores}"
    assert params["block_size"] == space.baseline_params()["block_size"]  # absent: baseline
    assert "max_model_len" not in used_options and "VLLM_CPU_SGL_KERNEL" not in used_env
    opts, env_out = space.to_engine(params)
    assert opts["max_num_seqs"] == 64 and opts["kv_cache_memory_bytes"] == 2048 * 2**20
    assert env_out["VLLM_CPU_OMP_THREADS_BIND"] == "{cores}"


def test_ascend_env_and_nested_graph_mode_map_back() -> None:
    space = load_space("ascend")
    params, _, used_env = space.params_from_engine(
        {"compilation_config": {"cudagraph_mode": "FULL_DECODE_ONLY"}, "tensor_parallel_size": 2},
        {"TASK_QUEUE_ENABLE": "2", "HCCL_OP_EXPANSION_MODE": "AIV"},
    )
    assert params["graph_mode"] == "FULL_DECODE_ONLY" and params["tensor_parallel_size"] == 2
    assert params["task_queue"] == "2" and params["hccl_expansion"] == "AIV"
    assert params["npu_alloc_conf"] == ""  # unset variable: the choice that leaves it unset
    assert {"TASK_QUEUE_ENABLE", "PYTORCH_NPU_ALLOC_CONF"} <= used_env


@pytest.mark.parametrize(
    ("options", "env", "message"),
    [
        ({"max_num_seqs": 4096}, {}, "max_num_seqs=4096 is not a value parameter max_num_seqs"),
        ({"kv_cache_memory_bytes": 1000}, {}, "not a multiple of the scale"),
        ({}, {"VLLM_CPU_OMP_THREADS_BIND": "0-3"}, "VLLM_CPU_OMP_THREADS_BIND=0-3 is not a value"),
    ],
)
def test_a_value_outside_the_space_is_one_line(
    options: dict[str, object], env: dict[str, str], message: str
) -> None:
    with pytest.raises(SpaceError, match=message):
        load_space("cpu").params_from_engine(options, env)
