"""The model check: a local folder vLLM can load, whose weights fit the device's free memory."""

from __future__ import annotations

import math
import shlex
from pathlib import Path

from autotune.devices import Inventory
from autotune.doctor._records import GIB, Check, HostInputs, free_bytes, size_text
from autotune.space import ModelInfo, SpaceError, weights_bytes
from autotune.vocab.platform import Platform

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")


def model_check(model: str, inventory: Inventory | None, host: HostInputs) -> Check:
    """config.json parses, a tokenizer is there, and the weights (as loaded: 16-bit floats)
    fit in the first device's free memory; a hub name is not checked."""
    path = Path(model).expanduser()
    if not (model.startswith((".", "/", "~")) or path.exists()):
        why = f"{model}: not a local folder, vLLM fetches it from the hub (not checked)"
        return Check("model", "warn", why, "pass a local folder where no hub is reachable")
    try:
        info = ModelInfo.from_path(path) if path.is_dir() else None
    except SpaceError as err:
        return Check("model", "fail", str(err), "repair config.json or fetch the model again")
    if info is None:
        fix = (
            f"pass the folder that holds config.json (the demo's: autotune make-tiny-model "
            f"{shlex.quote(model)})"
        )
        return Check("model", "fail", f"{model}: no config.json", fix)
    tokenizer = [name for name in TOKENIZER_FILES if (path / name).is_file()]
    if not tokenizer:
        why = f"{model}: no tokenizer ({', '.join(TOKENIZER_FILES)})"
        return Check("model", "fail", why, "copy the tokenizer files from the model's source")
    found = f"{model}: config.json ({info.num_hidden_layers} layers), {tokenizer[0]}"
    weights = weights_bytes(path)
    if weights is None:
        fix = "convert the weights to safetensors to have their size checked"
        return Check("model", "warn", f"{found}, no readable safetensors", fix)
    free, where = _room(inventory, host)
    if free is None:
        return Check("model", "ok", f"{found}, weights {size_text(weights)}")
    fits = f"{found}, weights {size_text(weights)} of {size_text(free)} free on {where}"
    if weights <= free:
        return Check("model", "ok", fits)
    accelerator = inventory is not None and inventory.platform != Platform.CPU
    split = (
        f"tensor_parallel_size >= {math.ceil(weights / max(free, 1))} or " if accelerator else ""
    )
    return Check("model", "warn", f"{fits}: they do not fit", f"use {split}a smaller checkpoint")


def _room(inventory: Inventory | None, host: HostInputs) -> tuple[int | None, str]:
    """Free memory of the first device; on CPU, of NUMA node 0 less VLLM_CPU_KVCACHE_SPACE."""
    if inventory is None or not inventory.devices:
        return None, ""
    device = inventory.devices[0]
    free = free_bytes(inventory, device.id)
    prefixes = {Platform.CPU: "node ", Platform.CUDA: "cuda:", Platform.ASCEND: "npu:"}
    prefix = prefixes[inventory.platform]
    where = f"{prefix}{device.id}"
    space = host.cpu_kvcache_space_gib
    if free is not None and inventory.platform == Platform.CPU and space:
        free, where = max(0, free - int(space * GIB)), f"{where} less VLLM_CPU_KVCACHE_SPACE"
    return free, where
