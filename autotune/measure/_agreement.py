"""Whether a config answers as the baseline does: its greedy outputs on a small fixed prompt set,
compared with the baseline's (docs/metrics.md, "Agreement").

A quantized checkpoint, an fp8 KV cache, a speculative-decoding setting or another kernel can
change what the model answers, and a faster config that answers differently is no win. Each
trial of a study run with `--min-agreement` asks its engine, after its benchmark, for greedy
completions (temperature 0) of `PROMPTS`, all in one request (the engine batches them as it
batches traffic), and keeps the token ids (`greedy.json` in its folder). The baseline's are the
reference; each other trial's agreement with it is

- `agreement_exact`: the share of prompts whose output is the same token for token;
- `agreement_tokens`: the mean over prompts of the tokens up to the first that differs, over
  the longer output's length: 1 when every output is the same, 0 when none starts alike.

Token ids come from vLLM's `return_token_ids`; an engine whose reply carries none is compared
on the characters of its text instead.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from autotune.vocab import layout

# Plain prompts, some of which a model completes in many ways (numbers, code, lists): a change
# of numerics shows where the top two next tokens are close.
PROMPTS: tuple[str, ...] = (
    "The capital of France is",
    "def fibonacci(n):\n    ",
    "1, 2, 3, 5, 8, 13,",
    "Translate to German: The weather is nice today.",
    "The three primary colors are",
    "Once upon a time, in a small village,",
    "SELECT name, COUNT(*) FROM orders",
    "Water boils at a temperature of",
)
MAX_TOKENS = 16
Output = list[int] | str  # token ids, or the text where the engine gives no ids


@dataclass(frozen=True)
class Reference:
    """The baseline's greedy outputs once it is measured (empty before). Immutable: the study
    makes a new one when its baseline is measured, and each trial's workplan takes the one of
    its moment."""

    outputs: tuple[Output, ...] = ()


class AgreementError(Exception):
    """The engine did not answer the agreement prompts (the trial's outputs are unknown)."""


@dataclass(frozen=True)
class Agreement:
    exact: float
    tokens: float
    prompts: int

    def to_dict(self) -> dict[str, float | int]:
        return {"exact": self.exact, "tokens": self.tokens, "prompts": self.prompts}

    @classmethod
    def read(cls, data: Any) -> Agreement | None:
        if not isinstance(data, dict):
            return None
        return cls(float(data["exact"]), float(data["tokens"]), int(data["prompts"]))


def greedy_outputs(
    url: str, model: str, prompts: Sequence[str] = PROMPTS, timeout_s: float = 120.0
) -> list[Output]:
    """The engine's greedy completions of `prompts`, in their order."""
    body = {
        "model": model,
        "prompt": list(prompts),
        "max_tokens": MAX_TOKENS,
        "temperature": 0.0,
        "return_token_ids": True,
    }
    try:
        reply = httpx.post(f"{url}/v1/completions", json=body, timeout=timeout_s)
        reply.raise_for_status()
        choices = sorted(reply.json()["choices"], key=lambda c: int(c["index"]))
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        raise AgreementError(f"the engine did not answer the agreement prompts: {exc}") from exc
    if len(choices) != len(prompts):
        raise AgreementError(f"{len(choices)} completions for {len(prompts)} agreement prompts")
    return [_output(choice) for choice in choices]


def _output(choice: dict[str, Any]) -> Output:
    ids = choice.get("token_ids")
    if isinstance(ids, list) and all(isinstance(i, int) for i in ids):
        return list(ids)
    return str(choice.get("text") or "")


def agreement_of(reference: Sequence[Output], outputs: Sequence[Output]) -> Agreement:
    """How far `outputs` agree with `reference`, prompt by prompt (see the module's text)."""
    if len(reference) != len(outputs) or not reference:
        raise ValueError(f"{len(outputs)} outputs to compare with {len(reference)}")
    exact, shares = 0, []
    for ref, out in zip(reference, outputs, strict=True):
        if isinstance(ref, str) != isinstance(out, str):  # ids against text: compare texts' ids
            ref, out = str(ref), str(out)
        longer = max(len(ref), len(out))
        same = next((i for i, (a, b) in enumerate(zip(ref, out, strict=False)) if a != b), None)
        prefix = min(len(ref), len(out)) if same is None else same
        exact += int(ref == out)
        shares.append(1.0 if longer == 0 else prefix / longer)
    count = len(reference)
    return Agreement(round(exact / count, 4), round(sum(shares) / count, 4), count)


def write_outputs(trial_dir: Path, outputs: Sequence[Output]) -> None:
    (trial_dir / layout.GREEDY).write_text(json.dumps({"prompts": PROMPTS, "outputs": outputs}))


def read_outputs(trial_dir: Path) -> list[Output] | None:
    """A trial's greedy outputs (`greedy.json`); None where it has none."""
    try:
        data = json.loads((trial_dir / layout.GREEDY).read_text())
    except (OSError, ValueError):
        return None
    outputs = data.get("outputs") if isinstance(data, dict) else None
    return list(outputs) if isinstance(outputs, list) else None
