"""Known hard constraints of vLLM, checked before a configuration is launched.

A violated rule means the engine would refuse to start (a pydantic error at start-up or an
error while the KV cache is allocated), or would silently run as another config does (an
option the engine overrides), so a trial can be recorded as infeasible without spending a
launch on it. Rules are a table of small functions; each sees options with vLLM's defaults
filled in and returns a message or None.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from autotune.space._knob_rules import KNOB_RULES
from autotune.space._layout_rules import LAYOUT_RULES
from autotune.space._setting import ModelInfo, Setting
from autotune.vocab.platform import AnyPlatform, Platform

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


def _cpu_block_size(s: Setting) -> str | None:
    block = s.options.get("block_size")
    if s.platform == Platform.CPU and block is not None and int(block) % 32:
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
    "tp_vs_heads": _tp_vs_heads,
    **LAYOUT_RULES,  # parallel sizes, devices, expert parallel, EPLB (_layout_rules.py)
    "cpu_block_size": _cpu_block_size,
    "kv_cache_fits_request": _kv_cache_fits_request,
    "memory_utilization": _memory_utilization,
    "eager_vs_graph_mode": _eager_vs_graph_mode,
    "capture_with_eager": _capture_with_eager,
    "long_prefill_vs_model_len": _long_prefill_vs_model_len,
    "long_prefill_without_chunking": _long_prefill_without_chunking,
    "async_with_ngram": _async_with_ngram,
    **KNOB_RULES,  # attention backends, graph modes, offloading, drafts (_knob_rules.py)
}


def check_constraints(
    options: dict[str, Any],
    model: ModelInfo | None,
    devices: int = 1,
    platform: AnyPlatform = "any",
) -> list[str]:
    """Human-readable violations of vLLM's hard constraints; empty when feasible.

    Absent options take vLLM's defaults for `platform`; rules that need the model are skipped
    when `model` is None (a hub name rather than a local folder).
    """
    setting = Setting(options=options, model=model, devices=devices, platform=platform)
    return [msg for rule in RULES.values() if (msg := rule(setting)) is not None]
