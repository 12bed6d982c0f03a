"""Choices whose engine value follows from the rest of the config (`derived:` in a space file).

A categorical parameter may list, among its choices, names of this table (`choices: [null,
decode_batch, 64]` with `derived: [decode_batch]`). When the engine config is made
(`SearchSpace.to_engine`), such a choice becomes the value its function computes from the
config's other vLLM options, after every parameter and fixed option is in; None leaves the
option out (vLLM's default). The study searches the name; the engine and the exported YAML get
the number.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any


def decode_batch(options: Mapping[str, Any]) -> int | None:
    """The widest decode step in tokens: `max_num_seqs * (1 + K)`, K = num_speculative_tokens
    when a draft method is set (each sequence then verifies 1 + K tokens a step), at most
    max_num_batched_tokens (vLLM clamps its capture size there). As
    `max_cudagraph_capture_size`, every decode batch up to the largest runs on a captured
    graph, where vLLM's own default, min(2 * max_num_seqs * (1 + K), 512), leaves the widest
    ones of a large max_num_seqs eager and captures twice the sizes a small one needs. None
    without an explicit max_num_seqs (vLLM derives its default from the device)."""
    seqs = options.get("max_num_seqs")
    if not isinstance(seqs, int) or isinstance(seqs, bool):
        return None
    spec = options.get("speculative_config")
    drafts = 0
    if isinstance(spec, dict) and spec.get("method") is not None:
        drafts = int(spec.get("num_speculative_tokens") or 0)
    tokens = seqs * (1 + drafts)
    budget = options.get("max_num_batched_tokens")
    if isinstance(budget, int) and not isinstance(budget, bool):
        tokens = min(tokens, budget)
    return tokens


def _drafts(options: Mapping[str, Any]) -> tuple[int, int] | None:
    """(K, the widest batch) of a config that drafts K tokens, else None."""
    spec = options.get("speculative_config")
    if not isinstance(spec, dict) or spec.get("method") is None:
        return None
    k = spec.get("num_speculative_tokens")
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        return None
    seqs = options.get("max_num_seqs")
    widest = seqs if isinstance(seqs, int) and not isinstance(seqs, bool) else 1024
    return k, widest


def taper(options: Mapping[str, Any]) -> list[list[int]] | None:
    """K per batch size, tapered: K draft tokens up to 8 sequences in a step, K/2 (at least 1)
    up to 32, one beyond. As `speculative_config.num_speculative_tokens_per_batch_size` (vLLM
    0.32's dynamic speculative decoding: `[start, end, K]` ranges from batch 1): a draft pays
    where the GPU idles at a small batch, and costs verification compute at a large one."""
    found = _drafts(options)
    if found is None:
        return None
    k, widest = found
    return [[1, 8, k], [9, 32, max(1, k // 2)], [33, max(33, widest), 1]]


def small_batches(options: Mapping[str, Any]) -> list[list[int]] | None:
    """K per batch size: K draft tokens up to 16 sequences in a step, none beyond (the engine
    verifies nothing at a large batch)."""
    found = _drafts(options)
    if found is None:
        return None
    k, widest = found
    return [[1, 16, k], [17, max(17, widest), 0]]


DERIVED: dict[str, Callable[[Mapping[str, Any]], Any]] = {
    "decode_batch": decode_batch,
    "taper": taper,
    "small_batches": small_batches,
}


def resolve(options: dict[str, Any], path: tuple[str, ...], name: str) -> None:
    """Replace the derived choice `name` at `path` of `options` by its value (or drop it)."""
    value = DERIVED[name](options)
    holder = options
    for key in path[:-1]:
        inner = holder.get(key)
        if not isinstance(inner, dict):
            return
        holder = inner
    if value is None:
        holder.pop(path[-1], None)
    else:
        holder[path[-1]] = value
