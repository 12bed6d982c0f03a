"""Every shipped space loads, and its baseline is a valid point of its own distributions."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from autotune.space import (
    BoolParam,
    CategoricalParam,
    FloatParam,
    IntParam,
    ModelInfo,
    SearchSpace,
    check_constraints,
    list_spaces,
    load_space,
)
from autotune.space._memory import DEFAULT_MEMORY_UTILIZATION

SHIPPED = list_spaces()


def test_expected_spaces_are_shipped() -> None:
    assert {p.stem for p in SHIPPED} >= {"cpu", "cpu-quick", "cuda", "ascend"}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_loads_by_path_and_by_name(path: Path) -> None:
    space = load_space(path)
    assert space.name == path.stem
    assert load_space(path.stem).baseline_params() == space.baseline_params()


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_distributions_match_types(path: Path) -> None:
    space = load_space(path)
    expected = {
        IntParam: IntDistribution,
        FloatParam: FloatDistribution,
        CategoricalParam: CategoricalDistribution,
        BoolParam: CategoricalDistribution,
    }
    dists = space.distributions()
    assert list(dists) == space.names
    for param in space.parameters:
        assert isinstance(dists[param.name], expected[type(param)])
        if isinstance(param, BoolParam):
            assert dists[param.name] == CategoricalDistribution([False, True])


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_baseline_within_distributions(path: Path) -> None:
    space = load_space(path)
    dists = space.distributions()
    for name, value in space.baseline_params().items():
        dist = dists[name]
        assert dist._contains(dist.to_internal_repr(value)), name


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_suggest_with_a_real_study(path: Path) -> None:
    space = load_space(path)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.enqueue_trial(space.baseline_params())
    for _ in range(5):
        trial = study.ask()
        params = space.suggest(trial)
        _, env = space.to_engine(params)
        assert all(isinstance(v, str) for v in env.values())
        study.tell(trial, 0.0)
    assert study.trials[0].params == space.baseline_params()


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_baseline_is_feasible_for_the_tiny_model(path: Path, tiny: ModelInfo) -> None:
    space = load_space(path)
    options, _ = space.to_engine(space.baseline_params())
    options.setdefault("max_model_len", 1024)
    assert check_constraints(options, tiny, devices=1, platform=space.platform) == []


def test_cpu_round_trip() -> None:
    space = load_space("cpu")
    params = {
        "max_num_seqs": 64,
        "max_num_batched_tokens": 4096,
        "enable_chunked_prefill": False,
        "enable_prefix_caching": True,
        "block_size": 64,
        "enforce_eager": True,
        "kv_cache_dtype": "fp8",
        "kv_cache_mib": 512,
        "omp_bind": "{cores}",
    }
    options, env = space.to_engine(params)
    assert options == {
        "max_num_seqs": 64,
        "max_num_batched_tokens": 4096,
        "enable_chunked_prefill": False,
        "enable_prefix_caching": True,
        "block_size": 64,
        "enforce_eager": True,
        "kv_cache_dtype": "fp8",
        "kv_cache_memory_bytes": 512 * 1024 * 1024,
    }
    assert env == {"VLLM_CPU_OMP_THREADS_BIND": "{cores}"}
    assert space.describe(params).startswith("max_num_seqs=64 max_num_batched_tokens=4096 ")
    assert "kv_cache_mib=512" in space.describe(params)


def test_cpu_suggest_with_fixed_trial() -> None:
    space = load_space("cpu")
    trial = optuna.trial.FixedTrial(space.baseline_params())
    assert space.suggest(trial) == space.baseline_params()


def test_cpu_quick_fixes_eager_mode() -> None:
    space = load_space("cpu-quick")
    options, env = space.to_engine(space.baseline_params())
    assert options["enforce_eager"] is True
    assert options["kv_cache_memory_bytes"] == 512 * 2**20
    assert env == {}


def test_cpu_does_not_fix_max_model_len() -> None:
    assert load_space("cpu").fixed == {}


def test_cuda_null_choice_is_not_passed() -> None:
    space = load_space("cuda")
    options, _ = space.to_engine(space.baseline_params())
    assert "max_cudagraph_capture_size" not in options
    params = space.baseline_params() | {"max_cudagraph_capture_size": 256}
    assert space.to_engine(params)[0]["max_cudagraph_capture_size"] == 256


def test_ascend_variants_and_empty_env_values() -> None:
    space = load_space("ascend")
    params = space.baseline_params()
    options, env = space.to_engine(params)
    assert "model" not in options and "quantization" not in options
    assert "PYTORCH_NPU_ALLOC_CONF" not in env and "HCCL_OP_EXPANSION_MODE" not in env
    assert env["TASK_QUEUE_ENABLE"] == "1"
    params |= {"model_variant": "w8a8", "hccl_expansion": "AIV"}
    options, env = space.to_engine(params)
    assert options["quantization"] == "ascend"
    assert options["model"].endswith("-w8a8")
    assert env["HCCL_OP_EXPANSION_MODE"] == "AIV"
    assert options["block_size"] == 128


def test_direct_construction_is_validated_too() -> None:
    space = SearchSpace.model_validate(
        {
            "name": "x",
            "parameters": [
                {"name": "max_num_seqs", "type": "int", "low": 1, "high": 8, "baseline": 8}
            ],
        }
    )
    assert space.source is None
    assert space.to_engine({"max_num_seqs": 2}) == ({"max_num_seqs": 2}, {})


@pytest.mark.parametrize("name", ["cuda", "ascend"])
def test_gpu_and_npu_baselines_are_vllms_memory_default(name: str) -> None:
    """The baseline is what `vllm serve` runs with no flag (vLLM 0.32: 0.92, not 0.9)."""
    baseline = load_space(name).baseline_params()
    assert baseline["gpu_memory_utilization"] == DEFAULT_MEMORY_UTILIZATION == 0.92
