"""A fake vLLM OpenAI server for tests: same CLI shape, health/version, streaming completions.

    python tests/fake_engine.py --config engine.yaml --port 8000 [--host 127.0.0.1] [...]

Unknown flags are ignored. Timing is simulated: at most `max-num-seqs` requests run at once
(the rest queue), and every decode step takes longer the more requests run, so a larger
`max-num-seqs` gives higher throughput. Environment switches for fault tests:
FAKE_ENGINE_STARTUP_S (seconds before serving, default 0.5), FAKE_ENGINE_FAIL=oom (report a CUDA
out-of-memory error during start-up and exit 1), FAKE_ENGINE_STEP_S (base decode step, 0.002).
Standard library and PyYAML only; every response closes its connection.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from typing import Any

import yaml

STEP_S = float(os.environ.get("FAKE_ENGINE_STEP_S", "0.002"))
STEP_PER_SEQ_S = STEP_S / 20  # extra step time per running sequence
PREFILL_PER_TOKEN_S = STEP_S / 200


class Engine:
    def __init__(self, config: dict[str, Any]) -> None:
        self.max_num_seqs = int(config.get("max_num_seqs", 128))
        self.names = {str(config.get("served_model_name") or config.get("model", "fake"))}
        self.slots = asyncio.Semaphore(self.max_num_seqs)
        self.running = 0

    def step_s(self) -> float:
        return STEP_S + STEP_PER_SEQ_S * self.running

    async def complete(self, body: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        prompt = body.get("prompt", "")
        prompt_tokens = len(prompt) if isinstance(prompt, list) else max(1, len(prompt) // 4)
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
    try:
        method, path, raw = await read_request(reader)
        if method == "GET" and path == "/health":
            await respond(writer, 200, None)
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
            else:
                await engine.complete(body, writer)
        else:
            await respond(writer, 404, {"detail": "Not Found"})
    except (ValueError, ConnectionError, asyncio.IncompleteReadError):
        pass  # a malformed request or a client that went away: just close
    finally:
        writer.close()


def load_config(path: str | None) -> dict[str, Any]:
    if not path:
        return {}
    with open(path, encoding="utf-8") as src:
        data = yaml.safe_load(src) or {}
    return {str(key).replace("-", "_"): value for key, value in data.items()}


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
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


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
    asyncio.run(serve(config, host, port))


if __name__ == "__main__":
    main()
