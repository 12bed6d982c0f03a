"""Known hard constraints of vLLM, checked before a configuration is launched.

A violated rule means the engine would refuse to start (a pydantic error at start-up or an
error while the KV cache is allocated), or would silently run as another config does (an
option the engine overrides), so a trial can be recorded as infeasible without spending a
launch on it. Rules are a table of small functions; each sees options with vLLM's defaults
filled in and returns a message or None.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from autotune.space._errors import SpaceError

_DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "float64": 8}

# vLLM 0.32 defaults that differ by platform (FACTS.md); "any" takes the GPU ones.
_PLATFORM_DEFAULTS: dict[str, dict[str, Any]] = {
    "cpu": {"max_num_seqs": 128, "max_num_batched_tokens": 2048, "block_size": 128},
    "cuda": {"max_num_seqs": 256, "max_num_batched_tokens": 8192, "block_size": 16},
    "ascend": {"max_num_seqs": 256, "max_num_batched_tokens": 8192, "block_size": 128},
}
_COMMON_DEFAULTS: dict[str, Any] = {
    # CacheConfig.gpu_memory_utilization in vLLM 0.32 (`vllm/config/cache.py`), on every
    # platform.
    "gpu_memory_utilization": 0.92,
    "enable_chunked_prefill": True,
    "tensor_parallel_size": 1,
    "pipeline_parallel_size": 1,
    "kv_cache_dtype": "auto",
}


def engine_default(platform: str, name: str) -> Any:
    """vLLM 0.32's value of option `name` where it is not given on `platform` (None: not one
    this table knows)."""
    table = _PLATFORM_DEFAULTS.get(platform, _PLATFORM_DEFAULTS["cuda"])
    return table.get(name, _COMMON_DEFAULTS.get(name))


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of a model or KV-cache dtype (`fp8*` and `int8` are one byte)."""
    name = dtype.removeprefix("torch.").lower()
    if name.startswith("fp8") or name in ("int8", "uint8"):
        return 1
    if name not in _DTYPE_BYTES:
        raise ValueError(f"unknown dtype '{dtype}'")
    return _DTYPE_BYTES[name]


class ModelInfo(BaseModel):
    """The few numbers of a model's `config.json` that the constraints need."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    num_attention_heads: int = Field(ge=1, description="Attention (query) heads")
    num_key_value_heads: int = Field(ge=1, description="KV heads (= heads without GQA)")
    hidden_size: int = Field(ge=1, description="Hidden size")
    num_hidden_layers: int = Field(ge=1, description="Decoder layers")
    head_dim: int = Field(ge=1, description="Size of one head (default hidden / heads)")
    max_position_embeddings: int | None = Field(default=None, description="Longest context")
    dtype: str = Field(default="bfloat16", description="Weights dtype (`dtype`/`torch_dtype`)")
    vocab_size: int | None = Field(default=None, description="Vocabulary size")

    @model_validator(mode="before")
    @classmethod
    def _fill_defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        dtype = data.get("dtype") or data.get("torch_dtype")
        if "num_attention_heads" not in data and isinstance(data.get("text_config"), dict):
            data = data["text_config"]  # multimodal configs nest the language model's numbers
        data = dict(data)
        data["dtype"] = dtype or data.get("dtype") or data.get("torch_dtype") or "bfloat16"
        heads = data.get("num_attention_heads")
        if data.get("num_key_value_heads") is None:
            data["num_key_value_heads"] = heads
        if data.get("head_dim") is None and isinstance(heads, int) and heads > 0:
            data["head_dim"] = data.get("hidden_size", 0) // heads
        return data

    @classmethod
    def from_path(cls, path: str | Path) -> ModelInfo | None:
        """Read a local model folder's `config.json`; None for a hub name or a folder without it."""
        file = Path(path) / "config.json"
        if not file.is_file():
            return None
        try:
            return cls.model_validate(json.loads(file.read_text(encoding="utf-8")))
        except (OSError, ValueError, ValidationError) as exc:
            first_line = str(exc).splitlines()[0]
            raise SpaceError(f"{file}: not a usable model config: {first_line}") from exc

    def kv_bytes_per_token(self, kv_cache_dtype: str = "auto") -> int:
        """KV-cache bytes one token takes over all layers (keys and values)."""
        return self.kv_bytes_per_token_per_worker(kv_cache_dtype)

    def kv_bytes_per_token_per_worker(
        self,
        kv_cache_dtype: str = "auto",
        tensor_parallel_size: int = 1,
        pipeline_parallel_size: int = 1,
    ) -> int:
        """KV bytes per token on one worker: TP splits KV heads (at least one each), PP layers."""
        dtype = self.dtype if kv_cache_dtype == "auto" else kv_cache_dtype
        kv_heads = max(1, self.num_key_value_heads // max(1, tensor_parallel_size))
        layers = math.ceil(self.num_hidden_layers / max(1, pipeline_parallel_size))
        return 2 * layers * kv_heads * self.head_dim * dtype_bytes(dtype)


@dataclass(frozen=True)
class Setting:
    """Options with vLLM's defaults, as the rules and the memory estimate (`_memory.py`) see
    them. Shared within this package only; not exported."""

    options: dict[str, Any]
    model: ModelInfo | None
    devices: int
    platform: str

    def get(self, name: str) -> Any:
        if self.options.get(name) is not None:
            return self.options[name]
        return engine_default(self.platform, name)

    @property
    def max_model_len(self) -> int | None:
        explicit = self.options.get("max_model_len")
        if explicit is not None:
            return int(explicit)
        return self.model.max_position_embeddings if self.model else None

    @property
    def max_num_batched_tokens(self) -> int:
        explicit = self.options.get("max_num_batched_tokens")
        if explicit is not None:
            return int(explicit)
        default = int(self.get("max_num_batched_tokens"))
        # Without chunked prefill vLLM raises its default to fit one whole prompt.
        if not self.get("enable_chunked_prefill") and self.max_model_len is not None:
            return max(default, self.max_model_len)
        return default


Rule = Callable[[Setting], str | None]


def _batched_vs_seqs(s: Setting) -> str | None:
    tokens, seqs = s.max_num_batched_tokens, int(s.get("max_num_seqs"))
    if tokens < seqs:
        return f"max_num_batched_tokens ({tokens}) must be >= max_num_seqs ({seqs})"
    return None


def _batched_vs_model_len(s: Setting) -> str | None:
    length = s.max_model_len
    if s.get("enable_chunked_prefill") or length is None:
        return None
    if s.max_num_batched_tokens < length:
        return (
            f"without chunked prefill, max_num_batched_tokens ({s.max_num_batched_tokens}) "
            f"must be >= max_model_len ({length})"
        )
    return None


def _model_len_vs_positions(s: Setting) -> str | None:
    length = s.options.get("max_model_len")
    limit = s.model.max_position_embeddings if s.model else None
    if length is not None and limit is not None and int(length) > limit:
        return f"max_model_len ({length}) must be <= the model's max_position_embeddings ({limit})"
    return None


def _parallel_sizes_positive(s: Setting) -> str | None:
    tp, pp = int(s.get("tensor_parallel_size")), int(s.get("pipeline_parallel_size"))
    if tp < 1 or pp < 1:
        return f"tensor_parallel_size ({tp}) and pipeline_parallel_size ({pp}) must be >= 1"
    return None


def _tp_vs_heads(s: Setting) -> str | None:
    tp = int(s.get("tensor_parallel_size"))
    if s.model is None or tp < 1:  # tp < 1: `parallel_sizes_positive` says so
        return None
    heads, kv = s.model.num_attention_heads, s.model.num_key_value_heads
    if heads % tp:
        return f"tensor_parallel_size ({tp}) must divide num_attention_heads ({heads})"
    if kv % tp and tp % kv:
        return f"tensor_parallel_size ({tp}) must divide or be a multiple of KV heads ({kv})"
    return None


def _parallel_vs_devices(s: Setting) -> str | None:
    tp, pp = int(s.get("tensor_parallel_size")), int(s.get("pipeline_parallel_size"))
    if tp * pp > s.devices:
        return (
            f"tensor_parallel_size * pipeline_parallel_size ({tp} * {pp}) must be <= the "
            f"devices given ({s.devices})"
        )
    return None


def _cpu_block_size(s: Setting) -> str | None:
    block = s.options.get("block_size")
    if s.platform == "cpu" and block is not None and int(block) % 32:
        return f"block_size ({block}) must be a multiple of 32 on CPU"
    return None


def _kv_cache_fits_request(s: Setting) -> str | None:
    kv_bytes, length = s.options.get("kv_cache_memory_bytes"), s.max_model_len
    if kv_bytes is None or length is None or s.model is None:
        return None
    per_token = s.model.kv_bytes_per_token_per_worker(
        str(s.get("kv_cache_dtype")),
        int(s.get("tensor_parallel_size")),
        int(s.get("pipeline_parallel_size")),
    )
    block = int(s.get("block_size"))
    needed = math.ceil(length / block) * block * per_token
    if int(kv_bytes) < needed:
        return (
            f"kv_cache_memory_bytes ({kv_bytes}) cannot hold one request of max_model_len "
            f"({length}) tokens: {needed} bytes needed per worker"
        )
    return None


def _memory_utilization(s: Setting) -> str | None:
    share = s.options.get("gpu_memory_utilization")
    if share is not None and not 0 < float(share) <= 1:
        return f"gpu_memory_utilization ({share}) must be in (0, 1]"
    return None


def _eager_vs_graph_mode(s: Setting) -> str | None:
    # VllmConfig sets cudagraph_mode to NONE under enforce_eager: every graph mode then runs
    # the engine of `enforce_eager` alone, which the study measures once, without a mode.
    compilation = s.options.get("compilation_config")
    mode = compilation.get("cudagraph_mode") if isinstance(compilation, dict) else None
    if s.options.get("enforce_eager") and mode is not None:
        return (
            f"enforce_eager overrides compilation_config.cudagraph_mode ({mode}) with NONE: "
            "the same engine as enforce_eager without a graph mode"
        )
    return None


def _capture_with_eager(s: Setting) -> str | None:
    # Under enforce_eager vLLM captures no graph (cudagraph_mode NONE): a capture size changes
    # nothing, and every size is the engine of `enforce_eager` alone.
    size = s.options.get("max_cudagraph_capture_size")
    if s.options.get("enforce_eager") and size is not None:
        return (
            f"enforce_eager captures no CUDA graph: max_cudagraph_capture_size ({size}) is the "
            "same engine as enforce_eager without it"
        )
    return None


def _long_prefill_vs_model_len(s: Setting) -> str | None:
    # SchedulerConfig (vLLM 0.32) raises at start-up for a threshold above max_model_len.
    threshold = int(s.options.get("long_prefill_token_threshold") or 0)
    length = s.max_model_len
    if length is not None and threshold > length:
        return (
            f"long_prefill_token_threshold ({threshold}) cannot be greater than the "
            f"max_model_len ({length})"
        )
    return None


def _long_prefill_without_chunking(s: Setting) -> str | None:
    # The cap splits long prompts into chunks: without chunked prefill it does nothing, and
    # the engine is the one with no cap, which the study measures once.
    threshold = int(s.options.get("long_prefill_token_threshold") or 0)
    if threshold and not s.get("enable_chunked_prefill"):
        return (
            f"long_prefill_token_threshold ({threshold}) has no effect without chunked "
            "prefill: the same engine as no threshold"
        )
    return None


def _async_with_ngram(s: Setting) -> str | None:
    # VllmConfig turns async scheduling off for n-gram drafts ("Async scheduling not supported
    # with ngram-based speculative decoding and will be disabled"): `false` is vLLM's choice.
    spec = s.options.get("speculative_config")
    method = spec.get("method") if isinstance(spec, dict) else None
    if method == "ngram" and s.options.get("async_scheduling") is False:
        return (
            "vLLM turns async scheduling off with n-gram drafts by itself: the same engine "
            "as async_scheduling unset"
        )
    return None


# Each rule mirrors a check the engine makes at start-up (docs/search-space.md says why).
RULES: dict[str, Rule] = {
    "batched_tokens_vs_seqs": _batched_vs_seqs,
    "batched_tokens_vs_model_len": _batched_vs_model_len,
    "model_len_vs_positions": _model_len_vs_positions,
    "parallel_sizes_positive": _parallel_sizes_positive,
    "tp_vs_heads": _tp_vs_heads,
    "parallel_vs_devices": _parallel_vs_devices,
    "cpu_block_size": _cpu_block_size,
    "kv_cache_fits_request": _kv_cache_fits_request,
    "memory_utilization": _memory_utilization,
    "eager_vs_graph_mode": _eager_vs_graph_mode,
    "capture_with_eager": _capture_with_eager,
    "long_prefill_vs_model_len": _long_prefill_vs_model_len,
    "long_prefill_without_chunking": _long_prefill_without_chunking,
    "async_with_ngram": _async_with_ngram,
}


def check_constraints(
    options: dict[str, Any], model: ModelInfo | None, devices: int = 1, platform: str = "any"
) -> list[str]:
    """Human-readable violations of vLLM's hard constraints; empty when feasible.

    Absent options take vLLM's defaults for `platform`; rules that need the model are skipped
    when `model` is None (a hub name rather than a local folder).
    """
    setting = Setting(options=options, model=model, devices=devices, platform=platform)
    return [msg for rule in RULES.values() if (msg := rule(setting)) is not None]
