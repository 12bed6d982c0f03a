"""The offline (batch) trial's child program: `vllm.LLM` generating every prompt in one batch.

    python -m autotune.engine._offline_main --config engine.yaml --prompts prompts.jsonl \
        --out result.json

`engine.yaml` is the engine config as `to_yaml_text` wrote it (the model included); its keys
become `vllm.LLM` keyword arguments. `prompts.jsonl` holds one request a line: `prompt` (text,
or a list of token ids), `max_tokens`, and optionally `temperature` (default 0). Every request
is sampled with `ignore_eos`, so it generates exactly `max_tokens` unless the model's length
limit stops it; the token counts written are the ones vLLM returned.

The result (`RESULT_FIELDS`) is written atomically. Times named `*_time` are this host's
monotonic clock: vLLM's engine core takes its token timestamps with `time.monotonic()` in
another process, and CLOCK_MONOTONIC is system-wide on Linux, so they compare directly.
Progress lines go to stdout, which is the trial's log.

vLLM records per-request times only with its stats on: `disable_log_stats` defaults to False
here (vLLM's LLM defaults it to True), unless the config sets it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import yaml

PROGRESS = "autotune-offline:"  # starts every line this program logs
# The line the parent waits for: the engine is built and generation starts.
READY_MARK = f"{PROGRESS} engine ready"
RESULT_FIELDS = (
    "startup_s",  # seconds `vllm.LLM(...)` took
    "generate_s",  # seconds the one `generate` call took
    "generate_start_time",  # monotonic, just before `generate`
    "generate_end_time",  # monotonic, just after it returned
    "generate_start_unix",  # the same instants, wall clock
    "generate_end_unix",
    "requests",  # per request, in prompt order: see `_request_result`
    "cuda_max_memory_reserved_bytes",  # torch's peak in this process on CUDA, else None
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="autotune.engine._offline_main")
    parser.add_argument("--config", type=Path, required=True, help="engine YAML")
    parser.add_argument("--prompts", type=Path, required=True, help="JSON lines, one request each")
    parser.add_argument("--out", type=Path, required=True, help="result JSON, written atomically")
    args = parser.parse_args(argv)
    options = read_engine_options(args.config)
    requests = read_prompts(args.prompts)
    refused = refused_options(options)
    if refused:
        say(f"error: server-only options that vllm.LLM does not take: {', '.join(refused)}")
        return 2
    generate(options, requests, args.out)
    return 0


def say(text: str) -> None:
    print(f"{PROGRESS} {text}", flush=True)


def read_engine_options(path: Path) -> dict[str, Any]:
    """The engine YAML as `vllm.LLM` keyword arguments (`max-num-seqs` -> `max_num_seqs`)."""
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict) or not data.get("model"):
        raise SystemExit(f"error: {path} is not an engine config with a 'model'")
    options = {str(key).replace("-", "_"): value for key, value in data.items()}
    served = options.get("served_model_name")
    if isinstance(served, list):  # `vllm serve` takes several names; LLM one
        options["served_model_name"] = served[0] if served else None
    options.setdefault("disable_log_stats", False)  # per-request times need vLLM's stats
    return options


def read_prompts(path: Path) -> list[dict[str, Any]]:
    requests = []
    with path.open(encoding="utf-8") as src:
        for line in src:
            if line.strip():
                requests.append(json.loads(line))
    return requests


def refused_options(options: dict[str, Any]) -> list[str]:
    """Options `vllm.LLM` does not accept (the server's front-end options), sorted."""
    import dataclasses
    import inspect

    from vllm import LLM
    from vllm.engine.arg_utils import EngineArgs

    accepted = {field.name for field in dataclasses.fields(EngineArgs)}
    accepted |= set(inspect.signature(LLM.__init__).parameters) - {"self", "kwargs"}
    return sorted(name for name in options if name not in accepted)


def generate(options: dict[str, Any], requests: list[dict[str, Any]], out: Path) -> None:
    """Build the engine, generate every request in one call, and write the result to `out`.

    The result is written while the engine is still referenced: dropping it shuts vLLM's
    engine core down, whose shutdown lines must come after the result, not before it.
    """
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    say(f"starting vllm.LLM for {options['model']}")
    started = time.monotonic()
    llm = LLM(**options)
    startup_s = time.monotonic() - started
    prompts: list[Any] = [
        TokensPrompt(prompt_token_ids=[int(t) for t in r["prompt"]])
        if isinstance(r["prompt"], list)
        else str(r["prompt"])
        for r in requests
    ]
    params = [
        SamplingParams(
            max_tokens=int(r["max_tokens"]),
            ignore_eos=True,
            temperature=float(r.get("temperature") or 0.0),
        )
        for r in requests
    ]
    say(f"engine ready in {startup_s:.1f} s; generating {len(requests)} requests in one batch")
    start_unix, start = time.time(), time.monotonic()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    end, end_unix = time.monotonic(), time.time()
    per_request = [_request_result(out) for out in outputs]
    tokens = sum(r["output_tokens"] for r in per_request)
    say(f"generated {tokens} tokens in {end - start:.2f} s ({tokens / (end - start):.0f} tok/s)")
    result = {
        "startup_s": startup_s,
        "generate_s": end - start,
        "generate_start_time": start,
        "generate_end_time": end,
        "generate_start_unix": start_unix,
        "generate_end_unix": end_unix,
        "requests": per_request,
        "cuda_max_memory_reserved_bytes": _cuda_max_reserved(),
    }
    write_atomically(out, result)
    say(f"wrote {out}")
    del llm  # explicitly after the result: see above


def _request_result(output: Any) -> dict[str, Any]:
    """Token counts as vLLM returned them; first-token and finish times from its stats (None
    when vLLM kept none)."""
    metrics = getattr(output, "metrics", None)
    first = getattr(metrics, "first_token_ts", 0.0) or None
    last = getattr(metrics, "last_token_ts", 0.0) or None
    return {
        "prompt_tokens": len(output.prompt_token_ids or ()),
        "output_tokens": sum(len(c.token_ids) for c in output.outputs),
        "first_token_time": first,
        "finish_time": last,
        "finish_reason": output.outputs[0].finish_reason if output.outputs else None,
    }


def _cuda_max_reserved() -> int | None:
    """torch's peak reserved CUDA memory in this process (where vLLM runs the model in this
    process, e.g. VLLM_ENABLE_V1_MULTIPROCESSING=0); None off CUDA or when it reads 0."""
    torch = sys.modules.get("torch")
    try:
        if torch is None or not torch.cuda.is_available():
            return None
        return int(torch.cuda.max_memory_reserved()) or None
    except Exception:  # an optional number: never fail the trial for it
        return None


def write_atomically(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


if __name__ == "__main__":  # vLLM starts processes that import this module again
    sys.exit(main())
