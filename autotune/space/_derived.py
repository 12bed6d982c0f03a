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


DERIVED: dict[str, Callable[[Mapping[str, Any]], Any]] = {"decode_batch": decode_batch}


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
