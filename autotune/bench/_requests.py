"""Turning a workload into the concrete requests of a benchmark run, reproducibly."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from autotune.bench._dataset import read_dataset
from autotune.bench._trace import TraceRow, read_trace
from autotune.bench._workload import (
    AnyWorkload,
    JsonlWorkload,
    RandomWorkload,
    RequestSpec,
    SharedPrefixWorkload,
    TraceWorkload,
    WorkloadError,
)

# Random prompts use ids in [_FIRST_ID, vocab_size) except the special ids of config.json.
_FIRST_ID = 0
_SPECIAL_KEYS = ("bos_token_id", "eos_token_id", "pad_token_id")


def build_requests(
    workload: AnyWorkload, model_path: str
) -> tuple[list[RequestSpec], list[RequestSpec]]:
    """(warm-up requests, measured requests) of a workload; the same seed gives the same lists.

    A random or shared-prefix workload reads the vocabulary from `model_path`/config.json, so it
    needs a local model folder; a JSONL workload ignores `model_path`.
    """
    if isinstance(workload, RandomWorkload):
        return _random_requests(workload, model_path)
    if isinstance(workload, SharedPrefixWorkload):
        return _shared_prefix_requests(workload, model_path)
    if isinstance(workload, TraceWorkload):
        return _trace_requests(workload, model_path)
    return _jsonl_requests(workload)


def _random_requests(
    workload: RandomWorkload, model_path: str
) -> tuple[list[RequestSpec], list[RequestSpec]]:
    pool = token_pool(model_path)
    tokenizer = _tokenizer(model_path) if workload.prompt_format == "text" else None
    rng = random.Random(workload.seed)
    specs = []
    for _ in range(workload.warmup + workload.prompts):
        n_in = _spread_length(rng, workload.input, workload.input_spread)
        n_out = _spread_length(rng, workload.output, workload.output_spread)
        ids = rng.choices(pool, k=n_in)
        prompt: str | list[int] = ids if tokenizer is None else _text_of(tokenizer, ids, pool, rng)
        specs.append(RequestSpec(prompt=prompt, max_tokens=n_out))
    return specs[: workload.warmup], specs[workload.warmup :]


def _shared_prefix_requests(
    workload: SharedPrefixWorkload, model_path: str
) -> tuple[list[RequestSpec], list[RequestSpec]]:
    """Group g's requests are prefix[g] + their own tokens; the last prefix is the warm-up's.
    As text, a prefix is the same string in every request of its group, followed by a newline
    and the request's own text, so the server tokenizes the prefix the same way each time."""
    pool = token_pool(model_path)
    tokenizer = _tokenizer(model_path) if workload.prompt_format == "text" else None
    rng = random.Random(workload.seed)
    prefix_ids = [rng.choices(pool, k=workload.prefix) for _ in range(workload.groups + 1)]
    prefix_texts = [_text_of(tokenizer, ids, pool, rng) for ids in prefix_ids] if tokenizer else []
    order = [i % workload.groups for i in range(workload.prompts)]
    rng.shuffle(order)

    def request(group: int) -> RequestSpec:
        ids = rng.choices(pool, k=workload.input)
        if tokenizer is None:
            return RequestSpec(prompt=prefix_ids[group] + ids, max_tokens=workload.output)
        text = prefix_texts[group] + "\n" + _text_of(tokenizer, ids, pool, rng)
        return RequestSpec(prompt=text, max_tokens=workload.output)

    warmup = [request(workload.groups) for _ in range(workload.warmup)]
    return warmup, [request(group) for group in order]


def _trace_requests(
    workload: TraceWorkload, model_path: str
) -> tuple[list[RequestSpec], list[RequestSpec]]:
    """One request per row, sent at the row's time / rate_scale. A row's prompt is the blocks
    of its hash ids (the same tokens for the same id, in every row and run), cut to its input
    length; a row without hash ids (or with too few) is topped up with tokens of its own.
    Warm-up requests take the first rows' lengths, with tokens no measured row shares."""
    rows = read_trace(workload.path)
    measured = rows[: workload.prompts] if workload.prompts is not None else rows
    pool = token_pool(model_path)
    tokenizer = _tokenizer(model_path) if workload.prompt_format == "text" else None
    rng = random.Random(workload.seed)
    blocks: dict[int, list[int]] = {}

    def block(hash_id: int) -> list[int]:
        if hash_id not in blocks:
            seeded = random.Random(f"{workload.seed}:{hash_id}")
            blocks[hash_id] = seeded.choices(pool, k=workload.block)
        return blocks[hash_id]

    def request(row: TraceRow, at_s: float | None, shared: bool) -> RequestSpec:
        ids = [t for h in (row.hash_ids if shared else ()) for t in block(h)]
        ids = ids[: row.input_tokens] + rng.choices(pool, k=max(0, row.input_tokens - len(ids)))
        prompt: str | list[int] = ids if tokenizer is None else _text_of(tokenizer, ids, pool, rng)
        return RequestSpec(prompt=prompt, max_tokens=row.output_tokens, at_s=at_s)

    warmup = [request(rows[i % len(rows)], None, False) for i in range(workload.warmup)]
    scale = workload.rate_scale
    return warmup, [request(row, row.at_s / scale, True) for row in measured]


def _tokenizer(model_path: str) -> Any:
    """The model's fast tokenizer (tokenizer.json); text prompts need it."""
    path = Path(model_path) / "tokenizer.json"
    if not path.is_file():
        raise WorkloadError(
            f"text prompts need {path}; use prompt_format=ids for a model without tokenizer.json"
        )
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path))


def _text_of(tokenizer: Any, ids: list[int], pool: list[int], rng: random.Random) -> str:
    """Text that encodes back to len(ids) tokens (decoding and re-encoding merges or splits
    tokens, so the ids are trimmed or topped up and tried again, as vLLM's random dataset does)."""
    want = len(ids)
    text = tokenizer.decode(ids)
    for _ in range(10):
        again = tokenizer.encode(text, add_special_tokens=False).ids
        if len(again) == want:
            break
        again = again[:want] + rng.choices(pool, k=max(0, want - len(again)))
        text = tokenizer.decode(again)
    return str(text)


def _spread_length(rng: random.Random, mean: int, spread: float) -> int:
    low = max(1, int(mean * (1.0 - spread)))
    high = max(low, int(mean * (1.0 + spread)))
    return rng.randint(low, high)


def token_pool(model_path: str) -> list[int]:
    """The token ids random prompts are drawn from: the vocabulary minus special ids."""
    config = _read_model_config(model_path)
    text_config = config.get("text_config") or {}
    vocab = config.get("vocab_size", text_config.get("vocab_size"))
    if not isinstance(vocab, int) or vocab <= _FIRST_ID:
        raise WorkloadError(f"{model_path}/config.json has no usable 'vocab_size'")
    special: set[int] = set()
    for key in _SPECIAL_KEYS:
        value = config.get(key, text_config.get(key))
        special.update(value if isinstance(value, list) else [value] if value is not None else [])
    pool = [token for token in range(_FIRST_ID, vocab) if token not in special]
    if not pool:
        raise WorkloadError(f"{model_path}/config.json leaves no ordinary token id")
    return pool


def _read_model_config(model_path: str) -> dict[str, Any]:
    config_file = Path(model_path) / "config.json"
    if not config_file.is_file():
        raise WorkloadError(
            f"random workload needs a local model folder with config.json to know the "
            f"vocabulary; {model_path!r} is not one (download the model and pass its path)"
        )
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise WorkloadError(f"cannot read {config_file}: {exc}") from None
    if not isinstance(config, dict):
        raise WorkloadError(f"{config_file} is not a JSON object")
    return config


def _jsonl_requests(workload: JsonlWorkload) -> tuple[list[RequestSpec], list[RequestSpec]]:
    """Entries in a seeded shuffled order: measured first (cycling if `prompts` exceeds the
    file), warm-up from the entries after them, so warm-up does not prefill measured prompts
    into the prefix cache when the file is large enough."""
    entries = read_dataset(workload.path, workload.output)
    order = list(range(len(entries)))
    random.Random(workload.seed).shuffle(order)
    count = workload.prompts if workload.prompts is not None else len(entries)
    measured = [entries[order[i % len(order)]] for i in range(count)]
    warmup = [entries[order[(count + i) % len(order)]] for i in range(workload.warmup)]
    return warmup, measured


def longest_request(requests: list[RequestSpec], model_path: str) -> int | None:
    """The most tokens one request needs (its prompt, counted by the model's tokenizer, plus
    its output), or None where a text prompt cannot be counted here (no tokenizer.json)."""
    tokenizer = None
    if any(isinstance(r.prompt, str) for r in requests):
        try:
            tokenizer = _tokenizer(model_path)
        except WorkloadError:
            return None
    longest = 0
    for r in requests:
        if isinstance(r.prompt, list):
            prompt = len(r.prompt)
        else:
            assert tokenizer is not None
            prompt = len(tokenizer.encode(r.prompt).ids)
        longest = max(longest, prompt + r.max_tokens)
    return longest
