"""Features of the file format, on small spaces written for the test."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from autotune.space import SpaceError, load_space

WriteSpace = Callable[..., Path]

BASE = """
name: t
platform: cpu
fixed:
  max-model-len: 1024
  --enforce-eager: true
env:
  VLLM_CPU_SGL_KERNEL: 0
parameters:
  - name: max-num-seqs
    type: int
    low: 4
    high: 256
    log: true
    baseline: 128
  - name: use_sgl
    type: bool
    env: VLLM_CPU_MOE_PREPACK
    baseline: true
  - name: util
    type: float
    option: gpu_memory_utilization
    low: 0.5
    high: 0.9
    step: 0.1
    baseline: 0.7
  - name: dtype
    type: categorical
    option: kv-cache-dtype
    choices: [null, fp8]
    baseline: null
"""


def test_dash_names_normalized_and_env_strings(write_space: WriteSpace) -> None:
    space = load_space(write_space(BASE))
    assert space.fixed == {"max_model_len": 1024, "enforce_eager": True}
    assert space.env == {"VLLM_CPU_SGL_KERNEL": "0"}
    params = {"max-num-seqs": 8, "use_sgl": False, "util": 0.8, "dtype": None}
    options, env = space.to_engine(params)
    assert options == {
        "max_model_len": 1024,
        "enforce_eager": True,
        "max_num_seqs": 8,
        "gpu_memory_utilization": 0.8,
    }
    assert env == {"VLLM_CPU_SGL_KERNEL": "0", "VLLM_CPU_MOE_PREPACK": "0"}
    assert space.to_engine(params | {"use_sgl": True})[1]["VLLM_CPU_MOE_PREPACK"] == "1"


def test_float_baseline_on_step_grid_with_rounding(write_space: WriteSpace) -> None:
    # 0.7 is not exactly 0.5 + 2 * 0.1 in binary; the grid check tolerates that.
    assert load_space(write_space(BASE)).baseline_params()["util"] == 0.7


def test_a_step_grid_value_reaches_the_engine_as_the_grid_spells_it(
    write_space: WriteSpace,
) -> None:
    # Optuna's grid values are low + k * step in binary: on a 0.01 grid from 0.8 it gives
    # 0.8400000000000001, which the exported YAML spelled so.
    space = load_space(write_space(BASE))
    params = space.baseline_params() | {"util": 0.7000000000000001}
    assert params["util"] != 0.7
    assert space.to_engine(params)[0]["gpu_memory_utilization"] == 0.7


SPECULATIVE = """
name: spec
platform: cpu
parameters:
  - name: method
    type: categorical
    option: speculative_config.method
    choices: [null, ngram]
    baseline: null
  - name: tokens
    type: int
    option: speculative_config.num_speculative_tokens
    low: 1
    high: 5
    baseline: 3
    only_if: {method: [ngram]}
  - name: lookup
    type: int
    option: speculative_config.prompt_lookup_max
    low: 2
    high: 8
    baseline: 5
    only_if: {method: [ngram]}
"""


def test_keys_of_one_dict_option_merge_and_only_if_leaves_a_value_out(
    write_space: WriteSpace,
) -> None:
    space = load_space(write_space(SPECULATIVE))
    options, _ = space.to_engine({"method": "ngram", "tokens": 2, "lookup": 4})
    assert options == {
        "speculative_config": {
            "method": "ngram",
            "num_speculative_tokens": 2,
            "prompt_lookup_max": 4,
        }
    }
    # Without a method, no speculation: the token count is not set (vLLM would refuse it).
    assert space.to_engine({"method": None, "tokens": 2, "lookup": 4})[0] == {}
    # ... so two such proposals are the same engine, and the study launches it once.
    a, b = {"method": None, "tokens": 2, "lookup": 4}, {"method": None, "tokens": 5, "lookup": 8}
    assert space.effective(a) == space.effective(b) == space.baseline_params()
    assert space.effective({"method": "ngram", "tokens": 2, "lookup": 4})["tokens"] == 2
    # An imported command reads each key back.
    params, used, _ = space.params_from_engine(options, {})
    assert params == {"method": "ngram", "tokens": 2, "lookup": 4}
    assert used == {"speculative_config"}


# `lookup` set only with tokens 4-5 (and `tokens` only with ngram): an only_if chain.
_head, _last, _tail = SPECULATIVE.rpartition("only_if: {method: [ngram]}")
CHAIN = _head + "only_if: {tokens: [4, 5]}" + _tail


def test_only_if_follows_a_chain_and_the_label_is_what_the_engine_gets(
    write_space: WriteSpace,
) -> None:
    # `lookup` is set only with tokens 4-5, and `tokens` only with ngram: without a method,
    # tokens=5 never reaches the engine, so neither does lookup, and the label says neither.
    space = load_space(write_space(CHAIN))
    off = {"method": None, "tokens": 5, "lookup": 8}
    assert space.active_names(off) == {"method"}
    assert space.to_engine(off)[0] == {}
    assert space.describe(off) == "method=null"
    assert space.effective(off) == space.baseline_params()
    on = {"method": "ngram", "tokens": 5, "lookup": 8}
    assert space.describe(on) == "method=ngram tokens=5 lookup=8"
    assert space.to_engine(on)[0]["speculative_config"]["prompt_lookup_max"] == 8
    assert space.describe(on | {"tokens": 2}) == "method=ngram tokens=2"


def test_to_engine_rejects_missing_unknown_and_invalid_params(write_space: WriteSpace) -> None:
    space = load_space(write_space(BASE))
    params = space.baseline_params()
    with pytest.raises(SpaceError, match="missing use_sgl"):
        space.to_engine({k: v for k, v in params.items() if k != "use_sgl"})
    with pytest.raises(SpaceError, match="unknown extra"):
        space.to_engine(params | {"extra": 1})
    with pytest.raises(SpaceError, match=r"params\.max-num-seqs: invalid value 512"):
        space.to_engine(params | {"max-num-seqs": 512})


def test_describe_is_one_line(write_space: WriteSpace) -> None:
    space = load_space(write_space(BASE))
    text = space.describe(space.baseline_params())
    assert text == "max-num-seqs=128 use_sgl=true util=0.7 dtype=null"


def test_allow_unknown_options(write_space: WriteSpace) -> None:
    text = """
allow_unknown_options: true
fixed: {my_plugin_option: 3}
parameters:
  - {name: not_an_option, type: int, low: 1, high: 2, baseline: 1}
"""
    space = load_space(write_space(text, "plugin.yaml"))
    assert space.name == "plugin"
    assert space.to_engine({"not_an_option": 2})[0] == {"my_plugin_option": 3, "not_an_option": 2}


def test_variants_override_and_remove_options(write_space: WriteSpace) -> None:
    text = """
variants:
  base: {}
  q: {model: /m/q, quantization: awq}
parameters:
  - {name: ckpt, type: categorical, variants: true, choices: [base, q], baseline: base}
"""
    space = load_space(write_space(text))
    assert space.to_engine({"ckpt": "base"}) == ({}, {})
    assert space.to_engine({"ckpt": "q"})[0] == {"model": "/m/q", "quantization": "awq"}


DOTTED = """
name: t
parameters:
  - name: graph_mode
    type: categorical
    option: compilation-config.cudagraph-mode
    choices: [null, PIECEWISE, FULL]
    baseline: null
  - name: capture
    type: int
    option: compilation_config.max_cudagraph_capture_size
    low: 8
    high: 64
    step: 8
    baseline: 16
"""


def test_dotted_option_sets_a_key_of_a_dict_option(write_space: WriteSpace) -> None:
    text = DOTTED.replace("compilation_config.max_cudagraph_capture_size", "kv_transfer_config.x")
    space = load_space(write_space(text))
    graph = space.parameters[0]
    assert graph.option == "compilation_config.cudagraph_mode"  # dashes normalized
    assert graph.target_option == "compilation_config"
    assert graph.option_path == ("compilation_config", "cudagraph_mode")
    assert graph.engine_value("FULL") == {"cudagraph_mode": "FULL"}
    options, _ = space.to_engine({"graph_mode": "FULL", "capture": 32})
    assert options == {
        "compilation_config": {"cudagraph_mode": "FULL"},
        "kv_transfer_config": {"x": 32},
    }
    options, _ = space.to_engine({"graph_mode": None, "capture": 16})
    assert "compilation_config" not in options  # null: the engine's default


def test_dotted_option_nests_deeper_and_scales(write_space: WriteSpace) -> None:
    text = """
name: t
parameters:
  - {name: buf, type: int, option: additional_config.a.b_mib, scale: 1024, low: 1, high: 4,
     baseline: 2}
"""
    space = load_space(write_space(text))
    assert space.to_engine({"buf": 3}) == ({"additional_config": {"a": {"b_mib": 3072}}}, {})


def test_two_keys_of_one_dict_option_are_merged(write_space: WriteSpace) -> None:
    # Each parameter sets its key; neither replaces the dict the other set a key of.
    space = load_space(write_space(DOTTED))
    options, _ = space.to_engine({"graph_mode": "FULL", "capture": 32})
    assert options == {
        "compilation_config": {"cudagraph_mode": "FULL", "max_cudagraph_capture_size": 32}
    }
    assert space.to_engine({"graph_mode": None, "capture": 32})[0] == {
        "compilation_config": {"max_cudagraph_capture_size": 32}
    }
