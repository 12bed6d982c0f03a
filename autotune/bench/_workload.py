"""Workload descriptions (what to send) and their parsing from CLI strings or YAML dicts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from autotune.inputs.limits import MAX_WORKLOAD_TOKENS, Factor, Requests, Seed, Tokens, Warmup
from autotune.inputs.wording import did_you_mean, plain_message


class WorkloadError(ValueError):
    """A workload that cannot be parsed or built; the message is one line for the user."""


@dataclass(frozen=True)
class RequestSpec:
    """One request to send: a text prompt or a list of token ids, and its output length;
    `at_s`, when every request of a run has one (a trace), is its send time from the run's
    start, instead of the load profile's arrivals."""

    prompt: str | list[int]
    max_tokens: int
    at_s: float | None = None


def _check_generated(tokens: float) -> None:
    """A generated workload is drawn in full before the first trial: bounded as a whole."""
    if tokens > MAX_WORKLOAD_TOKENS:
        raise ValueError(
            f"{tokens:,.0f} tokens to generate, more than {MAX_WORKLOAD_TOKENS:,}: use fewer or "
            "shorter prompts"
        )


class RandomWorkload(BaseModel):
    """Random prompts of (roughly) fixed input and output lengths.

    `prompt_format: text` (default) sends text that the model's tokenizer encodes to `input`
    tokens, as real clients send text (so the server's tokenization is measured too);
    `ids` sends the token ids themselves (exact lengths; no tokenizer needed).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["random"] = "random"
    input: Tokens = Field(default=256, description="Mean prompt length in tokens")
    output: Tokens = Field(default=64, description="Mean output length in tokens")
    prompts: Requests = Field(default=64, description="Number of measured requests")
    input_spread: float = Field(
        default=0.0, ge=0.0, lt=1.0, description="Input lengths uniform in input*(1 +- spread)"
    )
    output_spread: float = Field(
        default=0.0, ge=0.0, lt=1.0, description="Output lengths uniform in output*(1 +- spread)"
    )
    seed: Seed = Field(default=0, description="Seed of this workload's private RNG")
    warmup: Warmup = Field(default=2, description="Warm-up requests, sent first, not measured")
    prompt_format: Literal["text", "ids"] = Field(
        default="text", description="Send text (tokenized by the server) or token ids"
    )

    @model_validator(mode="after")
    def _generable(self) -> RandomWorkload:
        each = self.input * (1 + self.input_spread) + self.output * (1 + self.output_spread)
        _check_generated((self.prompts + self.warmup) * each)
        return self


class JsonlWorkload(BaseModel):
    """Prompts read from a JSONL file (`prompt`/`output_tokens` lines or ShareGPT records)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["jsonl"] = "jsonl"
    path: Path = Field(description="JSONL file, or a ShareGPT JSON file holding one list")
    prompts: Requests | None = Field(
        default=None, description="Measured requests (default: every entry once)"
    )
    output: Tokens | None = Field(
        default=None, description="Output tokens of every request (overrides the file)"
    )
    warmup: Warmup = Field(default=2, description="Warm-up requests, sent first, not measured")
    seed: Seed = Field(default=0, description="Seed of the shuffle that orders the entries")


class SharedPrefixWorkload(BaseModel):
    """Requests in groups that share a system prompt (SGLang's generated-shared-prefix dataset):
    `groups` random prefixes of `prefix` tokens; each request is one of them followed by its own
    `input` random tokens. The measured requests are spread evenly over the groups, in a seeded
    order, so that a group's later requests can find its prefix in the prefix cache that its first
    one filled. Warm-up requests have a prefix of their own: they warm the engine, not the cache
    of the measured groups.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["shared-prefix"] = "shared-prefix"
    groups: Requests = Field(default=8, description="Distinct shared prefixes")
    prefix: Tokens = Field(default=512, description="Tokens of each shared prefix")
    input: Tokens = Field(default=64, description="Tokens of each request after its prefix")
    output: Tokens = Field(default=64, description="Output tokens of each request")
    prompts: Requests = Field(default=64, description="Number of measured requests")
    seed: Seed = Field(default=0, description="Seed of this workload's private RNG")
    warmup: Warmup = Field(default=2, description="Warm-up requests, sent first, not measured")
    prompt_format: Literal["text", "ids"] = Field(
        default="text", description="Send text (tokenized by the server) or token ids"
    )

    @model_validator(mode="after")
    def _generable(self) -> SharedPrefixWorkload:
        each = self.input + self.output
        _check_generated((self.groups + 1) * self.prefix + (self.prompts + self.warmup) * each)
        return self


class TraceWorkload(BaseModel):
    """A recorded trace replayed at its own pace: one request per row, sent at the row's
    time (scaled by `rate_scale`), with the row's input and output lengths; rows with
    `hash_ids` (Mooncake's format: one id per block of `block` tokens) share the prompt blocks
    of their ids, so that the prefix cache sees the trace's reuse. Rows are JSONL or CSV
    (bench/_trace.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["trace"] = "trace"
    path: Path = Field(description="JSONL or CSV trace: timestamp, input/output lengths, hash_ids")
    rate_scale: Factor = Field(default=1.0, description="Replay this many times faster")
    prompts: Requests | None = Field(
        default=None, description="Measured requests: the trace's first N (default: all)"
    )
    block: Tokens = Field(default=512, description="Tokens of one hash id's block")
    seed: Seed = Field(default=0, description="Seed of the prompts' tokens")
    warmup: Warmup = Field(default=2, description="Warm-up requests, sent first, not measured")
    prompt_format: Literal["text", "ids"] = Field(
        default="text", description="Send text (tokenized by the server) or token ids"
    )


AnyWorkload = RandomWorkload | JsonlWorkload | SharedPrefixWorkload | TraceWorkload
Workload = Annotated[AnyWorkload, Field(discriminator="type")]

_ADAPTER: TypeAdapter[AnyWorkload] = TypeAdapter(Workload)
_KINDS: dict[str, type[BaseModel]] = {
    "random": RandomWorkload,
    "jsonl": JsonlWorkload,
    "shared-prefix": SharedPrefixWorkload,
    "trace": TraceWorkload,
}
_TYPES = tuple(_KINDS)


def parse_workload(source: str | Mapping[str, Any]) -> AnyWorkload:
    """A workload from its CLI form (`random:input=256,output=64`) or a dict (from YAML).

    Raises WorkloadError with a one-line message naming the offending key.
    """
    data = _split_cli(source) if isinstance(source, str) else dict(source)
    kind = data.get("type")
    if kind not in _TYPES:
        hint = ""
        if isinstance(source, str) and ("/" in source or source.endswith((".jsonl", ".json"))):
            hint = f" (a file of prompts: jsonl:path={source}; a trace: trace:path={source})"
        raise WorkloadError(
            f"unknown workload type {kind!r}; expected one of: {', '.join(_TYPES)}{hint}"
        )
    try:
        return _ADAPTER.validate_python(data)
    except ValidationError as exc:
        raise WorkloadError(_one_line(exc)) from None


def _split_cli(text: str) -> dict[str, Any]:
    """`random:input=256,output=64` -> {"type": "random", "input": "256", "output": "64"}."""
    kind, _, rest = text.strip().partition(":")
    data: dict[str, Any] = {"type": kind.strip()}
    for item in filter(None, (part.strip() for part in rest.split(","))):
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise WorkloadError(f"workload option {item!r} is not of the form key=value")
        if key in data:
            raise WorkloadError(f"workload key {key!r} given twice")
        data[key] = value.strip()
    return data


def _one_line(exc: ValidationError) -> str:
    """The first validation error as `workload key 'input': <reason>`."""
    first = exc.errors()[0]
    loc = [str(part) for part in first["loc"] if part not in _TYPES]
    if not loc:  # the workload as a whole
        return plain_message(first)
    key = ".".join(loc)
    if first["type"] == "extra_forbidden":
        kind = next(model for name, model in _KINDS.items() if name in first["loc"])
        return f"unknown workload key {key!r}{did_you_mean(key, kind.model_fields)}"
    if first["type"] == "missing":
        return f"workload key {key!r} is required"
    return f"workload key {key!r}: {plain_message(first)} (got {first.get('input')!r})"
