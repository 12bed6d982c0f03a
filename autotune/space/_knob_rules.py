"""Constraint rules of 2026's engine knobs: the attention backend and the block sizes MLA needs,
CUDA-graph modes against the compilation level, KV offloading, and speculative decoding's
methods (EAGLE-3, MTP, a draft model, n-gram) and their per-batch-size token counts.

Each mirrors vLLM 0.32 (file named beside it), and `tests/space/test_knob_rules.py` checks it
against vLLM's own code: its `SpeculativeConfig`, its `CUDAGraphMode`, the block sizes its
attention backends declare (read from their source: they import CUDA kernels).
"""

from __future__ import annotations

from typing import Any

from autotune.space._setting import Setting

# Each MLA backend's kernel block sizes (`get_supported_kernel_block_sizes`, vLLM 0.32
# `v1/attention/backends/mla/*.py`): a cache block must be a multiple of one of them
# (`AttentionBackend.supports_block_size`). vLLM's default CUDA block of 16 fits none but the
# last two, which is why MLA deployments run 64 or 128.
MLA_KERNEL_BLOCKS: dict[str, tuple[int, ...]] = {
    "FLASHMLA": (64,),
    "CUTLASS_MLA": (128,),
    "FLASHINFER_MLA": (32, 64),
    "FLASH_ATTN_MLA": (16,),
    "TRITON_MLA": (16,),
}
# Speculative methods that draft with a model of their own (`speculative_config.model`):
# without one vLLM raises "num_speculative_tokens was provided but without speculative model."
METHODS_WITH_A_DRAFT = ("eagle", "eagle3", "draft_model", "medusa", "mlp_speculator")
# CUDA-graph modes with a piecewise part, which needs vLLM's own compilation (mode 3); under any
# other mode VllmConfig drops that part ("Cudagraph mode %s is not compatible with compilation
# mode %s. Overriding to %s.", `CUDAGraphMode.without_piecewise`).
PIECEWISE_MODES = {"PIECEWISE": "NONE", "FULL_AND_PIECEWISE": "FULL_DECODE_ONLY"}


def _backend(s: Setting) -> str | None:
    value = s.options.get("attention_backend")
    return str(value).upper() if value is not None else None


def attention_backend_vs_model(s: Setting) -> str | None:
    backend = _backend(s)
    if backend is None or s.model is None:
        return None
    mla = "MLA" in backend
    if mla and not s.model.is_mla:
        return f"attention_backend {backend} is for MLA models (DeepSeek); this model is not one"
    if not mla and s.model.is_mla:
        return f"attention_backend {backend} cannot run this MLA model: choose an *_MLA backend"
    return None


def mla_block_size(s: Setting) -> str | None:
    backend = _backend(s)
    block = s.options.get("block_size")
    kernels = MLA_KERNEL_BLOCKS.get(backend or "")
    if kernels is None or block is None or any(int(block) % k == 0 for k in kernels):
        return None
    shown = " or ".join(str(k) for k in kernels)
    return f"attention_backend {backend} needs block_size a multiple of {shown} (got {block})"


def _compilation_mode(s: Setting) -> int | None:
    mode = s.nested("compilation_config", "mode")
    if mode is not None:
        return int(mode)
    level = s.options.get("optimization_level")
    return 0 if level is not None and int(level) == 0 else None  # -O0: no compilation


def piecewise_needs_compilation(s: Setting) -> str | None:
    # VllmConfig._normalize_piecewise_cudagraph_mode (vLLM 0.32); -O0 compiles nothing.
    mode = s.nested("compilation_config", "cudagraph_mode")
    compiled = _compilation_mode(s)
    if mode not in PIECEWISE_MODES or compiled is None or compiled == 3:
        return None
    return (
        f"Cudagraph mode {mode} is not compatible with compilation mode {compiled}: vLLM "
        f"overrides it to {PIECEWISE_MODES[mode]}, the engine of that mode"
    )


def offloading_without_size(s: Setting) -> str | None:
    # CacheConfig: "KV offloading is only activated when kv_offloading_size is set."
    backend = s.options.get("kv_offloading_backend")
    if backend is not None and s.options.get("kv_offloading_size") is None:
        return (
            f"kv_offloading_backend ({backend}) is only used when kv_offloading_size is set: "
            "the same engine as without it"
        )
    return None


def _speculative(s: Setting, key: str) -> Any:
    return s.nested("speculative_config", key)


def draft_needs_a_model(s: Setting) -> str | None:
    method = _speculative(s, "method")
    if method in METHODS_WITH_A_DRAFT and _speculative(s, "model") is None:
        return (
            f"speculative method {method}: num_speculative_tokens was provided but without "
            "speculative model (set speculative_config.model)"
        )
    return None


def mtp_needs_mtp_layers(s: Setting) -> str | None:
    # `method: mtp` drafts with the checkpoint's own multi-token-prediction layers.
    if _speculative(s, "method") != "mtp" or s.model is None or s.model.mtp_layers:
        return None
    return (
        "speculative method mtp drafts with the model's multi-token-prediction layers "
        "(num_nextn_predict_layers); this checkpoint has none"
    )


def schedule_needs_a_method(s: Setting) -> str | None:
    schedule = _speculative(s, "num_speculative_tokens_per_batch_size")
    if schedule is None:
        return None
    if _speculative(s, "method") is None:
        return "num_speculative_tokens_per_batch_size needs a speculative method"
    if int(s.get("data_parallel_size")) > 1:
        # VllmConfig._maybe_disable_dynamic_sd_for_data_parallel (vLLM 0.32).
        return (
            "Dynamic speculative decoding is not supported with data parallelism: vLLM falls "
            "back to the static num_speculative_tokens, the engine without the schedule"
        )
    return None


KNOB_RULES: dict[str, Any] = {
    "attention_backend_vs_model": attention_backend_vs_model,
    "mla_block_size": mla_block_size,
    "piecewise_needs_compilation": piecewise_needs_compilation,
    "offloading_without_size": offloading_without_size,
    "draft_needs_a_model": draft_needs_a_model,
    "mtp_needs_mtp_layers": mtp_needs_mtp_layers,
    "schedule_needs_a_method": schedule_needs_a_method,
}
