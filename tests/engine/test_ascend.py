"""Graph-mode options gated by the installed vllm-ascend version."""

from __future__ import annotations

from importlib import metadata
from typing import Any

import pytest
from packaging.version import Version

from autotune.engine import (
    CUDAGRAPH_MODE_SINCE,
    TORCHAIR_REMOVED_IN,
    ascend_option_problems,
    installed_ascend_version,
    parse_ascend_version,
)

TORCHAIR = {"additional_config": {"torchair_graph_config": {"enabled": True}}}


def graph(mode: str) -> dict[str, Any]:
    return {"compilation_config": {"cudagraph_mode": mode}}


def fake_distributions(monkeypatch: pytest.MonkeyPatch, installed: dict[str, str]) -> None:
    """Make `importlib.metadata.version` see only `installed` among the vllm-ascend names."""
    real = metadata.version

    def version(name: str) -> str:
        if name in ("vllm-ascend", "vllm_ascend"):
            if name in installed:
                return installed[name]
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(metadata, "version", version)


def test_not_installed_here() -> None:
    assert installed_ascend_version() is None


@pytest.mark.parametrize("name", ["vllm-ascend", "vllm_ascend"])
def test_installed_version_under_either_name(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    fake_distributions(monkeypatch, {name: "0.13.0rc1"})
    assert installed_ascend_version() == "0.13.0rc1"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.13.0", Version("0.13.0")),
        ("0.12.0rc1", Version("0.12.0rc1")),
        ("0.11.0.dev42+g1a2b3c", Version("0.11.0.dev42+g1a2b3c")),
        ("", None),
        (None, None),
        ("main", None),
    ],
)
def test_parse_version(text: str | None, expected: Version | None) -> None:
    assert parse_ascend_version(text) == expected


def test_boundaries_are_ordered_releases() -> None:
    assert str(TORCHAIR_REMOVED_IN) == "0.12.0rc1"
    assert Version("0.11.0") < TORCHAIR_REMOVED_IN < Version("0.12.0")
    assert list(CUDAGRAPH_MODE_SINCE) == [
        "NONE",
        "PIECEWISE",
        "FULL_DECODE_ONLY",
        "FULL",
        "FULL_AND_PIECEWISE",
    ]


@pytest.mark.parametrize("version", ["0.9.1", "0.11.0", "0.11.0rc3", "0.12.0.dev5"])
def test_torchair_accepted_before_its_removal(version: str) -> None:
    assert ascend_option_problems(TORCHAIR, version) == []


@pytest.mark.parametrize("version", ["0.12.0rc1", "0.13.0", "0.21.0rc1+g123"])
def test_torchair_refused_from_its_removal(version: str) -> None:
    ((path, message),) = ascend_option_problems(TORCHAIR, version)
    assert path == "additional_config.torchair_graph_config"
    assert "removed in vllm-ascend 0.12.0rc1" in message
    assert f"installed: {Version(version)}" in message
    assert "compilation_config.cudagraph_mode" in message


@pytest.mark.parametrize(("version", "refused"), [("0.11.0", False), ("0.23.0", True)])
def test_the_ascend_scheduler_is_refused_once_dropped(version: str, refused: bool) -> None:
    options = {"additional_config": {"ascend_scheduler_config": {"enabled": True}}}
    problems = ascend_option_problems(options, version)
    assert bool(problems) is refused
    if refused:
        ((path, message),) = problems
        assert path == "additional_config.ascend_scheduler_config"
        assert "the Ascend scheduler was removed in vllm-ascend 0.12.0rc1" in message


def test_torchair_in_json_text_and_disabled_is_still_named() -> None:
    options = {"additional_config": '{"torchair_graph_config": {"enabled": false}}'}
    assert len(ascend_option_problems(options, "0.13.0")) == 1


def test_other_additional_config_keys_pass() -> None:
    options = {"additional_config": {"ascend_compilation_config": {}}, "enforce_eager": True}
    assert ascend_option_problems(options, "0.13.0") == []


@pytest.mark.parametrize(
    ("mode", "older", "since"),
    [
        ("PIECEWISE", "0.10.1rc1", "0.10.2rc1"),
        ("FULL_DECODE_ONLY", "0.10.2rc1", "0.11.0rc1"),
        ("FULL", "0.11.0", "0.12.0rc1"),
        ("FULL_AND_PIECEWISE", "0.20.2rc1", "0.21.0rc1"),
    ],
)
def test_cudagraph_mode_gated_by_version(mode: str, older: str, since: str) -> None:
    ((path, message),) = ascend_option_problems(graph(mode), older)
    assert path == "compilation_config.cudagraph_mode"
    assert message == f"{mode} needs vllm-ascend >= {since} (installed: {older})"
    assert ascend_option_problems(graph(mode), since) == []
    assert ascend_option_problems(graph(mode.lower()), since) == []  # vLLM ignores case


@pytest.mark.parametrize("mode", list(CUDAGRAPH_MODE_SINCE))
def test_without_vllm_ascend_no_mode_is_gated(mode: str) -> None:
    assert ascend_option_problems(graph(mode), None) == []
    assert ascend_option_problems(TORCHAIR, None) == []
    assert ascend_option_problems(graph(mode), "not-a-version") == []


@pytest.mark.parametrize("version", [None, "0.13.0"])
def test_unknown_mode_refused_with_or_without_vllm_ascend(version: str | None) -> None:
    ((path, message),) = ascend_option_problems(graph("FULL_GRAPH"), version)
    assert path == "compilation_config.cudagraph_mode"
    assert message.startswith("unknown mode 'FULL_GRAPH' (vLLM's modes: NONE, PIECEWISE")


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"compilation_config": 3},
        {"compilation_config": "not json"},
        {"compilation_config": {"cudagraph_mode": None}},
        {"compilation_config": {"cudagraph_capture_sizes": [1, 2]}},
    ],
)
def test_nothing_to_gate(options: dict[str, Any]) -> None:
    assert ascend_option_problems(options, "0.9.1") == []


def test_both_problems_reported() -> None:
    options = TORCHAIR | graph("FULL_AND_PIECEWISE")
    paths = [path for path, _ in ascend_option_problems(options, "0.13.0")]
    assert sorted(paths) == [
        "additional_config.torchair_graph_config",
        "compilation_config.cudagraph_mode",
    ]


@pytest.mark.parametrize("key", ["enable_flashcomm1", "weight_nz_mode", "enable_matmul_allreduce"])
def test_migrated_additional_config_keys_gated_by_version(key: str) -> None:
    """The keys that replaced VLLM_ASCEND_* variables (PR #9064): an older vllm-ascend ignores
    them, so a trial would be labelled with a knob it did not run."""
    options = {"additional_config": {key: True}}
    ((path, message),) = ascend_option_problems(options, "0.13.0")
    assert path == f"additional_config.{key}"
    assert "needs vllm-ascend >= 0.20.2rc1 (installed: 0.13.0)" in message
    assert "VLLM_ASCEND_" in message  # what that version reads instead
    assert ascend_option_problems(options, "0.20.2rc1") == []
    assert ascend_option_problems(options, None) == []  # not installed here: not judged


def test_the_shipped_space_sets_tp_knobs_only_with_tensor_parallel() -> None:
    from autotune.space import load_space
    from autotune.space._host import HostFacts, restrict_to_host

    space = load_space("ascend")
    knobs = space.baseline_params() | {"flashcomm1": True, "matmul_allreduce": True}
    tp2 = space.to_engine(knobs | {"tensor_parallel_size": 2})[0]
    assert tp2["additional_config"] == {"enable_flashcomm1": True, "enable_matmul_allreduce": True}
    assert "additional_config" not in space.to_engine(knobs)[0]  # TP 1: left out
    old, lines = restrict_to_host(space, HostFacts(ascend_version="0.13.0"))
    assert next(p for p in old.parameters if p.name == "flashcomm1").choices == [None]
    assert any("dropped flashcomm1 true" in line for line in lines)
    new, lines = restrict_to_host(space, HostFacts(ascend_version="0.23.0"))
    assert next(p for p in new.parameters if p.name == "flashcomm1").choices == [None, True]
