"""The confirm step's judgement: its runs in, each candidate's statistics, the gain of the
best over the baseline and the verdict in words out. Pure functions over `ConfirmRun`s (the
step itself, which runs them, is `study/_confirm.py`; its docstring says what is judged how).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from autotune.bench import degraded, t_quantile
from autotune.spec import TuneSpec
from autotune.store import StudyFacts
from autotune.study._sequential import ERROR, SMALLEST, look
from autotune.vocab.slo import Slo, slos_of

LEVEL = 0.90  # the gain's interval: two-sided
# A round is degraded when a candidate's ratio to the baseline there departs from its ratios in
# the other rounds by more than this (log: 39% below or 65% above their median) and 4 robust
# sd of theirs. With a round's paired noise of 0.064-0.10 (docs/benchmarks.md, "How long a
# turn holds") a null step of up to 8 rounds flags one at most 1 time in 1,000; at 0.16 (one
# engine after the other, beside other work) 3-6 times in 100; a round at half speed (log
# -0.69) is caught 98 times in 100 at 0.064 (tests/study/test_sequential.py).
ROUND_FLOOR = 0.5


@dataclass(frozen=True)
class ConfirmRun:
    """What one candidate measured in one round (as measured: no correction)."""

    round: int
    trial: int
    status: str
    value: float | None  # the primary metric (None: not measured)
    device_s: float
    slos: Mapping[str, float] = field(default_factory=dict)  # each SLO metric measured
    error_rate: float = 0.0


@dataclass(frozen=True)
class Bounds:
    """The SLOs a confirm step judges: the absolute ones against their bound, those relative
    to the baseline against the baseline's value in the same round."""

    slos: tuple[Slo, ...] = ()
    max_error_rate: float = 0.0

    @classmethod
    def of_study(cls, facts: StudyFacts, spec: TuneSpec) -> Bounds:
        """The SLOs a study fixed (its stored facts), else the spec's; the spec's relative
        ones stay relative."""
        slos = {s.metric: s for s in facts.all_slos or slos_of(spec.slos)}
        for slo in slos_of({}, spec.relative_slos):
            known = slos.get(slo.metric)
            if known is None or not known.relative:
                slos[slo.metric] = slo
        return cls(tuple(slos.values()), spec.max_error_rate)

    @property
    def names(self) -> list[str]:
        return [s.metric for s in self.slos]

    def ratio(self, name: str, run: ConfirmRun, base: ConfirmRun | None) -> float | None:
        """`measured / bound` of SLO `name` in `run`'s round (None: not measured there, or a
        relative one without the round's baseline)."""
        slo = next(s for s in self.slos if s.metric == name)
        value = run.slos.get(name)
        ref = None if base is None else base.slos.get(name)
        if value is None or (slo.relative and ref is None):
            return None
        return slo.ratio(value, ref)


@dataclass(frozen=True)
class Stopping:
    """A sequential step's state (`study/_sequential.py`): its most rounds, the smallest gain
    worth deploying, the candidates it dropped as worse than the defaults, whether it ended
    and why (`gain`, `worse`, `equivalent`, `budget`)."""

    max_rounds: int
    smallest: float = SMALLEST
    dropped: frozenset[int] = frozenset()
    ended: str | None = None


def evaluate(
    runs: Sequence[ConfirmRun],
    numbers: Sequence[int],
    direction: str,
    baseline_number: int | None,
    rounds: int,
    bounds: Bounds | None = None,
    stopping: Stopping | None = None,
) -> dict[str, Any]:
    """Per-candidate statistics, the best candidate, its gain over the baseline, the winner.
    `rounds`: the rounds run so far. With `stopping`, the gain is the sequential look's
    interval and the verdict waits for the step to end; without, a fixed 90% interval over
    `rounds` rounds, judged once they are all in."""
    bounds = bounds or Bounds()
    dropped = stopping.dropped if stopping is not None else frozenset()
    sign = 1.0 if direction == "maximize" else -1.0
    base_runs = {r.round: r for r in runs if r.trial == baseline_number}
    stats: dict[str, dict[str, Any]] = {}
    for number in numbers:
        mine = sorted((r for r in runs if r.trial == number), key=lambda r: r.round)
        values = [r.value for r in mine if r.value is not None]
        median = statistics.median(values) if values else None
        wobble = (max(values) - min(values)) / 2 if values else None
        conservative = None if median is None or wobble is None else median - sign * wobble
        slos = _slo_stats(mine, base_runs, bounds)
        errors = [r.error_rate for r in mine if r.value is not None]
        error_ok = not errors or statistics.median(errors) <= bounds.max_error_rate
        holds = error_ok and all(s["holds"] for s in slos.values())
        stats[str(number)] = {
            "values": [r.value for r in mine],
            "statuses": [r.status for r in mine],
            "median": median,
            "spread": wobble,
            "conservative": conservative,
            "slos": slos,
            "holds": holds,
            "qualified": len(values) == len(mine) == rounds and holds and number not in dropped,
            "device_s": round(sum(r.device_s for r in mine), 2),
        }
        if number in dropped:
            stats[str(number)]["dropped"] = True
    qualified = [n for n in numbers if stats[str(n)]["qualified"]]
    contenders = [n for n in qualified if n != baseline_number]
    best = (
        max(contenders, key=lambda n: (sign * stats[str(n)]["conservative"], -n))
        if contenders
        else None
    )
    base_ok = baseline_number is not None and baseline_number in qualified
    paired = gain(runs, best, baseline_number, direction, stopping)
    winner, verdict = _verdict(best, baseline_number, base_ok, paired, stats, stopping)
    n = len(runs)
    if stopping is None and n < len(numbers) * rounds:  # a verdict needs them all
        winner = None
        verdict = (
            f"no verdict: {n} of the step's {len(numbers) * rounds} runs were measured (it is "
            "still running, or was stopped)"
        )
    elif stopping is not None and stopping.ended is None:
        winner = None
        verdict = (
            f"no verdict: {n} run{'s' if n != 1 else ''} measured so far, of at most "
            f"{stopping.max_rounds} rounds (it is still running, or was stopped)"
        )
    return {
        "candidates": stats,
        "best_candidate": best,
        "winner": winner,
        "gain": {**paired, "verdict": verdict},
    }


def _slo_stats(
    mine: Sequence[ConfirmRun], base_runs: Mapping[int, ConfirmRun], bounds: Bounds
) -> dict[str, dict[str, Any]]:
    """Each SLO's `measured / bound` per round, their median, spread and whether it holds."""
    out: dict[str, dict[str, Any]] = {}
    for name in bounds.names:
        ratios = [
            bounds.ratio(name, r, base_runs.get(r.round)) for r in mine if r.value is not None
        ]
        known = [x for x in ratios if x is not None]
        median = statistics.median(known) if known else None
        out[name] = {
            "ratios": [None if x is None else round(x, 4) for x in ratios],
            "median": None if median is None else round(median, 4),
            "spread": round((max(known) - min(known)) / 2, 4) if known else None,
            "holds": median is not None and median <= 1.0,
        }
    return out


def gain(
    runs: Sequence[ConfirmRun],
    candidate: int | None,
    base: int | None,
    direction: str,
    stopping: Stopping | None = None,
) -> dict[str, Any]:
    """`candidate`'s paired gain over the baseline, round by round, as a 90% interval
    (`mean`, `low`, `high`; absent with fewer than 2 paired rounds); with `stopping`, the
    sequential look's interval at its per-look level and what it decides (`look`)."""
    if candidate is None or base is None or candidate == base:
        return {}
    if stopping is not None:
        gains = paired_gains(runs, candidate, base, direction)
        seen = look(gains, stopping.max_rounds, stopping.smallest)
        out: dict[str, Any] = {"paired": [round(g, 4) for g in gains]}
        return out | seen.as_dict() if seen is not None else out
    return _fixed(paired_gains(runs, candidate, base, direction))


def paired_gains(
    runs: Sequence[ConfirmRun], candidate: int, base: int, direction: str
) -> list[float]:
    """The candidate's gain over the baseline in each round both ran (better = positive)."""
    ratios = paired_ratios(runs, candidate, base).values()
    return [r - 1 if direction == "maximize" else 1 / r - 1 for r in ratios]


def paired_ratios(runs: Sequence[ConfirmRun], candidate: int, base: int) -> dict[int, float]:
    """Round -> the candidate's primary value over the baseline's, in each round both ran
    with a positive value, in the order of `runs`."""
    by_round: dict[int, dict[int, float | None]] = {}
    for r in runs:
        by_round.setdefault(r.round, {})[r.trial] = r.value
    return {
        k: w / b
        for k, v in by_round.items()
        if (w := v.get(candidate)) is not None and (b := v.get(base)) is not None
        and w > 0 and b > 0
    }  # fmt: skip


@dataclass(frozen=True)
class Departure:
    """A round whose paired ratio departs from the candidate's others (`departing_round`)."""

    round: int
    trial: int
    ratio: float  # candidate / baseline of the primary metric in that round
    others: float  # the median of that ratio over the other rounds


def departing_round(
    runs: Sequence[ConfirmRun], candidates: Sequence[int], base: int
) -> Departure | None:
    """The round, the first included, in which one candidate's ratio to the baseline (their
    primary values, as measured side by side) departs from its ratios in every other round
    as `degraded` judges it (`ROUND_FLOOR`, from two other rounds on): an engine that ran at
    a fraction of its speed through a round, or a baseline that did. The furthest one if
    several do; None if none does."""
    found: list[tuple[float, Departure]] = []
    for number in candidates:
        if number == base:
            continue
        ratios = paired_ratios(runs, number, base)
        for k, ratio in ratios.items():
            others = [x for j, x in ratios.items() if j != k]
            if degraded([*others, ratio], floor=ROUND_FLOOR, least=2):
                centre = statistics.median(others)
                far = abs(math.log(ratio / centre))
                found.append((far, Departure(k, number, ratio, centre)))
    return max(found, key=lambda f: f[0])[1] if found else None


def _fixed(paired: list[float]) -> dict[str, Any]:
    """A fixed 90% t interval of the mean paired gain (absent with fewer than 2)."""
    out: dict[str, Any] = {"paired": [round(p, 4) for p in paired]}
    if len(paired) < 2:
        return out
    mean = statistics.fmean(paired)
    half = t_quantile(len(paired) - 1) * statistics.stdev(paired) / math.sqrt(len(paired))
    out.update(mean=round(mean, 4), low=round(mean - half, 4), high=round(mean + half, 4))
    return out


def _verdict(
    best: int | None,
    base: int | None,
    base_ok: bool,
    paired: Mapping[str, Any],
    stats: Mapping[str, Mapping[str, Any]],
    stopping: Stopping | None = None,
) -> tuple[int | None, str]:
    """The winner (what `export` deploys) and the verdict in words."""
    if best is None:
        others = {n: c for n, c in stats.items() if n != str(base)}
        if base_ok:
            return base, (
                f"no config measured better than your defaults: {_nobody(others, 'other ')}; "
                "the winner is the baseline"
            )
        return None, f"no winner: {_nobody(stats)}"
    if base is None:
        return best, f"trial {best} (no baseline measured: no gain to report)"
    span = _span(paired, stopping)
    if not base_ok:
        mine = stats.get(str(base), {})
        if mine.get("holds"):  # it held them where it ran, but failed to run in a round
            return best, f"trial {best}: your defaults did not run in every round{span}"
        missed = _missed(mine)
        mean = paired.get("mean")
        price = "" if mean is None else f"; its gain over them {mean:+.1%}"
        return (
            best,
            f"trial {best}: your defaults miss {missed} over the rounds; it holds them"
            f"{price}{span}",
        )
    low, high = paired.get("low"), paired.get("high")
    if paired.get("decision") == "equivalent" and stopping is not None:  # before a gain
        return base, (
            f"no config is more than {stopping.smallest:.0%} better than your defaults; best "
            f"candidate trial {best}{span}"
        )
    if low is not None and low > 0:
        return best, f"trial {best}: gain {paired['mean']:+.1%} over your defaults{span}"
    if high is not None and high < 0:
        return base, (
            f"no config measured better than your defaults; best candidate trial {best}"
            f"{span}: the defaults are better"
        )
    return base, f"no config measured better than your defaults; best candidate trial {best}{span}"


def _span(paired: Mapping[str, Any], stopping: Stopping | None = None) -> str:
    if paired.get("low") is None:
        n = len(paired.get("paired") or [])
        return f" (only {n} paired round{'s' if n != 1 else ''}: no interval)"
    if stopping is None:
        return f": {paired['low']:+.1%} to {paired['high']:+.1%} ({LEVEL:.0%} interval)"
    n = len(paired.get("paired") or [])
    ended = ENDED.get(stopping.ended or "", "")
    return (
        f": {paired['low']:+.1%} to {paired['high']:+.1%} ({1 - ERROR:.0%} over the step's "
        f"looks; {n} of at most {stopping.max_rounds} rounds{ended})"
    )


# What ended a sequential step, in the verdict's words.
ENDED = {
    "gain": ", ended by the gain's interval above 0",
    "equivalent": ", ended by the interval within the smallest gain worth deploying",
    "worse": ", ended by every candidate measured worse than the defaults",
    "budget": ", ended by the budget of rounds",
}


def _nobody(stats: Mapping[str, Mapping[str, Any]], other: str = "") -> str:
    """Why no candidate qualified: it did not run in every round, or missed a bound (the
    SLOs, or the error-rate bound, which a study without SLOs has too)."""
    failed = any(None in (c.get("values") or [None]) for c in stats.values())
    missed = {_missed(c) for c in stats.values() if not c.get("holds")}
    bounds = "the error-rate bound" if missed == {"the error-rate bound"} else "the SLOs"
    if missed and not failed:
        return f"no {other}candidate held {bounds} over the rounds"
    if not missed:
        return f"no {other}candidate ran in every round"
    return f"no {other}candidate both ran in every round and held {bounds} over the rounds"


def _missed(candidate: Mapping[str, Any]) -> str:
    slos = candidate.get("slos") or {}
    names = [name for name, s in slos.items() if not s.get("holds")]
    return ", ".join(names) or "the error-rate bound"
