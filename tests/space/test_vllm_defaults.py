"""`baseline: vllm_default`: vLLM's batch defaults for the device the host has, computed as the
installed vLLM computes them (checked against `EngineArgs.get_batch_defaults` itself)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

from autotune.space import HostFacts, SpaceError, load_space, with_vllm_defaults
from autotune.space._defaults import DefaultsDevice, batch_defaults

GIB = 1 << 30
# (name, memory) as torch reports them for the device vLLM runs on.
DEVICES = {
    "H100": DefaultsDevice("NVIDIA H100 80GB HBM3", 81559 * (1 << 20)),
    "H200": DefaultsDevice("NVIDIA H200", 143771 * (1 << 20)),
    "B200": DefaultsDevice("NVIDIA B200", 183359 * (1 << 20)),
    "A100-80GB": DefaultsDevice("NVIDIA A100-SXM4-80GB", 81920 * (1 << 20)),
    "A10G": DefaultsDevice("NVIDIA A10G", 23028 * (1 << 20)),
    "910B3": DefaultsDevice("Ascend910B3", 65536 * (1 << 20)),
    "unread": DefaultsDevice(),
}


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM installed")
def test_the_table_is_the_installed_vllms(monkeypatch: pytest.MonkeyPatch) -> None:
    """One test over every device, so that one process pays vLLM's import."""
    for device in DEVICES.values():
        _compare(device, monkeypatch)


def _compare(device: DefaultsDevice, monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm.engine import arg_utils
    from vllm.usage.usage_lib import UsageContext

    def memory() -> int:
        if device.memory_bytes is None:
            raise RuntimeError("no device")  # vLLM then takes its fallback
        return device.memory_bytes

    platform = SimpleNamespace(
        get_device_total_memory=memory,
        get_device_name=lambda: device.name or "",
        is_tpu=lambda: False,
        is_cpu=lambda: False,
    )
    monkeypatch.setattr(arg_utils, "current_platform", platform)
    tokens, seqs = arg_utils.EngineArgs.get_batch_defaults(world_size=1)
    for scenario, context in (("online", "OPENAI_API_SERVER"), ("offline", "LLM_CLASS")):
        ours = batch_defaults("cuda", device, 1, scenario)
        usage = getattr(UsageContext, context)
        theirs = {"max_num_seqs": seqs[usage], "max_num_batched_tokens": tokens[usage]}
        assert ours == theirs, (device, scenario)
    cpu = SimpleNamespace(**{**vars(platform), "is_cpu": lambda: True})
    monkeypatch.setattr(arg_utils, "current_platform", cpu)
    tokens, seqs = arg_utils.EngineArgs.get_batch_defaults(world_size=2)
    assert batch_defaults("cpu", device, 2, "online") == {
        "max_num_seqs": seqs[UsageContext.OPENAI_API_SERVER],
        "max_num_batched_tokens": tokens[UsageContext.OPENAI_API_SERVER],
    }


def test_the_shipped_cuda_space_starts_where_vllm_does_on_each_gpu() -> None:
    space = load_space("cuda")
    assert space.baseline_params()["max_num_seqs"] == 256  # no device read: vLLM's fallback
    h100 = HostFacts(
        device_name=DEVICES["H100"].name, device_memory_bytes=DEVICES["H100"].memory_bytes
    )
    online, note = with_vllm_defaults(space, h100, "online", {})
    base = online.baseline_params()
    assert (base["max_num_seqs"], base["max_num_batched_tokens"]) == (1024, 8192)
    assert note is not None and "NVIDIA H100 80GB HBM3, 80 GiB, an API server" in note
    offline, _ = with_vllm_defaults(space, h100, "offline", {})
    assert offline.baseline_params()["max_num_batched_tokens"] == 16384
    a100 = HostFacts(device_name=DEVICES["A100-80GB"].name, device_memory_bytes=80 * GIB)
    base = with_vllm_defaults(space, a100, "online", {})[0].baseline_params()
    assert (base["max_num_seqs"], base["max_num_batched_tokens"]) == (256, 2048)
    # Only the baseline moves: the range the study searches is the space's.
    assert online.distributions() == space.distributions()


def test_cpu_defaults_follow_the_baselines_world_size_and_performance_mode() -> None:
    space = load_space("cpu")
    two = with_vllm_defaults(space, HostFacts(), "online", {"tensor_parallel_size": 2})[0]
    assert two.baseline_params()["max_num_seqs"] == 256
    assert two.baseline_params()["max_num_batched_tokens"] == 4096
    fast = with_vllm_defaults(space, HostFacts(), "online", {"performance_mode": "throughput"})
    assert fast[0].baseline_params()["max_num_seqs"] == 256  # doubled, as vLLM doubles it
    with pytest.raises(SpaceError, match=r"max_num_seqs: vLLM's default here is 512, outside"):
        with_vllm_defaults(space, HostFacts(), "online", {"tensor_parallel_size": 4})


def test_a_space_without_the_marker_is_left_alone() -> None:
    space = load_space("cpu-quick")
    assert with_vllm_defaults(space, HostFacts(), "offline", {}) == (space, None)


def test_the_marker_on_another_parameter_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "name: bad\nplatform: cuda\nparameters:\n"
        "  - {name: block_size, type: int, low: 16, high: 32, baseline: vllm_default}\n"
    )
    with pytest.raises(SpaceError, match="vllm_default is known for max_num_seqs and max_num"):
        load_space(path)
