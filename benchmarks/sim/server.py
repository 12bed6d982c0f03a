"""A simulated vLLM OpenAI server: `vllm serve`'s CLI shape, the landscape's scheduler in real time.

    SIM_LANDSCAPE=llama8b-h100-throughput python benchmarks/sim/server.py --config engine.yaml \
        --port 8000 [--host 127.0.0.1] [--landscape NAME] [...]

Unknown flags are ignored. The engine YAML (dashes or underscores, as the tuner writes it) is
read into a `SimConfig` over the landscape's vLLM defaults. A config that does not fit fails
start-up with vLLM's own message (CUDA OOM, no memory for the cache blocks, or the KV-capacity
check) and exits 1. Otherwise it serves `/health`, `/version`, `/v1/models` and streaming
`/v1/completions` (usage in the last chunk), stepping the same `Scheduler` as `simulate`: one
step of simulated seconds lasts that times `SIM_TIME_SCALE` of wall time. `/sim/timekeeping`
says how far behind that schedule it ran at worst (`behind_s`, wall seconds): a starved
process delivers late.

Environment: SIM_LANDSCAPE; SIM_TIME_SCALE (1.0); SIM_CHUNK_TOKENS (8: tokens per SSE event
after the first); SIM_NOISE_PROFILE (or `--noise-profile`: dedicated, shared or cpu-2core,
`noise.PROFILES`; with it, each start is one run of that host: its step times over the draw's
speed and throughput factor, the draw's device being the first of CUDA_VISIBLE_DEVICES, its bad
window read at the simulated time since SIM_DRIFT_T0, SIM_NOISE_SEED seeding the study's
windows and device offsets); SIM_NOISE (0, without a profile: a start-to-start factor uniform
in 1 +- NOISE on step times, plus per-step jitter of a fifth of it); SIM_SEED (with it, the
noise is fixed per config; without, fresh per start); SIM_DRIFT (0: slowdown up to this
share, a sinusoid of host time with period SIM_DRIFT_PERIOD_S, default 3600, so 30 minutes go
from none to all of it, none at the epoch SIM_DRIFT_T0, default 0); SIM_STARTUP_S (0.3).
What a profile's draw does to the client's other metrics (TPOT, TTFT) is what its step times
do; its separate per-metric spreads and the cold engine are drawn in-process only
(`tuning.SimMeasure`): the tuner warms each run with the concurrency, so the cold shortfall is
0 there. Text prompts count as len(text) / 4 tokens; token-id prompts exactly.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import os
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

if not __package__:  # run as a script: import this folder as the package `sim`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "sim"
    import sim  # noqa: F401

import yaml

from autotune.predict import Request, Scheduler

from .landscapes import LANDSCAPES, Landscape
from .model import (
    GIB,
    MemoryPlan,
    RooflineTimer,
    SimConfig,
    memory_plan,
    scheduler_config,
    step_cost,
)
from .noise import PROFILES, Draw, NoiseProfile, NoiseSource

PID = os.getpid()


def log(level: str, message: str, where: str = "api_server.py") -> None:
    stamp = time.strftime("%m-%d %H:%M:%S")
    print(
        f"(APIServer pid={PID}) {level} {stamp} [{where}:1] {message}", file=sys.stderr, flush=True
    )


def failure_log(landscape: Landscape, cfg: SimConfig, plan: MemoryPlan) -> str:
    """vLLM's own wording of the failure (each matches engine._failures' table)."""
    gpu, costs = landscape.hardware.gpu, landscape.hardware.costs
    total = gpu.total_bytes
    core = f"(EngineCore_DP0 pid={PID}) ERROR {time.strftime('%m-%d %H:%M:%S')} [core.py:1] "
    if plan.failure == "invalid_config":
        head = "pydantic_core._pydantic_core.ValidationError: 1 validation error"
        return f"{head}\n  Value error, {plan.reason}"
    if plan.reason.startswith("free memory"):
        cause = (
            f"ValueError: Free memory on device ({(total - costs.context_bytes) / GIB:.2f}/"
            f"{total / GIB:.2f} GiB) on startup is less than desired GPU memory utilization "
            f"({cfg.gpu_memory_utilization}, {plan.budget / GIB:.2f} GiB). Decrease GPU memory "
            "utilization or reduce GPU memory used by other processes."
        )
    elif plan.reason.startswith("no available"):
        cause = (
            "ValueError: No available memory for the cache blocks. Try increasing "
            "`gpu_memory_utilization` when initializing the engine."
        )
    elif plan.failure == "oom":
        over = plan.budget + plan.outside - total
        cause = (
            f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
            f"{max(over, 2**27) / GIB:.2f} GiB. GPU 0 has a total capacity of {total / GIB:.2f} "
            f"GiB of which {max(0, total - plan.budget - costs.context_bytes) / 2**20:.2f} MiB "
            f"is free. ({gpu.name}, during CUDA graph capture)"
        )
    else:
        need = cfg.max_model_len * plan.kv_bytes_per_token
        cause = (
            f"ValueError: To serve at least one request with the models's max seq len "
            f"({cfg.max_model_len}), ({need / GIB:.2f} GiB KV cache is needed, which is larger "
            f"than the available KV cache memory ({plan.kv_bytes / GIB:.2f} GiB). Based on the "
            f"available memory, the estimated maximum model length is {plan.kv_tokens}. Try "
            "increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
            "initializing the engine."
        )
    return (
        f"{core}EngineCore failed to start.\n{core}{cause}\n"
        f"(APIServer pid={PID}) RuntimeError: Engine core initialization failed. See root "
        "cause above. Failed core proc(s): {}"
    )


class Noise:
    """Step-time factor: a per-start level (a profile's draw, or uniform within +-SIM_NOISE),
    the uniform model's per-step jitter and a slow drift of host time."""

    def __init__(self, cfg: SimConfig, profile: NoiseProfile | None = None) -> None:
        self.noise = 0.0 if profile else float(os.environ.get("SIM_NOISE", "0"))
        self.drift = float(os.environ.get("SIM_DRIFT", "0"))
        self.period = float(os.environ.get("SIM_DRIFT_PERIOD_S", "3600"))
        self.t0 = float(os.environ.get("SIM_DRIFT_T0", "0"))
        seed = os.environ.get("SIM_SEED")
        key = f"{seed}/{sorted(vars(cfg).items())}" if seed else f"{time.time_ns()}/{PID}"
        self.rng = random.Random(int(hashlib.sha256(key.encode()).hexdigest()[:16], 16))
        self.level = 1.0 + self.rng.uniform(-self.noise, self.noise)
        self.draw: Draw | None = None
        if profile is not None:
            self.draw = self._run(profile)
            self.level = 1.0 / (self.draw.speed * self.draw.throughput)

    def _run(self, profile: NoiseProfile) -> Draw:
        """This start's run on the profile's host: the study's windows and device offsets
        (SIM_NOISE_SEED), this start's own draw, at the simulated time since the epoch."""
        study = int(os.environ.get("SIM_NOISE_SEED", "0"))
        source = NoiseSource(profile, study, run_seed=self.rng.getrandbits(63))
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
        scale = float(os.environ.get("SIM_TIME_SCALE", "1.0"))
        at_s = max(0.0, time.time() - self.t0) / scale
        return source.draw(at_s, device=int(visible) if visible.isdigit() else 0)

    def factor(self) -> float:
        jitter = self.rng.uniform(-self.noise, self.noise) / 5 if self.noise else 0.0
        phase = 2 * math.pi * (time.time() - self.t0) / self.period
        return (self.level + jitter) * (1.0 + self.drift * 0.5 * (1 - math.cos(phase)))


class Engine:
    """The scheduler stepped in real time; each request's tokens go to its own queue."""

    def __init__(
        self,
        landscape: Landscape,
        cfg: SimConfig,
        plan: MemoryPlan,
        profile: NoiseProfile | None = None,
    ) -> None:
        timer = RooflineTimer(step_cost(landscape.hardware, cfg))
        self.sched = Scheduler(scheduler_config(cfg, plan), timer)
        self.scale = float(os.environ.get("SIM_TIME_SCALE", "1.0"))
        self.noise = Noise(cfg, profile)
        if self.noise.draw is not None:
            d = self.noise.draw
            host = f"speed {d.speed:.3f}, throughput factor {d.throughput:.3f}"
            log("INFO", f"simulated host: {host}, degraded {d.degraded}, bad window {d.bad_window}")
        self.queues: dict[int, asyncio.Queue[int]] = {}
        self.wake = asyncio.Event()
        self.t0 = time.perf_counter()
        self.next_id = 0
        # How far behind its schedule a step was committed, at worst (wall seconds): a starved
        # process delivers late what `simulate` times exactly (GET /sim/timekeeping).
        self.behind_s = 0.0

    def sim_now(self) -> float:
        return (time.perf_counter() - self.t0) / self.scale

    def submit(self, prompt: int, output: int) -> asyncio.Queue[int]:
        request = Request(self.next_id, prompt, output, self.sim_now())
        self.next_id += 1
        queue: asyncio.Queue[int] = asyncio.Queue()
        self.queues[request.rid] = queue
        self.sched.add(request)
        self.wake.set()
        return queue

    async def run(self) -> None:
        sched = self.sched
        while True:
            if sched.idle:
                self.wake.clear()
                await self.wake.wait()
                sched.now = max(sched.now, self.sim_now())  # idle time passes
            step = sched.plan()
            end = sched.now + step.duration * self.noise.factor()
            due = self.t0 + end * self.scale
            if due > time.perf_counter():
                await asyncio.sleep(due - time.perf_counter())
            self.behind_s = max(self.behind_s, time.perf_counter() - due)
            for r in sched.commit(step, end):
                self.queues[r.rid].put_nowait(r.generated)
                if r.finish is not None:
                    del self.queues[r.rid]


def prompt_tokens(prompt: Any) -> int:
    if isinstance(prompt, list):
        return max(1, len(prompt))
    return max(1, len(str(prompt)) // 4)


async def complete(engine: Engine, body: dict[str, Any], writer: asyncio.StreamWriter) -> None:
    n_in, n_out = prompt_tokens(body.get("prompt", "")), int(body.get("max_tokens") or 16)
    chunk = max(1, int(os.environ.get("SIM_CHUNK_TOKENS", "8")))
    meta = {
        "id": f"cmpl-sim-{engine.next_id}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": body.get("model"),
    }
    await respond(writer, 200, None, stream=True)
    queue = engine.submit(n_in, n_out)
    sent = 0
    while sent < n_out:
        generated = await queue.get()
        while not queue.empty():
            generated = queue.get_nowait()
        if sent and generated < n_out and generated - sent < chunk:
            continue  # first token at once, then every `chunk` tokens, and the last one
        finish = "length" if generated >= n_out else None
        choice = {
            "index": 0,
            "text": "x" * (generated - sent),
            "logprobs": None,
            "finish_reason": finish,
        }
        await send_event(writer, {**meta, "choices": [choice]})
        sent = generated
    usage = {"prompt_tokens": n_in, "total_tokens": n_in + n_out, "completion_tokens": n_out}
    await send_event(writer, {**meta, "choices": [], "usage": usage})
    await send_event(writer, "[DONE]")


async def send_event(writer: asyncio.StreamWriter, data: Any) -> None:
    text = data if isinstance(data, str) else json.dumps(data)
    writer.write(f"data: {text}\n\n".encode())
    await writer.drain()


async def respond(
    writer: asyncio.StreamWriter, status: int, payload: Any, stream: bool = False
) -> None:
    reason = {200: "OK", 404: "Not Found"}.get(status, "Error")
    kind = "text/event-stream" if stream else "application/json"
    head = f"HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\nConnection: close\r\n"
    body = b"" if payload is None else json.dumps(payload).encode()
    if not stream:
        head += f"Content-Length: {len(body)}\r\n"
    writer.write(head.encode() + b"\r\n" + body)
    await writer.drain()


async def read_request(reader: asyncio.StreamReader) -> tuple[str, str, bytes]:
    method, path, _ = (await reader.readline()).decode("latin-1").split(" ", 2)
    length = 0
    while (line := (await reader.readline()).decode("latin-1").strip()) != "":
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    return method, path.split("?")[0], await reader.readexactly(length)


async def handle(
    engine: Engine, names: set[str], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    try:
        method, path, raw = await read_request(reader)
        if method == "GET" and path == "/health":
            await respond(writer, 200, None)
        elif method == "GET" and path == "/sim/timekeeping":
            await respond(writer, 200, {"behind_s": engine.behind_s})
        elif method == "GET" and path == "/version":
            await respond(writer, 200, {"version": "0.32.0-sim"})
        elif method == "GET" and path == "/v1/models":
            await respond(writer, 200, {"data": [{"id": n, "object": "model"} for n in names]})
        elif method == "POST" and path == "/v1/completions":
            body = json.loads(raw)
            if body.get("model") not in names:
                error = {"message": f"The model `{body.get('model')}` does not exist.", "code": 404}
                await respond(writer, 404, {"error": error})
            else:
                await complete(engine, body, writer)
        else:
            await respond(writer, 404, {"detail": "Not Found"})
    except (ValueError, ConnectionError, asyncio.IncompleteReadError):
        pass  # a malformed request or a client that went away: just close
    finally:
        writer.close()


async def serve(
    landscape: Landscape,
    cfg: SimConfig,
    plan: MemoryPlan,
    options: dict[str, Any],
    host: str,
    port: int,
    profile: NoiseProfile | None = None,
) -> None:
    engine = Engine(landscape, cfg, plan, profile)
    names = {
        str(
            options.get("served_model_name")
            or options.get("model")
            or landscape.hardware.model.name
        )
    }
    loop_task = asyncio.ensure_future(engine.run())
    server = await asyncio.start_server(lambda r, w: handle(engine, names, r, w), host, port)
    log("INFO", f"Starting vLLM API server 0 on http://{host}:{port}", "launcher.py")
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()
    loop_task.cancel()
    log("INFO", "Shutting down FastAPI HTTP server.", "launcher.py")


def load_options(path: str | None) -> dict[str, Any]:
    if not path:
        return {}
    with open(path, encoding="utf-8") as src:
        data = yaml.safe_load(src) or {}
    options = {str(key).replace("-", "_"): value for key, value in data.items()}
    for key in [k for k, v in options.items() if k.startswith("no_") and v is True]:
        options[key[3:]] = False  # `no-KEY: true`: how vLLM's --config file says KEY false
        del options[key]
    return options


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config")
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    parser.add_argument("--landscape", default=os.environ.get("SIM_LANDSCAPE"))
    parser.add_argument("--noise-profile", default=os.environ.get("SIM_NOISE_PROFILE") or None)
    args, _unknown = parser.parse_known_args()
    if args.landscape not in LANDSCAPES:
        log(
            "ERROR",
            f"unknown landscape {args.landscape!r}; SIM_LANDSCAPE: one of {sorted(LANDSCAPES)}",
        )
        sys.exit(2)
    if args.noise_profile is not None and args.noise_profile not in PROFILES:
        log(
            "ERROR",
            f"unknown noise profile {args.noise_profile!r}; SIM_NOISE_PROFILE: one of "
            f"{sorted(PROFILES)}",
        )
        sys.exit(2)
    profile = None if args.noise_profile is None else PROFILES[args.noise_profile]
    landscape = LANDSCAPES[args.landscape]
    options = load_options(args.config)
    cfg = SimConfig.from_options(options, landscape.defaults)
    log("INFO", f"vLLM API server version 0.32.0 (simulated: {landscape.name})")
    log("INFO", f"non-default args: {options}", "utils.py")
    time.sleep(float(os.environ.get("SIM_STARTUP_S", "0.3")))
    plan = memory_plan(landscape.hardware, cfg)
    if plan.failure:
        print(failure_log(landscape, cfg, plan), file=sys.stderr, flush=True)
        sys.exit(1)
    worker = "gpu_worker.py"
    log("INFO", f"Model loading took {plan.weights / GIB:.4f} GiB", worker)
    log("INFO", f"Available KV cache memory: {plan.kv_bytes / GIB:.2f} GiB", worker)
    log("INFO", f"GPU KV cache size: {plan.kv_tokens:,} tokens", "kv_cache_utils.py")
    log(
        "INFO",
        f"Maximum concurrency for {cfg.max_model_len:,} tokens per request: "
        f"{plan.kv_tokens / cfg.max_model_len:.2f}x",
        "kv_cache_utils.py",
    )
    host = args.host or str(options.get("host", "127.0.0.1"))
    port = args.port or int(options.get("port", 8000))
    asyncio.run(serve(landscape, cfg, plan, options, host, port, profile))


if __name__ == "__main__":
    main()
