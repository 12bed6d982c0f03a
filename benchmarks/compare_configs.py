"""Re-measure two trials of a study side by side, interleaved in time, and report medians.

A single run proves little on a shared machine (the same config drifts by tens of percent over
half an hour), so the two configs are launched alternately (A B B A A B ...), each run a fresh
engine with the study's own workload and load, and the report gives every run, the medians and
the ratio of medians.

    python benchmarks/compare_configs.py --study demo [--a 0] [--b best] [--repeats 3]

`--a` defaults to the baseline (trial 0); `--b` to the max-throughput pick of the front.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from autotune.answer.selection import baseline, pick, study_objectives
from autotune.bench import LoadProfile, build_requests, parse_workload
from autotune.engine import LaunchSettings, from_yaml_dict
from autotune.measure import Workplan, measure
from autotune.store import StudyFacts, StudyStore, TrialRecord, default_storage_url

METRICS = ("output_throughput", "p50_ttft_ms", "p99_ttft_ms", "p50_tpot_ms", "p99_tpot_ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", required=True)
    parser.add_argument("--root", type=Path, default=Path("studies"))
    parser.add_argument("--storage", default=None)
    parser.add_argument("--a", default="baseline", help="trial number or 'baseline'")
    parser.add_argument("--b", default="best", help="trial number or 'best'")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None, help="write the runs as JSON")
    args = parser.parse_args()

    url = args.storage or default_storage_url(args.root, args.study)
    store = StudyStore(url, create=False)
    trials = store.trials(args.study)
    facts = store.study_facts(args.study)
    chosen = {"A": _choose(trials, facts, args.a), "B": _choose(trials, facts, args.b)}
    workload = parse_workload(facts.workload or {})
    warmup, requests = build_requests(workload, facts.model or "")
    plan = Workplan(warmup, requests, LoadProfile(**(facts.load or {})), dict(facts.slos))
    settings = LaunchSettings(cache_dir=args.root / ".cache")

    runs: dict[str, list[dict[str, float]]] = {"A": [], "B": []}
    order = "".join("AB" if i % 2 == 0 else "BA" for i in range(args.repeats))
    with tempfile.TemporaryDirectory(prefix="compare-") as tmp:
        for i, label in enumerate(order):
            trial = chosen[label]
            config = from_yaml_dict(trial.config, trial.env)
            result = measure(config, Path(tmp) / f"{i:02d}-{label}", plan, settings)
            if result.summary is None:
                raise SystemExit(f"run {i} ({label}) failed: {result.status}: {result.reason}")
            row = {m: result.summary.metric(m) for m in METRICS}
            runs[label].append(row)
            print(f"run {i + 1:2d} {label} (trial {trial.number}): " + _fmt(row), flush=True)
    _report(chosen, runs)
    if args.json:
        args.json.write_text(json.dumps({"trials": {k: v.number for k, v in chosen.items()},
                                         "runs": runs}, indent=2))  # fmt: skip


def _choose(trials: list[TrialRecord], facts: StudyFacts, which: str) -> TrialRecord:
    objectives = study_objectives(facts)
    if which == "baseline":
        found = baseline(trials)
        if found is None:
            raise SystemExit("the study has no measured baseline")
        return found
    if which == "best":
        return pick(trials, objectives, "max-throughput")
    return pick(trials, objectives, number=int(which))


def _fmt(row: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:,.1f}" for k, v in row.items())


def _report(chosen: dict[str, TrialRecord], runs: dict[str, list[dict[str, float]]]) -> None:
    print("\nmedians (B/A ratio):")
    for metric in METRICS:
        a = statistics.median(r[metric] for r in runs["A"])
        b = statistics.median(r[metric] for r in runs["B"])
        spread_a = _spread(runs["A"], metric)
        spread_b = _spread(runs["B"], metric)
        print(
            f"  {metric:18s} A (trial {chosen['A'].number}) {a:10,.1f} [{spread_a}]   "
            f"B (trial {chosen['B'].number}) {b:10,.1f} [{spread_b}]   B/A {b / a:.3f}"
        )


def _spread(rows: list[dict[str, float]], metric: str) -> str:
    values = [r[metric] for r in rows]
    return f"{min(values):,.1f}..{max(values):,.1f}"


if __name__ == "__main__":
    main()
