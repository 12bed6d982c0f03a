"""Engine configs spelled as `vllm serve --config` YAML, argv and env files."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from autotune.engine import (
    EngineConfig,
    config_file_mapping,
    env_file_text,
    from_yaml_dict,
    option_argv,
    to_argv,
    to_yaml_dict,
    to_yaml_text,
)

CONFIG = EngineConfig(
    model="/models/tiny",
    served_model_name="tiny",
    args={
        "max_num_seqs": 32,
        "enable_prefix_caching": True,
        "enforce_eager": False,
        "cudagraph_capture_sizes": [1, 2, 4],
        "compilation_config": {"cudagraph_mode": "FULL", "level": 3},
        "gpu_memory_utilization": 0.85,
        "kv_cache_dtype": "fp8",
    },
)


def test_yaml_dict_uses_long_option_names_with_identity_first() -> None:
    data = to_yaml_dict(CONFIG)
    assert list(data)[:2] == ["model", "served-model-name"]
    assert data["model"] == "/models/tiny"
    assert data["served-model-name"] == "tiny"
    assert data["max-num-seqs"] == 32
    assert data["enable-prefix-caching"] is True
    assert data["enforce-eager"] is False
    assert data["cudagraph-capture-sizes"] == [1, 2, 4]
    assert data["compilation-config"] == {"cudagraph_mode": "FULL", "level": 3}
    assert not any("_" in key for key in data)


def test_yaml_dict_round_trips() -> None:
    back = from_yaml_dict(to_yaml_dict(CONFIG), env={"OMP_NUM_THREADS": "4"})
    assert back.model == CONFIG.model
    assert back.served_model_name == CONFIG.served_model_name
    assert back.args == CONFIG.args
    assert back.env == {"OMP_NUM_THREADS": "4"}
    assert back == CONFIG.model_copy(update={"env": {"OMP_NUM_THREADS": "4"}})


def test_yaml_dict_without_served_name() -> None:
    config = EngineConfig(model="m", args={"max_num_seqs": 8})
    assert to_yaml_dict(config) == {"model": "m", "max-num-seqs": 8}
    assert from_yaml_dict(to_yaml_dict(config)) == config


def test_from_yaml_dict_accepts_any_spelling_and_served_name_list() -> None:
    config = from_yaml_dict(
        {"model": "m", "max_num_seqs": 4, "--block-size": 16, "served-model-name": ["a", "b"]}
    )
    assert config.args == {"max_num_seqs": 4, "block_size": 16}
    assert config.served_model_name == "a"


@pytest.mark.parametrize("data", [{}, {"model": ""}, {"model": 3}, {"max-num-seqs": 4}])
def test_from_yaml_dict_needs_a_model(data: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="model"):
        from_yaml_dict(data)


@pytest.mark.parametrize(
    ("name", "value", "argv"),
    [
        ("enforce_eager", True, ["--enforce-eager"]),
        ("enable_prefix_caching", False, ["--no-enable-prefix-caching"]),
        ("cudagraph_capture_sizes", [1, 2, 4], ["--cudagraph-capture-sizes", "1", "2", "4"]),
        ("max_num_seqs", 32, ["--max-num-seqs", "32"]),
        ("gpu_memory_utilization", 0.85, ["--gpu-memory-utilization", "0.85"]),
        ("kv_cache_dtype", "fp8", ["--kv-cache-dtype", "fp8"]),
        (
            "compilation_config",
            {"cudagraph_mode": "FULL", "level": 3},
            ["--compilation-config", '{"cudagraph_mode":"FULL","level":3}'],
        ),
    ],
)
def test_option_argv_follows_vllm_config_rules(name: str, value: object, argv: list[str]) -> None:
    assert option_argv(name, value) == argv


def test_to_argv_spells_the_whole_config() -> None:
    argv = to_argv(CONFIG)
    assert argv[:4] == ["--model", "/models/tiny", "--served-model-name", "tiny"]
    assert argv[4:] == [
        "--compilation-config",
        '{"cudagraph_mode":"FULL","level":3}',
        "--cudagraph-capture-sizes",
        "1",
        "2",
        "4",
        "--enable-prefix-caching",
        "--no-enforce-eager",
        "--gpu-memory-utilization",
        "0.85",
        "--kv-cache-dtype",
        "fp8",
        "--max-num-seqs",
        "32",
    ]
    assert json.loads(argv[5]) == CONFIG.args["compilation_config"]


def test_yaml_text_with_header_reads_back() -> None:
    text = to_yaml_text(CONFIG, header="Best config of study s1\n\ntrial 7: 1,234 tok/s")
    lines = text.splitlines()
    assert lines[:3] == ["# Best config of study s1", "#", "# trial 7: 1,234 tok/s"]
    assert not lines[3].startswith("#")
    assert from_yaml_dict(yaml.safe_load(text)) == CONFIG


def test_yaml_text_without_header() -> None:
    text = to_yaml_text(CONFIG)
    assert text.startswith("model: /models/tiny\n")
    assert "#" not in text
    assert yaml.safe_load(text) == config_file_mapping(to_yaml_dict(CONFIG))


ENV = {
    "PLAIN": "1",
    "CORES": "0-3,8|9",
    "SPACES": "a b  c",
    "SINGLE": "it's",
    "DOUBLE": 'say "hi"',
    "DOLLAR": "$HOME `id` $(id)",
    "EMPTY": "",
    "GLOB": "*.yaml",
    "TILDE": "~/x",
    "SEMI": "a;b&c",
    "NEWLINE": "line1\nline2",
}


def test_env_file_quotes_only_what_needs_it() -> None:
    text = env_file_text({"B": "2", "A": "x y", "C": "0-3"})
    assert text == "A='x y'\nB=2\nC=0-3\n"


@pytest.mark.parametrize("key", sorted(ENV))
def test_env_file_is_read_back_by_bash(tmp_path: Path, key: str) -> None:
    path = tmp_path / "engine.env"
    path.write_text(env_file_text(ENV))
    script = f'set -a; . "$1"; printf %s "${key}"'
    result = subprocess.run(
        ["bash", "-c", script, "bash", str(path)],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"},
        timeout=60,
    )
    assert result.stdout == ENV[key]
    assert result.stderr == ""


def test_a_false_switch_is_written_as_no_key_for_vllm_serve() -> None:
    """`vllm serve --config` (vLLM 0.32) drops `KEY: false`: its top-level parser has no
    `--no-KEY` of the serve subcommand. `no-KEY: true` reaches the subcommand as `--no-KEY`."""
    config = EngineConfig(
        model="/m", args={"enable_prefix_caching": False, "enforce_eager": True, "x_y": False}
    )
    data = yaml.safe_load(to_yaml_text(config))
    assert data["no-enable-prefix-caching"] is True and "enable-prefix-caching" not in data
    assert data["enforce-eager"] is True
    assert data["x-y"] is False  # not a vLLM option: left as it is
    assert to_yaml_dict(config)["enable-prefix-caching"] is False  # what the store keeps
    back = from_yaml_dict(data)
    assert (
        back.args["enable_prefix_caching"] is False and "no_enable_prefix_caching" not in back.args
    )
    plain = yaml.safe_load(to_yaml_text(config, serve=False))  # the offline child's kwargs
    assert plain["enable-prefix-caching"] is False
