"""What the constraint rules and the memory estimate see: a model's few numbers (`ModelInfo`,
from its `config.json`) and a config's options with vLLM 0.32's defaults filled in (`Setting`)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from autotune.space._errors import SpaceError
from autotune.vocab.platform import AnyPlatform, Platform

_DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "float64": 8}

# vLLM 0.32 defaults that differ by platform (FACTS.md); "any" takes the GPU ones.
_PLATFORM_DEFAULTS: dict[str, dict[str, Any]] = {
    Platform.CPU: {"max_num_seqs": 128, "max_num_batched_tokens": 2048, "block_size": 128},
    Platform.CUDA: {"max_num_seqs": 256, "max_num_batched_tokens": 8192, "block_size": 16},
    Platform.ASCEND: {"max_num_seqs": 256, "max_num_batched_tokens": 8192, "block_size": 128},
}
_COMMON_DEFAULTS: dict[str, Any] = {
    # CacheConfig.gpu_memory_utilization in vLLM 0.32 (`vllm/config/cache.py`), on every
    # platform.
    "gpu_memory_utilization": 0.92,
    "enable_chunked_prefill": True,
    "tensor_parallel_size": 1,
    "pipeline_parallel_size": 1,
    "data_parallel_size": 1,
    "prefill_context_parallel_size": 1,
    "decode_context_parallel_size": 1,
    "enable_expert_parallel": False,
    "enable_eplb": False,
    "kv_cache_dtype": "auto",
}


def engine_default(platform: AnyPlatform, name: str) -> Any:
    """vLLM 0.32's value of option `name` where it is not given on `platform` (None: not one
    this table knows)."""
    table = _PLATFORM_DEFAULTS.get(platform, _PLATFORM_DEFAULTS[Platform.CUDA])
    return table.get(name, _COMMON_DEFAULTS.get(name))


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of a model or KV-cache dtype (`fp8*` and `int8` are one byte)."""
    name = dtype.removeprefix("torch.").lower()
    if name.startswith("fp8") or name in ("int8", "uint8"):
        return 1
    if name not in _DTYPE_BYTES:
        raise ValueError(f"unknown dtype '{dtype}'")
    return _DTYPE_BYTES[name]


# Where a config.json says how many routed experts (transformers' names by model family) or
# multi-token-prediction layers it has.
_EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
_MTP_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_layers")


def _first(data: dict[str, Any], keys: tuple[str, ...]) -> Any:
    return next((data[k] for k in keys if isinstance(data.get(k), int) and data[k] > 0), None)


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
    num_experts: int | None = Field(
        default=None,
        ge=1,
        description="Routed experts of a mixture-of-experts model (`num_experts`, Mixtral's "
        "`num_local_experts`, DeepSeek's `n_routed_experts`); None: a dense model",
    )
    moe_intermediate_size: int | None = Field(default=None, description="One expert's MLP width")
    kv_lora_rank: int | None = Field(
        default=None, description="Multi-head latent attention's KV rank (DeepSeek): an MLA model"
    )
    mtp_layers: int = Field(
        default=0,
        ge=0,
        description="Multi-token-prediction layers the checkpoint carries "
        "(`num_nextn_predict_layers`, `mtp_num_hidden_layers`): what `method: mtp` drafts with",
    )

    @property
    def is_moe(self) -> bool:
        return self.num_experts is not None and self.num_experts > 1

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    def expert_share(self) -> float:
        """About what share of the weights the routed experts hold (0 for a dense model):
        their gate, up and down projections over the attention, the embeddings and them."""
        if not self.is_moe or not self.moe_intermediate_size:
            return 0.0
        assert self.num_experts is not None
        hidden, layers = self.hidden_size, self.num_hidden_layers
        experts = self.num_experts * 3 * hidden * self.moe_intermediate_size * layers
        heads = (2 * self.num_attention_heads + 2 * self.num_key_value_heads) * self.head_dim
        dense = layers * hidden * heads + 2 * (self.vocab_size or 0) * hidden
        return experts / (experts + dense)

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
        data["num_experts"] = _first(data, _EXPERT_KEYS)
        if data["num_experts"] and not data.get("moe_intermediate_size"):
            data["moe_intermediate_size"] = data.get("intermediate_size")  # Mixtral's experts
        if "mtp_layers" not in data:
            data["mtp_layers"] = _first(data, _MTP_KEYS) or 0
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
    platform: AnyPlatform

    def nested(self, option: str, key: str) -> Any:
        """Key `key` of the dict option `option` (`speculative_config.method`), None if unset."""
        value = self.options.get(option)
        return value.get(key) if isinstance(value, dict) else None

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
