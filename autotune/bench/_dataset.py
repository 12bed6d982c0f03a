"""Reading prompt datasets: JSONL lines or a ShareGPT JSON list."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from autotune.bench._workload import RequestSpec, WorkloadError
from autotune.inputs.limits import MAX_TOKENS
from autotune.inputs.userfiles import MIB, UserFileError, read_user_text

# The largest public prompt sets fit (ShareGPT V3's JSON list); a larger file would be held in
# memory several times over as it is parsed.
DATASET_LIMIT = 768 * MIB
_HUMAN = ("human", "user")
_GPT = ("gpt", "assistant", "chatgpt")


def read_dataset(path: Path, output: int | None) -> list[RequestSpec]:
    """Every usable entry of a dataset file, in file order.

    A line is `{"prompt": ..., "output_tokens": N}` (or `max_tokens`) or a ShareGPT record
    `{"conversations": [{"from": "human", ...}, {"from": "gpt", ...}]}`. ShareGPT records
    without a human turn, or without a reply when `output` is not given, are skipped (real
    ShareGPT dumps hold many); any other malformed line is an error naming its line number.
    """
    try:
        text = read_user_text(path, DATASET_LIMIT, "dataset")
    except UserFileError as exc:
        raise WorkloadError(str(exc)) from None
    items = _json_list(text, path) if text.lstrip().startswith("[") else _json_lines(text, path)
    specs = []
    for where, item in items:
        spec = _entry(item, output, f"{path}:{where}")
        if spec is not None:
            specs.append(spec)
    if not specs:
        raise WorkloadError(f"dataset {path} holds no usable prompt")
    return specs


def _json_lines(text: str, path: Path) -> list[tuple[str, Any]]:
    items = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            items.append((f"line {number}", json.loads(line)))
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"{path}: line {number}: invalid JSON ({exc.msg})") from None
    return items


def _json_list(text: str, path: Path) -> list[tuple[str, Any]]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"{path}: invalid JSON at line {exc.lineno} ({exc.msg})") from None
    return [(f"item {number}", item) for number, item in enumerate(data, start=1)]


def _entry(item: Any, output: int | None, where: str) -> RequestSpec | None:
    if not isinstance(item, dict):
        raise WorkloadError(f"{where}: expected a JSON object")
    if "conversations" in item:
        return _sharegpt_entry(item["conversations"], output, where)
    prompt = item.get("prompt")
    if not isinstance(prompt, str) or not prompt:
        raise WorkloadError(f"{where}: needs a non-empty 'prompt' string or 'conversations'")
    tokens = output if output is not None else item.get("output_tokens", item.get("max_tokens"))
    if not isinstance(tokens, int) or isinstance(tokens, bool) or not 1 <= tokens <= MAX_TOKENS:
        raise WorkloadError(
            f"{where}: needs a whole 'output_tokens' (or 'max_tokens') from 1 to {MAX_TOKENS:,}"
        )
    return RequestSpec(prompt=prompt, max_tokens=tokens)


def _sharegpt_entry(turns: Any, output: int | None, where: str) -> RequestSpec | None:
    if not isinstance(turns, list) or not all(isinstance(turn, dict) for turn in turns):
        raise WorkloadError(f"{where}: 'conversations' must be a list of objects")
    human = next((i for i, turn in enumerate(turns) if _speaker(turn) in _HUMAN), None)
    if human is None or not _text(turns[human]):
        return None
    if output is not None:
        return RequestSpec(prompt=_text(turns[human]), max_tokens=output)
    reply = next((turn for turn in turns[human + 1 :] if _speaker(turn) in _GPT), None)
    if reply is None:
        return None
    estimate = max(1, len(_text(reply).split()) * 4 // 3)
    return RequestSpec(prompt=_text(turns[human]), max_tokens=estimate)


def _speaker(turn: dict[str, Any]) -> str:
    return str(turn.get("from", turn.get("role", ""))).lower()


def _text(turn: dict[str, Any]) -> str:
    value = turn.get("value", turn.get("content", ""))
    return value if isinstance(value, str) else ""
