"""The Ascend space: checkpoints as variants, graph modes gated by vllm-ascend, env knobs."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from autotune.engine import EngineConfig, from_yaml_dict, to_yaml_dict
from autotune.space import (
    CategoricalParam,
    HostFacts,
    ModelInfo,
    SpaceError,
    check_constraints,
    load_space,
    restrict_to_host,
)

WriteSpace = Callable[..., Path]
SetVersion = Callable[[str | None], None]

TORCHAIR_FIXED = """
platform: ascend
fixed:
  additional_config: {torchair_graph_config: {enabled: true}}
parameters:
  - {name: max_num_seqs, type: int, low: 16, high: 256, baseline: 256}
"""


@pytest.fixture
def ascend_version(monkeypatch: pytest.MonkeyPatch) -> SetVersion:
    """Pretend that this vllm-ascend version (None: none) is installed."""

    def set_version(version: str | None) -> None:
        monkeypatch.setattr("autotune.space._loader.installed_ascend_version", lambda: version)

    return set_version


def graph_mode_index() -> int:
    return load_space("ascend").names.index("graph_mode")


@pytest.mark.parametrize("version", [None, "0.12.0rc1", "0.13.0", "0.21.0rc1"])
def test_shipped_space_loads(ascend_version: SetVersion, version: str | None) -> None:
    ascend_version(version)
    space = load_space("ascend")
    assert space.platform == "ascend"
    assert "graph_mode" in space.names and "hccl_buffsize" in space.names


def test_shipped_space_drops_a_graph_mode_the_installed_version_lacks(
    ascend_version: SetVersion,
) -> None:
    """vllm-ascend 0.11 has no FULL mode: the shipped space loads, and the study drops FULL
    with one line instead of refusing the space (FULL_DECODE_ONLY, from 0.11.0rc1, stays)."""
    ascend_version("0.11.0")
    space = load_space("ascend")  # loads
    restricted, notes = restrict_to_host(space, HostFacts(ascend_version="0.11.0"))
    graph = next(p for p in restricted.parameters if p.name == "graph_mode")
    assert isinstance(graph, CategoricalParam) and graph.choices == [None, "FULL_DECODE_ONLY"]
    graph_line = (
        "search space ascend: dropped graph_mode FULL, FULL_AND_PIECEWISE before the study "
        "(compilation_config.cudagraph_mode: FULL needs vllm-ascend >= 0.12.0rc1 "
        "(installed: 0.11.0))"
    )
    assert graph_line in notes
    _, newer = restrict_to_host(space, HostFacts(ascend_version="0.21.0rc1"))
    assert not [n for n in newer if "graph_mode" in n]  # every mode runs there
    _, unknown = restrict_to_host(space, HostFacts())  # no vllm-ascend here: no mode judged
    assert not [n for n in unknown if "graph_mode" in n]


def test_a_variant_checkpoint_that_is_not_here_is_dropped(
    ascend_version: SetVersion, write_space: WriteSpace, tmp_path: Path
) -> None:
    """The shipped w8a8 path is an example to edit: where it does not exist, the variant is
    dropped with one line instead of failing its trials at start-up."""
    ascend_version(None)
    here = tmp_path / "qwen-w8a8"
    here.mkdir()
    text = f"""
platform: ascend
variants:
  bf16: {{model: null}}
  w8a8: {{model: {here}, quantization: ascend}}
  w4a8: {{model: /nonexistent/qwen-w4a8, quantization: ascend}}
  hub: {{model: org/qwen-w8a8, quantization: ascend}}
parameters:
  - {{name: v, type: categorical, variants: true, choices: [bf16, w8a8, w4a8, hub],
     baseline: bf16}}
"""
    space = load_space(write_space(text))
    restricted, notes = restrict_to_host(space, HostFacts())
    assert restricted.parameters[0].choices == ["bf16", "w8a8", "hub"]  # type: ignore[attr-defined]
    assert notes == [
        "search space space: dropped v w4a8 before the study "
        "(model=/nonexistent/qwen-w4a8: no such checkpoint on this host)"
    ]


@pytest.mark.parametrize("version", ["0.12.0rc1", "0.13.0"])
def test_torchair_refused_where_it_was_removed(
    ascend_version: SetVersion, write_space: WriteSpace, version: str
) -> None:
    ascend_version(version)
    path = write_space(TORCHAIR_FIXED)
    with pytest.raises(SpaceError) as info:
        load_space(path)
    assert str(info.value) == (
        f"{path}: fixed.additional_config.torchair_graph_config: torchair graph mode was "
        f"removed in vllm-ascend 0.12.0rc1 (installed: {version}); use "
        "compilation_config.cudagraph_mode (ACLGraph)"
    )


@pytest.mark.parametrize("version", [None, "0.11.0", "0.10.2rc1"])
def test_torchair_accepted_before_removal_or_without_vllm_ascend(
    ascend_version: SetVersion, write_space: WriteSpace, version: str | None
) -> None:
    ascend_version(version)
    space = load_space(write_space(TORCHAIR_FIXED))
    options, _ = space.to_engine(space.baseline_params())
    assert options["additional_config"] == {"torchair_graph_config": {"enabled": True}}


def test_torchair_named_by_a_parameter_or_variant(
    ascend_version: SetVersion, write_space: WriteSpace
) -> None:
    ascend_version("0.13.0")
    param = """
platform: ascend
parameters:
  - {name: torchair, type: bool, option: additional_config.torchair_graph_config.enabled,
     baseline: false}
"""
    with pytest.raises(SpaceError, match=r"parameters\[0\]\.option: torchair graph mode"):
        load_space(write_space(param, "param.yaml"))
    variant = """
platform: ascend
variants:
  plain: {}
  torchair: {additional_config: {torchair_graph_config: {enabled: true}}}
parameters:
  - {name: v, type: categorical, variants: true, choices: [plain, torchair], baseline: plain}
"""
    # A variant is a choice: the space loads, and the study drops it with one line.
    space = load_space(write_space(variant, "variant.yaml"))
    restricted, notes = restrict_to_host(space, HostFacts(ascend_version="0.13.0"))
    assert restricted.parameters[0].choices == ["plain"]  # type: ignore[attr-defined]
    assert len(notes) == 1 and "dropped v torchair before the study" in notes[0]


def test_other_platforms_are_not_checked(
    ascend_version: SetVersion, write_space: WriteSpace
) -> None:
    ascend_version("0.13.0")
    load_space(write_space(TORCHAIR_FIXED.replace("platform: ascend", "platform: cuda")))


def test_several_problems_are_counted(ascend_version: SetVersion, write_space: WriteSpace) -> None:
    ascend_version("0.13.0")
    text = TORCHAIR_FIXED.replace(
        "fixed:\n", "fixed:\n  compilation_config: {cudagraph_mode: FULL_AND_PIECEWISE}\n"
    )
    with pytest.raises(
        SpaceError, match=r"fixed\.compilation_config\.cudagraph_mode: .* \(and 1 more\)$"
    ):
        load_space(write_space(text))


def test_graph_mode_is_a_nested_compilation_config() -> None:
    space = load_space("ascend")
    options, _ = space.to_engine(space.baseline_params())
    assert "compilation_config" not in options  # baseline: vllm-ascend's default mode
    params = space.baseline_params() | {"graph_mode": "FULL_DECODE_ONLY"}
    options, _ = space.to_engine(params)
    assert options["compilation_config"] == {"cudagraph_mode": "FULL_DECODE_ONLY"}
    data = to_yaml_dict(EngineConfig(model="/models/qwen", args=options))
    assert data["compilation-config"] == {"cudagraph_mode": "FULL_DECODE_ONLY"}


def test_eager_with_a_graph_mode_is_skipped(tiny: ModelInfo) -> None:
    space = load_space("ascend")
    eager = space.baseline_params() | {"enforce_eager": True}
    options, _ = space.to_engine(eager)
    options["max_model_len"] = 1024
    assert check_constraints(options, tiny, platform="ascend") == []
    options, _ = space.to_engine(eager | {"graph_mode": "FULL"})
    options["max_model_len"] = 1024
    (problem,) = check_constraints(options, tiny, platform="ascend")
    assert re.match(r"enforce_eager overrides compilation_config.cudagraph_mode \(FULL\)", problem)


def test_quantized_checkpoint_variant_end_to_end() -> None:
    """The w8a8 variant replaces the model and adds `quantization: ascend` in the served YAML."""
    space = load_space("ascend")
    params = space.baseline_params() | {"model_variant": "w8a8"}
    options, _ = space.to_engine(params)
    config = EngineConfig(model="/models/Qwen2.5-7B-Instruct", served_model_name="q", args=options)
    data = yaml.safe_load(yaml.safe_dump(to_yaml_dict(config), sort_keys=False))
    assert data["model"] == "/models/Qwen2.5-7B-Instruct-w8a8"
    assert data["quantization"] == "ascend"
    assert from_yaml_dict(data).model == "/models/Qwen2.5-7B-Instruct-w8a8"
    options, _ = space.to_engine(space.baseline_params())
    data = to_yaml_dict(EngineConfig(model="/models/Qwen2.5-7B-Instruct", args=options))
    assert data["model"] == "/models/Qwen2.5-7B-Instruct" and "quantization" not in data


def test_performance_env_knobs() -> None:
    space = load_space("ascend")
    env_params = {p.env: p for p in space.parameters if p.env is not None}
    assert set(env_params) == {
        "PYTORCH_NPU_ALLOC_CONF",
        "TASK_QUEUE_ENABLE",
        "CPU_AFFINITY_CONF",
        "HCCL_OP_EXPANSION_MODE",
        "HCCL_BUFFSIZE",
        "DYNAMIC_EPLB",  # set with dynamic EPLB only (vllm-ascend checks it)
    }
    _, env = space.to_engine(space.baseline_params())
    assert env == {"TASK_QUEUE_ENABLE": "1", "CPU_AFFINITY_CONF": "0"}  # "" = not set
    params = space.baseline_params() | {
        "npu_alloc_conf": "expandable_segments:True",
        "hccl_buffsize": "1024",
    }
    _, env = space.to_engine(params)
    assert env["PYTORCH_NPU_ALLOC_CONF"] == "expandable_segments:True"
    assert env["HCCL_BUFFSIZE"] == "1024"
