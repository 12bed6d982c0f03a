"""Device time that early stopping (`--prune`) saves on a real study, and what it costs.

Runs the same study (same seed, space, workload, SLOs) through `autotune tune` with `--prune`
and, with `--compare`, without it, in alternating order over `--repeats`. For each study it
reports the device-seconds of every launched trial, how many were pruned, the tuner's own
estimate of the seconds saved (each pruned trial against the median fully measured trial),
and the best feasible value of the first objective, so that a saving that loses the winner
shows. The measured saving is the difference of the two studies' device-seconds, shown side
by side; the samplers see different values once a trial is pruned, so the two studies may
propose different configs after it.

    python benchmarks/early_stopping.py --model models/tiny [--trials 12] [--compare]
        [--repeats 1] [--workload W] [--rate R] [--json out.json]

Pruning shortens only the benchmark, never the engine's start-up: the shorter the workload
against the start-up, the less it can save.
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

# A load that the smallest max_num_seqs of cpu-quick cannot keep within the TTFT SLO.
WORKLOAD = "random:input=128,output=32,prompts=64,warmup=2"
RATE = "24"
SLOS = ("p99_ttft_ms=600", "p99_tpot_ms=60")


def run_study(
    model: str, workdir: Path, name: str, trials: int, prune: bool, workload: str, rate: str
) -> dict[str, Any]:
    root = workdir / name
    argv = [
        sys.executable, "-m", "autotune", "tune", "--study", name, "--model", model,
        "--space", "cpu-quick", "--workload", workload, "--rate", rate,
        *(x for slo in SLOS for x in ("--slo", slo)),
        "--trials", str(trials), "--root", str(root), "--seed", "7",
        "--prune" if prune else "--no-prune",
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
           "VLLM_CACHE_ROOT": str(workdir / "cache")}  # fmt: skip
    started = time.monotonic()
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=7200)
    wall_s = time.monotonic() - started
    if out.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{out.stdout[-3000:]}{out.stderr[-2000:]}")
    store = StudyStore(f"sqlite:///{root / name / 'study.db'}", create=False)
    launched = [t for t in store.trials(name) if t.device_s is not None]
    ok = [t for t in launched if t.status == "ok"]
    pruned = [t for t in launched if t.status == "pruned"]
    full = statistics.median(t.device_s or 0.0 for t in ok) if ok else 0.0
    pruned_s = sum(t.device_s or 0.0 for t in pruned)
    feasible = [t.metric("output_throughput") for t in ok if t.feasible]
    return {
        "study": name,
        "prune": prune,
        "wall_s": round(wall_s, 1),
        "launched": len(launched),
        "ok": len(ok),
        "pruned": len(pruned),
        "device_s": round(sum(t.device_s or 0.0 for t in launched), 1),
        "median_full_trial_s": round(full, 1),
        "pruned_trial_s": [round(t.device_s or 0.0, 1) for t in pruned],
        "estimated_saved_s": round(max(0.0, len(pruned) * full - pruned_s), 1),
        "best_feasible_output_throughput": round(max(feasible), 1) if feasible else None,
        "pruned_reasons": [t.reason for t in pruned],
        "summary_line": next(
            (line for line in out.stdout.splitlines() if "device-seconds" in line), ""
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--compare", action="store_true", help="Also run without --prune")
    parser.add_argument("--workload", default=WORKLOAD, help="A longer one saves more")
    parser.add_argument("--rate", default=RATE)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    model = str(Path(args.model).resolve())
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="prune-") as tmp:
        workdir = Path(tmp)
        for repeat in range(args.repeats):
            order = [True, False] if repeat % 2 == 0 else [False, True]
            for prune in order if args.compare else [True]:
                name = f"r{repeat}-{'prune' if prune else 'full'}"
                run = run_study(model, workdir, name, args.trials, prune, args.workload, args.rate)
                runs.append(run)
                print(json.dumps(run), flush=True)
    with_prune = [r for r in runs if r["prune"]]
    without = [r for r in runs if not r["prune"]]
    summary: dict[str, Any] = {
        "trials": args.trials,
        "workload": args.workload,
        "rate": args.rate,
        "slos": SLOS,
        "median_estimated_saved_s": statistics.median(r["estimated_saved_s"] for r in with_prune),
        "median_device_s_prune": statistics.median(r["device_s"] for r in with_prune),
        "median_pruned": statistics.median(r["pruned"] for r in with_prune),
    }
    if without:
        full = statistics.median(r["device_s"] for r in without)
        summary["median_device_s_full"] = full
        summary["device_s_ratio_prune_over_full"] = round(
            summary["median_device_s_prune"] / full, 3
        )
    summary["runs"] = runs
    print(json.dumps({k: v for k, v in summary.items() if k != "runs"}, indent=1))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
