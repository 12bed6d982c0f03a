"""Does a measurement pooled with the engine model's prediction land nearer what the real engine
measures on other runs of the config than the measurement alone?
(`estimate`, benchmarks/pooled_margin.py)

The input is real studies run two or more times with one seed, so the same configs run in the
same order (`autotune tune --sampler random --seed S`, each time under another `--study`).
Each study is read alone, as its export would read it:

- its trials are predicted as the study predicts them before they run: the engine model of
  the trials before (`autotune.study._screen.study_model`), refitted each time;
- each measured config's SLO metrics are estimated two ways: its measurement (the mean of
  its runs in that study, sd the study's own run-to-run noise), and the pooled estimate
  (`estimate` with the study's model errors).

The truth neither sees is the mean of log over the same config's runs in the other studies.
Reported per metric:

- the RMS of each estimate's log error against the truth;
- the RMS z-score (error / the sd the estimate claims, with the truth's own noise added):
  near 1 where the claimed sd is honest, above 1 where the estimate is surer than it is right;
- how often a config is held clear of an SLO bound placed at `f` times its truth
  (measured inside the bound, and `MARGIN_Z` sd of its estimate inside it, read on Student's
  t with the study's noise degrees of freedom, as `selection.margin` reads it). A held config
  with f < 1 truly misses its bound: a wrong export. With f > 1 it truly meets it: more are
  better.

    python benchmarks/pooled_estimate.py --replicates studies/w1 studies/w1b studies/w1c \\
        --replicates studies/w2 studies/w2b studies/w2c
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pooled_margin import ModelErrors, estimate, model_errors
from prediction_error import read_study

from autotune.answer.repeats import compared, config_key, noise
from autotune.answer.selection import MARGIN_Z, normal_equivalent
from autotune.predict import engine_options
from autotune.store import TrialRecord
from autotune.study._screen import study_model
from autotune.vocab.status import TrialStatus

METRICS = ("p50_ttft_ms", "p99_ttft_ms", "p50_tpot_ms", "p99_tpot_ms", "output_throughput")
FACTORS = (0.9, 0.95, 1.05, 1.1, 1.2)


def predicted_study(folder: Path, platform: str = "cpu") -> list[TrialRecord]:
    """A study's trials, each measured one with the prediction the study's engine model of the
    trials before it makes (a study that ran without screening stored none)."""
    trials, load = read_study(folder)
    out: list[TrialRecord] = []
    for t in trials:
        if t.status == TrialStatus.OK:
            model = study_model(out, load, platform)
            p = model.predict(engine_options(t.config)) if model is not None else None
            if p is not None and p.failure is None:
                t = t.model_copy(update={"prediction": p.stored()})
        out.append(t)
    return out


def truth_of(studies: Sequence[list[TrialRecord]], skip: int) -> dict[str, dict[str, float]]:
    """Config key -> metric -> mean log over the other studies' runs (each study's runs of a
    config merged first)."""
    logs: dict[str, dict[str, list[float]]] = {}
    for i, trials in enumerate(studies):
        if i == skip:
            continue
        for t in compared(trials):
            if not t.measured:
                continue
            for m in METRICS:
                v = t.metric(m)
                if v > 0 and math.isfinite(v):
                    logs.setdefault(config_key(t), {}).setdefault(m, []).append(math.log(v))
    return {k: {m: statistics.fmean(v) for m, v in ms.items()} for k, ms in logs.items()}


def replicate_sd(studies: Sequence[list[TrialRecord]]) -> dict[str, float]:
    """Each metric's run-to-run sd of log over all the studies' runs of each config."""
    merged = [t for trials in studies for t in trials]
    return {m: n.sd for m, n in noise(merged, METRICS).items()}


def evaluate(groups: Sequence[Sequence[Path]]) -> dict[str, Any]:
    rows: dict[str, dict[str, list[Any]]] = {m: {"single": [], "pooled": []} for m in METRICS}
    held: dict[str, dict[str, dict[float, list[bool]]]] = {
        m: {w: {f: [] for f in FACTORS} for w in ("single", "pooled")} for m in METRICS
    }
    for group in groups:
        studies = [predicted_study(folder) for folder in group]
        rep = replicate_sd(studies)
        for i, trials in enumerate(studies):
            truth = truth_of(studies, i)
            own = noise(trials, METRICS)
            errors: ModelErrors = model_errors(trials)
            others = len(studies) - 1
            for t in compared(trials):
                if not t.measured or config_key(t) not in truth:
                    continue
                for m in METRICS:
                    if m not in own or m not in truth[config_key(t)] or not t.metric(m) > 0:
                        continue
                    x_true = truth[config_key(t)][m]
                    truth_var = rep.get(m, 0.0) ** 2 / others
                    for way, errs in (("single", None), ("pooled", errors)):
                        x, sd = estimate(t, m, own[m].sd, errs)
                        z = (x - x_true) / math.sqrt(sd * sd + truth_var)
                        rows[m][way].append((x - x_true, z))
                        if m == "output_throughput":
                            continue
                        for f in FACTORS:
                            bound = x_true + math.log(f)
                            inside = math.log(t.metric(m)) <= bound
                            z = normal_equivalent((bound - x) / sd, own[m].df)
                            held[m][way][f].append(inside and z >= MARGIN_Z)
    out: dict[str, Any] = {}
    for m in METRICS:
        entry: dict[str, Any] = {"n": len(rows[m]["single"])}
        for way in ("single", "pooled"):
            errs = [e for e, _ in rows[m][way]]
            zs = [z for _, z in rows[m][way]]
            if not errs:
                continue
            entry[way] = {
                "rms": math.sqrt(statistics.fmean(e * e for e in errs)),
                "rms_z": math.sqrt(statistics.fmean(z * z for z in zs)),
                "held": {str(f): statistics.fmean(held[m][way][f]) for f in FACTORS}
                if held[m][way][FACTORS[0]]
                else {},
            }
        out[m] = entry
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", nargs="+", type=Path, action="append", required=True)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = evaluate(args.replicates)
    heads = " | ".join(f"held at {f:g}x" for f in FACTORS)
    print(f"| metric | n | estimate | RMS log error | RMS z | {heads} |")
    for m, entry in result.items():
        for way in ("single", "pooled"):
            if way not in entry:
                continue
            e = entry[way]
            cells = " | ".join(f"{e['held'][str(f)]:.0%}" for f in FACTORS) if e["held"] else ""
            print(f"| {m} | {entry['n']} | {way} | {e['rms']:.1%} | {e['rms_z']:.2f} | {cells} |")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
