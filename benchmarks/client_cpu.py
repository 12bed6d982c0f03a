"""CPU the load client costs per streamed token: autotune's client vs `vllm bench serve`'s.

On a CPU host the client shares cores with the engine: every microsecond it spends on a token
is taken from the engine, and the engine it measures is slower than the one users run. Both
clients stream the same requests from one fake engine (tests/fake_engine.py: a fixed decode
step, no model), one after the other in alternating order, in this process; the figure is
the process CPU time of a run over the tokens streamed (median of the rounds). vLLM's side
is its own request function (`vllm.benchmarks.lib.endpoint_request_func`) on an aiohttp
session set up as `vllm bench serve` sets it up.

    python benchmarks/client_cpu.py [--requests 64] [--output 256] [--concurrency 16]
        [--rounds 4] [--step-s 0.002]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp

from autotune.bench import LoadProfile, OpenAICompletionsClient, RequestSpec
from autotune.engine import EngineConfig, LaunchSettings, launch

FAKE_ENGINE = Path(__file__).resolve().parents[1] / "tests" / "fake_engine.py"


async def vllm_client(url: str, requests: list[RequestSpec], concurrency: int) -> None:
    from vllm.benchmarks.lib.endpoint_request_func import (
        RequestFuncInput,
        async_request_openai_completions,
    )

    connector = aiohttp.TCPConnector(
        limit=concurrency, limit_per_host=concurrency, keepalive_timeout=60, force_close=False
    )
    gate = asyncio.Semaphore(concurrency)
    timeout = aiohttp.ClientTimeout(total=3600)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def one(spec: RequestSpec) -> None:
            request = RequestFuncInput(
                prompt=spec.prompt, api_url=f"{url}/v1/completions", prompt_len=0,
                output_len=spec.max_tokens, model="fake", ignore_eos=True,
                extra_body={"temperature": 0},
            )  # fmt: skip
            async with gate:
                output = await async_request_openai_completions(request, session)
            if not output.success:
                sys.exit(f"vLLM's client failed: {output.error}")

        await asyncio.gather(*(one(spec) for spec in requests))


def cpu_of(run: Callable[[], None]) -> float:
    started = time.process_time()
    run()
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--output", type=int, default=256, help="tokens per request")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--step-s", type=float, default=0.002, help="the fake engine's step")
    args = parser.parse_args()
    import vllm.benchmarks.lib.endpoint_request_func  # noqa: F401 - imported before any run

    requests = [RequestSpec("hello world " * 8, args.output) for _ in range(args.requests)]
    profile = LoadProfile(concurrency=args.concurrency)
    os.environ.update(FAKE_ENGINE_STARTUP_S="0.1", FAKE_ENGINE_STEP_S=str(args.step_s))
    settings = LaunchSettings(command=f"{sys.executable} {FAKE_ENGINE}", startup_timeout_s=30)
    cpu: dict[str, list[float]] = {"autotune": [], "vllm bench serve": []}
    with (
        tempfile.TemporaryDirectory() as tmp,
        launch(EngineConfig(model="fake"), settings, Path(tmp)) as engine,
    ):

        def ours() -> None:
            client = OpenAICompletionsClient(engine.url, "fake")
            records = asyncio.run(client.run(requests, profile))
            if not all(r.ok for r in records):
                sys.exit("autotune's client failed")

        def theirs() -> None:
            asyncio.run(vllm_client(engine.url, requests, args.concurrency))

        runs = {"autotune": ours, "vllm bench serve": theirs}
        for k in range(args.rounds):
            for name in list(runs) if k % 2 == 0 else list(runs)[::-1]:
                cpu[name].append(cpu_of(runs[name]))
    tokens = args.requests * args.output
    print("| client | CPU per token (us, median) | runs (s) |\n|---|---|---|")
    for name, values in cpu.items():
        per_token = statistics.median(values) / tokens * 1e6
        print(f"| {name} | {per_token:.1f} | {', '.join(f'{v:.2f}' for v in values)} |")
    ratio = statistics.median(cpu["autotune"]) / statistics.median(cpu["vllm bench serve"])
    print(f"\nautotune / vllm bench serve: {ratio:.3f}")


if __name__ == "__main__":
    main()
