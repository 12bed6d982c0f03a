"""Pre-launch memory estimate: skip, at no device cost, configs that cannot fit in memory.

The estimate mirrors the memory checks vLLM 0.32 makes at start-up (CPU: `CPUWorker.__init__`
and `CPUWorker.determine_available_memory` in `vllm/v1/worker/cpu_worker.py`; CUDA and Ascend:
`request_memory` in `vllm/v1/worker/utils.py` and `Worker.determine_available_memory` in
`vllm/v1/worker/gpu_worker.py`; for every platform `_check_enough_kv_cache_memory` in
`vllm/v1/core/kv_cache_utils.py`).

Rule: the estimate is conservative. A false rejection makes the tuner miss a good config, a
false acceptance only costs one launch whose failure the study then learns from. So every
uncertain term is taken at a lower bound, making `needed_bytes` a lower bound and `kv_bytes` an
upper bound of what vLLM will compute:

- weights are split evenly over the workers (replicated norms and embeddings are ignored);
- `auto` dtype counts floating weights at 16 bits (vLLM 0.32 serves every `auto` checkpoint in
  a 16-bit type; float32 configs are downcast, `config/model.py` `_resolve_auto_dtype`);
- activations count only what is surely live at the peak of the profiling pass (see
  `activation_lower_bound`); CUDA graphs only the buffers of the largest captured batch;
- runtime overheads (CUDA context, NCCL buffers, the Python process) count as nothing;
- a checkpoint whose weights cannot be read (hub name, `.bin` files) counts as no weights.

Known limits: options only (`VLLM_CPU_KVCACHE_SPACE` in the environment is not seen); KV bytes
per token come from `ModelInfo` (full attention on every layer, no sliding window or MLA).
`margin` adds headroom on top of this: a share of the device's total memory kept free.
"""

from __future__ import annotations

import functools
import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.space._setting import ModelInfo, Setting, dtype_bytes, engine_default
from autotune.vocab.platform import AnyPlatform, Platform

logger = logging.getLogger(__name__)

DEFAULT_MEMORY_UTILIZATION = float(engine_default("any", "gpu_memory_utilization"))
_FLOATING = frozenset({"F16", "BF16", "F32", "F64"})
_MAX_HEADER_BYTES = 100 * 2**20  # the safetensors format's own limit
_INDEX_FILE = "model.safetensors.index.json"
_AUTO_DTYPE_BYTES = 2
_HIDDEN_COPIES = 2  # residual stream + normed hidden states, both live in every layer
_LOGITS_BYTES = 4  # the sampler works on float32 logits
_DEFAULT_MAX_CAPTURE = 512  # vLLM's default largest CUDA graph, capped by 2 * max_num_seqs


@functools.lru_cache(maxsize=32)
def weights_bytes(model_path: Path, dtype: str | None = None) -> int | None:
    """Bytes of a local checkpoint's weights once loaded, read from its safetensors headers.

    Cached: a study asks for every proposal and every known OOM, and a checkpoint does not
    change while it is tuned.

    Floating tensors count at `dtype` (None or "auto": 16 bits, as vLLM casts them); integer and
    fp8 tensors of quantized checkpoints keep their stored size. None when the folder holds no
    readable safetensors file.
    """
    files = _weight_files(Path(model_path))
    if not files:
        return None
    target = _AUTO_DTYPE_BYTES if dtype in (None, "auto") else dtype_bytes(str(dtype))
    total = 0
    for file in files:
        header = _read_header(file)
        if header is None:
            return None
        for name, tensor in header.items():
            if name != "__metadata__":
                total += _tensor_bytes(tensor, target)
    return total


def _weight_files(folder: Path) -> list[Path]:
    """The safetensors files vLLM loads: those of the index when there is one."""
    files = sorted(folder.glob("*.safetensors"))
    index = folder / _INDEX_FILE
    if index.is_file():
        try:
            names = set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())
        except (OSError, ValueError, KeyError, AttributeError):
            names = set()
        if names:  # as vLLM's filter_duplicate_safetensors_files
            return [f for f in files if f.name in names]
    # Mistral repos ship a consolidated copy next to the HF shards; count the weights once.
    sharded = [f for f in files if not f.name.startswith("consolidated")]
    return sharded or files


def _read_header(file: Path) -> dict[str, Any] | None:
    try:
        with file.open("rb") as stream:
            length = int.from_bytes(stream.read(8), "little")
            if not 0 < length <= _MAX_HEADER_BYTES:
                raise ValueError(f"header length {length}")
            header = json.loads(stream.read(length))
    except (OSError, ValueError) as exc:
        logger.warning("%s: unreadable safetensors header (%s)", file, exc)
        return None
    return header if isinstance(header, dict) else None


def _tensor_bytes(tensor: dict[str, Any], target_bytes: int) -> int:
    if tensor.get("dtype") in _FLOATING:
        return math.prod(tensor.get("shape", [])) * target_bytes
    start, end = tensor["data_offsets"]  # exact even for packed sub-byte types
    return int(end) - int(start)


@dataclass(frozen=True)
class MemoryEstimate:
    """Memory one worker of a config needs, against what its device or NUMA node offers."""

    weights_bytes: int  # this worker's share of the weights (0 when unknown)
    kv_bytes: int  # KV cache the config reserves per worker (upper bound when automatic)
    activation_bytes: int  # lower bound of the activation peak (+ CUDA graphs on accelerators)
    needed_bytes: int  # what the config takes from the memory available now
    available_bytes: int  # free memory of the device / NUMA node now
    kv_tokens: int  # tokens the KV cache holds
    problem: str | None  # why it cannot fit; None when it may


def activation_lower_bound(tokens: int, seqs: int, model: ModelInfo, act_bytes: int) -> int:
    """Lower bound of the activation peak of a forward pass over `tokens` tokens.

    `tokens * hidden * 2 * act_bytes` (residual and hidden states, the two full-width tensors
    live throughout a layer; the MLP's wider intermediates are left out) plus `seqs * vocab * 4`
    (the float32 logits of the sampler's dummy run, which vLLM computes for at most
    max_num_seqs rows, not for every token).
    """
    hidden = tokens * model.hidden_size * _HIDDEN_COPIES * act_bytes
    logits = min(seqs, tokens) * (model.vocab_size or 0) * _LOGITS_BYTES
    return hidden + logits


def estimate_memory(
    options: dict[str, Any],
    model: ModelInfo | None,
    model_path: Path | None,
    platform: AnyPlatform,
    total_bytes: int,
    available_bytes: int,
    devices: int = 1,
    margin: float = 0.0,
) -> MemoryEstimate | None:
    """Estimate a config's memory per worker and whether it cannot fit.

    None without a model or without memory numbers (`total_bytes` <= 0).

    `total_bytes` / `available_bytes` are one device's numbers (on CPU those of the NUMA node,
    as vLLM's `get_memory_node_info` reads them). On CPU, `devices` NUMA nodes hold the
    workers and those sharing a node share its memory; on accelerators (any platform but
    "cpu") each worker has its own device. `margin`: a share of `total_bytes` kept free.
    """
    if model is None or total_bytes <= 0:
        return None
    s = Setting(options=options, model=model, devices=devices, platform=platform)
    tp, pp = int(s.get("tensor_parallel_size")), int(s.get("pipeline_parallel_size"))
    workers = max(1, tp * pp)
    weights, activation, act_bytes = _worker_usage(s, model, model_path)
    per_token = model.kv_bytes_per_token_per_worker(str(s.get("kv_cache_dtype")), tp, pp)
    util = float(options.get("gpu_memory_utilization") or DEFAULT_MEMORY_UTILIZATION)
    budget = _Budget(
        total=total_bytes,
        available=available_bytes,
        requested=math.ceil(total_bytes * util),
        util=util,
        headroom=int(max(0.0, margin) * total_bytes),
        explicit_kv=_int_or_none(options.get("kv_cache_memory_bytes")),
    )
    if platform == Platform.CPU:
        sharing = math.ceil(workers / max(1, devices))
        kv, needed, problem = _cpu(budget, weights, sharing)
    else:
        activation += _cudagraph_lower_bound(s, model, act_bytes)
        kv, needed, problem = _accelerator(budget, weights, activation)
    kv_tokens = max(0, kv) // per_token
    length = s.max_model_len
    if problem is None and length is not None and kv_tokens < length:
        problem = (
            f"KV cache capacity ({kv_tokens} tokens, {_gib(max(0, kv))} GiB per worker) is "
            f"below max_model_len ({length})"
        )
    return MemoryEstimate(
        weights_bytes=weights,
        kv_bytes=max(0, kv),
        activation_bytes=activation,
        needed_bytes=needed,
        available_bytes=available_bytes,
        kv_tokens=kv_tokens,
        problem=problem,
    )


def allocated_bytes(
    options: dict[str, Any], model: ModelInfo | None, model_path: Path | None, platform: AnyPlatform
) -> int | None:
    """What a config surely allocates per worker, to order two configs of one model by memory.

    Weights + KV cache + activations (lower bound), where the KV size is given
    (`kv_cache_memory_bytes`). None where vLLM sizes the KV cache itself: it fills a share of
    the device then, so what runs out (activations, graphs) is not ordered by any total.
    """
    explicit_kv = _int_or_none(options.get("kv_cache_memory_bytes"))
    if model is None or explicit_kv is None:
        return None
    s = Setting(options=options, model=model, devices=1, platform=platform)
    weights, activation, _ = _worker_usage(s, model, model_path)
    return weights + explicit_kv + activation


def _worker_usage(s: Setting, model: ModelInfo, model_path: Path | None) -> tuple[int, int, int]:
    """(weights per worker, activations' lower bound, activation dtype bytes) of a config."""
    workers = max(1, int(s.get("tensor_parallel_size")) * int(s.get("pipeline_parallel_size")))
    dtype = s.options.get("dtype")
    checkpoint = weights_bytes(model_path, dtype) if model_path is not None else None
    act_bytes = _AUTO_DTYPE_BYTES if dtype in (None, "auto") else dtype_bytes(str(dtype))
    activation = activation_lower_bound(
        s.max_num_batched_tokens, int(s.get("max_num_seqs")), model, act_bytes
    )
    # Each DP (and PCP) rank holds the dense weights of its TP x PP group; the experts of a
    # MoE model are sharded over TP x PCP x DP as well (vLLM's ParallelConfig).
    share = model.expert_share()
    spread = int(s.get("data_parallel_size")) * int(s.get("prefill_context_parallel_size"))
    per_worker = (checkpoint or 0) * ((1 - share) + share / max(1, spread)) / workers
    return int(per_worker), activation, act_bytes


@dataclass(frozen=True)
class _Budget:
    total: int
    available: int
    requested: int  # ceil(total * gpu_memory_utilization), as vLLM computes it
    util: float
    headroom: int
    explicit_kv: int | None


def _cpu(b: _Budget, weights: int, sharing: int) -> tuple[int, int, str | None]:
    """KV bytes, needed bytes and problem on CPU (`vllm/v1/worker/cpu_worker.py`)."""
    problem = None
    if b.explicit_kv is not None:
        # determine_available_memory: explicit KV > node memory available once every worker
        # on the node has loaded its weights -> ValueError.
        kv, needed = b.explicit_kv, sharing * weights + b.explicit_kv
        if needed + b.headroom > b.available:
            problem = (
                f"weights ({_gib(sharing * weights)} GiB) + kv_cache_memory_bytes "
                f"({_gib(kv)} GiB) exceed the memory available on the NUMA node "
                f"({_gib(b.available)} GiB)"
            )
        return kv, needed, problem
    # __init__: ceil(total * utilization) > available -> ValueError; then KV is what is left
    # of that request once the worker's resident memory (at least its weights) is counted.
    # Activations are not subtracted: the resident size need not keep their peak.
    kv = b.requested - weights - b.headroom
    if b.requested + b.headroom > b.available:
        problem = (
            f"gpu_memory_utilization {b.util} requests {_gib(b.requested)} GiB of the NUMA "
            f"node's {_gib(b.total)} GiB, more than the {_gib(b.available)} GiB available"
        )
    elif kv <= 0:
        problem = (
            f"no memory left for the KV cache: weights ({_gib(weights)} GiB) fill the "
            f"{_gib(b.requested)} GiB that gpu_memory_utilization {b.util} requests"
        )
    return kv, b.requested, problem


def _accelerator(b: _Budget, weights: int, activation: int) -> tuple[int, int, str | None]:
    """KV bytes, needed bytes and problem on CUDA / Ascend (`gpu_worker.py`, `utils.py`)."""
    problem = None
    if b.explicit_kv is not None:
        # The KV size is taken as given (no profiling); its allocation, or the warm-up pass at
        # max_num_batched_tokens after it, runs out of device memory.
        kv, needed = b.explicit_kv, max(b.requested, weights + b.explicit_kv + activation)
        if weights + kv + activation + b.headroom > b.available:
            problem = (
                f"weights ({_gib(weights)} GiB) + kv_cache_memory_bytes ({_gib(kv)} GiB) + "
                f"activations ({_gib(activation)} GiB) exceed the device's free memory "
                f"({_gib(b.available)} GiB)"
            )
    else:
        # determine_available_memory: KV = requested - non-KV memory - CUDA graph memory.
        kv, needed = b.requested - weights - activation - b.headroom, b.requested
        if kv <= 0:  # _check_enough_kv_cache_memory
            problem = (
                f"no available memory for the cache blocks: weights ({_gib(weights)} GiB) and "
                f"activations ({_gib(activation)} GiB) fill the {_gib(b.requested)} GiB that "
                f"gpu_memory_utilization {b.util} requests"
            )
    # request_memory (in init_device, before either): free memory at start-up below
    # ceil(total * utilization) -> ValueError, whether or not kv_cache_memory_bytes is set.
    if b.requested + b.headroom > b.available:
        problem = (
            f"gpu_memory_utilization {b.util} requests {_gib(b.requested)} GiB of the "
            f"device's {_gib(b.total)} GiB, more than the {_gib(b.available)} GiB free"
        )
    return kv, needed, problem


def _cudagraph_lower_bound(s: Setting, model: ModelInfo, act_bytes: int) -> int:
    """CUDA / ACL graph memory, counted by vLLM unless eager: the largest graph's layer buffers.

    `capture * hidden * 2 * act_bytes`, where capture is max_cudagraph_capture_size (default
    min(2 * max_num_seqs, 512), at most max_num_batched_tokens); real pools are larger.
    """
    compilation = s.options.get("compilation_config") or {}
    mode = compilation.get("cudagraph_mode") if isinstance(compilation, dict) else None
    if s.options.get("enforce_eager") or (mode is not None and str(mode).upper() == "NONE"):
        return 0
    capture = s.options.get("max_cudagraph_capture_size")
    if capture is None:
        capture = min(2 * int(s.get("max_num_seqs")), _DEFAULT_MAX_CAPTURE)
    capture = min(int(capture), s.max_num_batched_tokens)
    return capture * model.hidden_size * _HIDDEN_COPIES * act_bytes


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f}"
