"""Why the config export deploys truly misses an SLO, seed by seed, on a simulated landscape.

    python benchmarks/export_misses.py --landscape qwen14b-910b-slo --noise-profile cpu-2core \
        --trials 15 --seeds 10 [--method gp-screen] [--jobs 2]
    python benchmarks/export_misses.py --landscape qwen14b-910b-slo --headroom

Runs the search as `search_efficiency.py --landscape` does (benchmarks/sim, the real
`StudyRunner` on a simulated engine), and after the last trial takes the config `autotune
export` would deploy (`choose_export`), then prints, per seed: how export chose it (its header
line: held clear of the noise, or within it), its runs, what each run measured of every SLO
against the truth (noise-free) value, and the run-to-run noise the study measured against the
profile's. The last lines count the misses by cause:

- `within the noise`: no feasible config held its SLOs clear of the measured noise, so export
  fell back to the feasible best (`autotune.answer.selection.pick`);
- `no noise measured`: no config ran twice, so export held no margin;
- `noise read low`: the study's pooled sd of the missed SLO's metric (`repeats.noise`) is
  below half the profile's, so the margin export demanded was too small;
- `lucky runs`: neither; the pick's runs measured it inside the bound by more than the margin
  while its truth is past it (what choosing the best of many noisy configs selects).

With `--headroom`, it prints instead how much of the optimum a config keeps where every SLO
must hold with 2.5, 5, 10 and 15% to spare in the truth (`sim.truth.optimum` on the landscape
with its bounds tightened): the room any selection rule has. At a per-run sd of s, holding a
one-sided 90% margin on a config h inside its bound takes (1.28 s / h)^2 runs of it.

A simulator ranks ideas; it does not validate them (the brief): this says what a search on the
profile's noise does, not what the real engine does.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import optuna
from sim import tuning
from sim.landscapes import LANDSCAPES
from sim.noise import PROFILES
from sim.truth import Truth, optimum
from sim.tuning import METHODS, run_method

from autotune.answer.export import choose_export, slo_noise
from autotune.answer.repeats import config_key
from autotune.space import load_space
from autotune.store import TrialRecord
from autotune.vocab.slo import NOT_SLOS

# The profile's per-run sd of each SLO metric's log (benchmarks/sim/noise.py).
PROFILE_SD = {
    "p99_tpot_ms": "tpot_sd",
    "p50_tpot_ms": "tpot_sd",
    "p99_ttft_ms": "p99_ttft_sd",
    "p50_ttft_ms": "p50_ttft_sd",
}


def trace(name: str, profile: str, trials: int, seed: int, method: str) -> dict[str, Any]:
    """One seed's study and what export deploys after its last trial."""
    land, chosen = LANDSCAPES[name], {}

    def spy(records: Sequence[TrialRecord], facts: Any, *args: Any, **kw: Any) -> Any:
        pick, how = choose_export(records, facts, *args, **kw)
        chosen.update(records=list(records), pick=pick, how=how)
        return pick, how

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    truth = Truth(land)
    tuning.choose_export = spy  # what `tuning._deployed` calls after each trial
    try:
        steps = run_method(land, METHODS[method], seed, trials, truth, profile=PROFILES[profile])
    finally:
        tuning.choose_export = choose_export
    out: dict[str, Any] = {"seed": seed, "misses": steps[-1].misses, "score": steps[-1].truth}
    if "pick" not in chosen:
        return {**out, "how": "nothing deployed"}
    records, pick = chosen["records"], chosen["pick"]
    options, _ = load_space(land.space).to_engine(pick.params)
    result = truth.result(options)
    noise = slo_noise(records)
    runs = [r for r in records if r.measured and config_key(r) == config_key(pick)]
    slos = {}
    for metric, bound in land.slos.items():
        if metric in NOT_SLOS:
            continue
        measured = [bound * (1 + r.constraints[metric]) for r in runs if metric in r.constraints]
        slos[metric] = {
            "bound": bound,
            "truth": round(float(getattr(result, metric)), 2),
            "runs": [round(v, 2) for v in measured],
            "noise_sd": round(noise[metric].sd, 3) if metric in noise else None,
            "noise_df": noise[metric].df if metric in noise else 0,
            "profile_sd": getattr(PROFILES[profile], PROFILE_SD.get(metric, ""), None),
        }
    return {**out, "how": chosen["how"], "trial": pick.number, "slos": slos}


def headroom(
    name: str, spares: Sequence[float] = (0.0, 0.025, 0.05, 0.10, 0.15), samples: int = 200
) -> list[str]:
    """One line per share to spare: the best config whose every SLO holds with it (truth)."""
    land, lines, best = LANDSCAPES[name], [], None
    for spare in spares:
        tight = dataclasses.replace(land, slos={k: v * (1 - spare) for k, v in land.slos.items()})
        params, score = optimum(tight, Truth(tight), samples=samples)
        best = score if best is None else best
        share = score / best if best else 0.0
        lines.append(
            f"{name}: {spare:.1%} to spare: {score:.1f} ({share:.1%} of the optimum) {params}"
        )
    return lines


def cause(row: dict[str, Any]) -> str | None:
    """Why a seed's deployed config misses (None where it does not)."""
    if not row["misses"]:
        return None
    if "within the noise" in row["how"]:
        return "within the noise"
    if "hold by" not in row["how"]:
        return "no noise measured"
    for s in row["slos"].values():
        past = s["truth"] > s["bound"] and s["noise_sd"] is not None and s["profile_sd"]
        if past and s["noise_sd"] < s["profile_sd"] / 2:
            return "noise read low"
    return "lucky runs"


def _one(job: tuple[str, str, int, int, str]) -> dict[str, Any]:
    name, profile, trials, seed, method = job
    return trace(name, profile, trials, seed, method)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--landscape", required=True, choices=sorted(LANDSCAPES))
    parser.add_argument("--noise-profile", default="cpu-2core", choices=sorted(PROFILES))
    parser.add_argument("--method", default="gp-screen", choices=sorted(METHODS))
    parser.add_argument("--trials", type=int, default=15)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--headroom", action="store_true", help="the room for a margin only")
    args = parser.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    if args.headroom:
        print("\n".join(headroom(args.landscape)))
        return
    jobs = [
        (args.landscape, args.noise_profile, args.trials, seed, args.method)
        for seed in range(args.seeds)
    ]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        rows = list(pool.map(_one, jobs))
    causes: dict[str, int] = {}
    for row in rows:
        row["cause"] = cause(row)
        print(json.dumps(row), flush=True)
        if row["cause"]:
            causes[row["cause"]] = causes.get(row["cause"], 0) + 1
    misses = sum(1 for r in rows if r["misses"])
    print(f"{misses} of {len(rows)} seeds deploy a config that truly misses an SLO", end="")
    print("".join(f"; {n} {c}" for c, n in sorted(causes.items())) if causes else "")
    print(f"median truth of the deployed config: {statistics.median(r['score'] for r in rows):.1f}")


if __name__ == "__main__":
    main()
