"""vLLM's own batch defaults, by device: the baseline `baseline: vllm_default` stands for.

vLLM derives `max_num_seqs` and `max_num_batched_tokens`, where they are not given, from the
device it runs on (`EngineArgs.get_batch_defaults`, vllm/engine/arg_utils.py, 0.32):

| device                               | API server     | offline (`LLM`) |
|--------------------------------------|----------------|-----------------|
| >= 160 GiB (B200, B300)              | 1024 / 16384   | 1024 / 16384    |
| >= 70 GiB and not an A100 (H100/H200)| 1024 / 8192    | 1024 / 16384    |
| any other (A100, L40S, A10G, or the  | 256 / 2048     | 256 / 8192      |
| device could not be read)            |                |                 |
| CPU, world size ws = TP x PP         | 128ws / 2048ws | 256ws / 4096ws  |

(max_num_seqs / max_num_batched_tokens), both doubled under `performance_mode: throughput`
(`_set_default_max_num_seqs_and_batched_tokens_args`). vllm-ascend takes vLLM's engine
arguments, so an NPU follows the same table by its HBM (a 910B chip's 64 GB is "any other").

A space asks for them with `baseline: vllm_default` on `max_num_seqs` or
`max_num_batched_tokens`: at load the value is the table's for the platform with no device
read (GPU 256 / 2048; CPU ws 1); `with_vllm_defaults` then computes it for the device this
host has, the scenario and the baseline's world size, as the installed vLLM would, so trial 0,
relative SLOs, `confirm` and every "gain over your defaults" compare with what `vllm serve`
runs there. The baseline trial sets the computed value explicitly (the same config).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune.vocab.platform import Platform

VLLM_DEFAULT = "vllm_default"
OPTIONS = ("max_num_seqs", "max_num_batched_tokens")
GIB = 1 << 30


@dataclass(frozen=True)
class DefaultsDevice:
    """The device vLLM reads its defaults from: its name and memory (None: not read)."""

    name: str | None = None
    memory_bytes: int | None = None


def batch_defaults(
    platform: str, device: DefaultsDevice, world_size: int = 1, scenario: str = "online"
) -> dict[str, int]:
    """`{max_num_seqs, max_num_batched_tokens}` as vLLM 0.32 picks them (see the table)."""
    server = scenario != "offline"
    if platform == Platform.CPU:
        seqs, tokens = (128, 2048) if server else (256, 4096)
        return {"max_num_seqs": seqs * world_size, "max_num_batched_tokens": tokens * world_size}
    memory = device.memory_bytes or 0
    name = (device.name or "").lower()
    if memory >= 160 * GIB:
        seqs, tokens = 1024, 16384
    elif memory >= 70 * GIB and "a100" not in name:
        seqs, tokens = 1024, (8192 if server else 16384)
    else:
        seqs, tokens = 256, (2048 if server else 8192)
    return {"max_num_seqs": seqs, "max_num_batched_tokens": tokens}


def mark_defaults(data: Any) -> Any:
    """A space's raw data with each `baseline: vllm_default` given its value for the platform
    with no device read, and the parameter marked (`vllm_default: true`) for
    `with_vllm_defaults`. Anything else is left to the space's own validation."""
    if not isinstance(data, dict) or not isinstance(data.get("parameters"), list):
        return data
    platform = data.get("platform", "any")
    fallback = batch_defaults(str(platform), DefaultsDevice())
    parameters = []
    for param in data["parameters"]:
        if isinstance(param, dict) and param.get("baseline") == VLLM_DEFAULT:
            option = str(param.get("option") or param.get("name") or "").replace("-", "_")
            if option not in OPTIONS or param.get("scale") is not None:
                raise ValueError(
                    f"parameters.{param.get('name')}.baseline: vllm_default is known for "
                    f"{' and '.join(OPTIONS)} (unscaled) only"
                )
            param = {**param, "baseline": fallback[option], "vllm_default": True}
        parameters.append(param)
    return {**data, "parameters": parameters}


def world_size(options: dict[str, Any]) -> int:
    """TP x PP of a config's engine options."""
    tp = options.get("tensor_parallel_size") or 1
    pp = options.get("pipeline_parallel_size") or 1
    return int(tp) * int(pp)


def describe(device: DefaultsDevice) -> str:
    if device.name is None and device.memory_bytes is None:
        return "a device that could not be read (vLLM's fallback)"
    memory = f", {device.memory_bytes / GIB:.0f} GiB" if device.memory_bytes else ""
    return f"{device.name or 'an unnamed device'}{memory}"
