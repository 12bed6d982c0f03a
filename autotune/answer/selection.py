"""Which measured trials are best: the feasible Pareto front, the user's pick from it, and
the confirm step's winner. Pure functions over stored trials: `export`, `show` and the
dashboard use them without the study machinery."""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from autotune.answer.repeats import Noise, compared, noise
from autotune.store import StudyFacts, TrialRecord
from autotune.vocab.numbers import readable
from autotune.vocab.objectives import DEFAULT_OBJECTIVES
from autotune.vocab.slo import AGREEMENT, ERROR_RATE, FAILED, NOT_SLOS, OOM, percentile_of

Pick = Literal["max-throughput", "min-ttft", "min-tpot", "knee"]
PICKS: tuple[str, ...] = ("max-throughput", "min-ttft", "min-tpot", "knee")
# Two configs whose first objective is within 2% tie: less than one run's spread on a shared
# host (docs/benchmarks.md, "Verdicts"), so no single measurement could tell them apart.
TIE = 0.02
# How far inside an SLO bound a picked config must measure, in sd of the mean of its runs: a
# config whose true value sits at its bound measures this far inside it 1 time in 10
# (one-sided 90%, normal quantile). The sd is the study's own estimate from a few repeated
# runs, so a margin is read on Student's t with the estimate's degrees of freedom and stated
# as the normal sd of the same confidence (`normal_equivalent`): with 2 df a config must
# measure 1.89 sd inside, not 1.28 (docs/metrics.md, "SLOs clear of the measured noise").
MARGIN_Z = 1.2816
# Where no feasible config holds MARGIN_Z, the pick is among those that hold the highest of
# these any does (80%, 70% one-sided), then among all feasible: a config measured clear of
# its bound at 80% misses it less often than one at 55%, and the header says which held.
FALLBACK_Z = (0.8416, 0.5244)


class SelectionError(Exception):
    """No trial fits the request; the message says why."""


class InfeasibleError(SelectionError):
    """The study has measured trials, but none meets every constraint; `closest` is the
    number of the one closest to them (each command says what it can do with it)."""

    def __init__(self, message: str, closest: int) -> None:
        super().__init__(message)
        self.closest = closest


def study_objectives(facts: StudyFacts) -> list[tuple[str, str]]:
    """A stored study's (metric, direction) objectives; the defaults if it names none."""
    return [(o.metric, o.direction) for o in facts.objectives] or list(DEFAULT_OBJECTIVES)


def judged_percentile(facts: StudyFacts) -> str:
    """The latency percentile the study judges: its SLOs', else its objectives' (p50, p90 or
    p99), p99 where neither names one. Tables, progress lines and export's header show TTFT
    and TPOT at it."""
    named = [*(s.metric for s in facts.all_slos), *(m for m, _ in study_objectives(facts))]
    return next((q for m in named if (q := percentile_of(m)) is not None), "p99")


def dominates(a: Sequence[float], b: Sequence[float], signs: Sequence[float]) -> bool:
    """Whether `a` is at least as good as `b` on every objective and better on one (`signs`:
    +1 where larger is better, -1 where smaller is)."""
    at_least = all(s * x >= s * y for x, y, s in zip(a, b, signs, strict=True))
    better = any(s * x > s * y for x, y, s in zip(a, b, signs, strict=True))
    return at_least and better


def pareto_front(
    trials: Sequence[TrialRecord], objectives: Sequence[tuple[str, str]]
) -> list[TrialRecord]:
    """Feasible measured trials that no other feasible trial dominates, best throughput first.

    `objectives` are (metric, direction) pairs; the metrics are read from each trial's
    stored measurements, so the front is the same whatever the storage.
    """
    feasible = [t for t in trials if t.feasible]
    signs = [1.0 if d == "maximize" else -1.0 for _, d in objectives]
    points = {t.number: [t.metric(m) for m, _ in objectives] for t in feasible}
    front = [
        t
        for t in feasible
        if not any(
            dominates(points[o.number], points[t.number], signs)
            for o in feasible
            if o.number != t.number
        )
    ]
    return sorted(front, key=lambda t: -t.metric("output_throughput"))


def feasible_front(trials: Sequence[TrialRecord], facts: StudyFacts) -> list[TrialRecord]:
    """The feasible Pareto front as export and the confirm step judge it: a config's runs
    merged (`repeats.compared`), so a config read feasible once and past a bound when measured
    again is not on it. Empty: `tune` exits 3 (nothing met the constraints)."""
    return pareto_front(compared(trials), study_objectives(facts))


def normal_equivalent(z: float, df: int) -> float:
    """A margin of `z` estimated sd, where the sd rests on `df` degrees of freedom, as the
    normal z of the same one-sided confidence: Phi^-1(T_df(z)), below `z` for any finite df
    (inf stays inf)."""
    if not math.isfinite(z) or df <= 0:
        return z
    from scipy.special import ndtri, stdtr  # here: not every command needs scipy

    # each tail from its own side, so that a wide margin stays finite (1 - 1e-17 is 1.0)
    return float(-ndtri(stdtr(df, -z)) if z >= 0 else ndtri(stdtr(df, z)))


def margin(trial: TrialRecord, noise: Mapping[str, Noise], relative: Collection[str] = ()) -> float:
    """How far inside its tightest SLO bound `trial` is, in sd of the mean of its runs, as the
    normal sd of the same confidence where the noise rests on few runs (`normal_equivalent`):
    inf where no SLO's noise was measured. The baseline is not judged against the `relative`
    SLOs: it defines them."""
    out = math.inf
    for name, c in judged_slos(trial, noise, relative):
        # log(measured / bound) = log1p(c), over the sd of the mean of its runs
        z = -math.log1p(c) / (noise[name].sd / math.sqrt(trial.runs))
        out = min(out, normal_equivalent(z, noise[name].df))
    return out


def judged_slos(
    trial: TrialRecord, noise: Mapping[str, Noise], relative: Collection[str] = ()
) -> Iterator[tuple[str, float]]:
    """(SLO, constraint value) of each SLO of `trial` that a margin judges: one whose noise
    was measured, not the baseline's own relative ones (it defines them)."""
    for name, c in trial.constraints.items():
        if name in NOT_SLOS or name not in noise or noise[name].sd <= 0 or c <= -1:
            continue
        if name in relative and trial.role == "baseline":
            continue
        yield name, c


def slo_noise(records: Sequence[TrialRecord]) -> dict[str, Noise]:
    """The run-to-run noise of each SLO's metric, from the study's repeated runs."""
    names = {n for t in records for n in t.constraints if n not in NOT_SLOS}
    return noise(records, sorted(names))


def clear_of_noise(
    trials: Sequence[TrialRecord],
    noise: Mapping[str, Noise],
    relative: Collection[str] = (),
    z: float = MARGIN_Z,
) -> list[TrialRecord] | None:
    """The feasible trials that hold every SLO by `z` sd of the mean of their runs (a pick
    among them does not flip to a config that truly misses one); None where none does, or
    where no feasible trial has an SLO whose noise was measured (nothing to hold a margin
    against)."""
    return _held(_margins(trials, noise, relative), (z,))


def surest(
    trials: Sequence[TrialRecord], noise: Mapping[str, Noise], relative: Collection[str] = ()
) -> list[TrialRecord] | None:
    """The trials `clear_of_noise` holds at `MARGIN_Z`, else at the highest of `FALLBACK_Z`
    that any holds; None where none holds even the lowest (a pick is then among all
    feasible trials)."""
    return _held(_margins(trials, noise, relative), (MARGIN_Z, *FALLBACK_Z))


def _margins(
    trials: Sequence[TrialRecord], noise: Mapping[str, Noise], relative: Collection[str]
) -> list[tuple[TrialRecord, float]]:
    """Each feasible trial with its margin (`margin`), worked out once for every step."""
    return [(t, margin(t, noise, relative)) for t in trials if t.feasible]


def _held(
    margins: Sequence[tuple[TrialRecord, float]], steps: Sequence[float]
) -> list[TrialRecord] | None:
    """The trials at the first of `steps` that any holds; None where none does, or where no
    margin was measured at all."""
    if not any(m < math.inf for _, m in margins):
        return None
    for z in steps:
        if held := [t for t, m in margins if m >= z]:
            return held
    return None


def pick(
    trials: Sequence[TrialRecord],
    objectives: Sequence[tuple[str, str]],
    how: str = "max-throughput",
    number: int | None = None,
    noise: Mapping[str, Noise] | None = None,
    relative: Collection[str] = (),
) -> TrialRecord:
    """The trial to export: by number, or by a rule over the feasible Pareto front.

    Rules compare conservative values: a metric made worse by its spread over the trial's
    repeated runs (the metric itself for a single run), so a lucky run does not win. With the
    study's measured `noise`, the front is that of the trials whose SLOs hold clear of it
    (`surest`: at 90%, else at the highest fallback any holds; the `relative` SLOs bind all
    but the baseline), where any do."""
    if number is not None:
        return _by_number(trials, number)
    pool = surest(trials, noise or {}, relative) or trials
    return best_of(trials, pool, objectives, how)


def best_of(
    trials: Sequence[TrialRecord],
    pool: Sequence[TrialRecord],
    objectives: Sequence[tuple[str, str]],
    how: str = "max-throughput",
) -> TrialRecord:
    """The rule `how`'s trial over the feasible Pareto front of `pool` (the trials `pick`
    holds clear of the noise, else all); where it has none, the error names the trial of
    `trials` closest to the constraints."""
    front = pareto_front(pool, objectives)
    if not front:
        near = closest(trials)
        if near is None:
            raise SelectionError("no trial of this study was measured: nothing to export")
        raise InfeasibleError(
            f"no measured trial meets every constraint; the closest is trial {near.number} "
            f"({miss_text(near) or 'error rate'})",
            near.number,
        )
    how = how or "max-throughput"
    if how == "max-throughput":
        best = max(front, key=lambda t: t.conservative("output_throughput", "maximize"))
        return with_headroom(best, pool, objectives[0])
    if how == "min-ttft":
        return min(front, key=lambda t: t.conservative("p99_ttft_ms", "minimize"))
    if how == "min-tpot":
        return min(front, key=lambda t: t.conservative("p99_tpot_ms", "minimize"))
    if how == "knee":
        return knee(front, objectives)
    raise SelectionError(f"unknown pick {how!r}; choose one of: {', '.join(PICKS)}")


def headroom(trial: TrialRecord) -> float:
    """How far the trial is inside its tightest SLO bound (`1 - measured / bound`; inf
    without SLOs). Not the error rate: that is a bound on failures, not on latency."""
    slack = [-c for name, c in trial.constraints.items() if name not in NOT_SLOS]
    return min(slack, default=math.inf)


def with_headroom(
    best: TrialRecord, trials: Sequence[TrialRecord], first: tuple[str, str]
) -> TrialRecord:
    """Among the feasible trials whose first objective ties with `best`'s (within `TIE`,
    conservative values), the one farthest inside its SLO bounds: a gain inside the noise is
    none, while a config at its bound misses it on the next run. `best` itself without SLOs."""
    metric, direction = first
    if headroom(best) == math.inf:
        return best
    ref = best.conservative(metric, direction)
    sign = 1.0 if direction == "maximize" else -1.0

    def ties(t: TrialRecord) -> bool:
        return sign * (ref - t.conservative(metric, direction)) <= TIE * abs(ref)

    tied = [t for t in trials if t.feasible and ties(t)]
    return max(tied, key=lambda t: (round(headroom(t), 6), t.number == best.number, -t.number))


def knee(front: Sequence[TrialRecord], objectives: Sequence[tuple[str, str]]) -> TrialRecord:
    """The front's point nearest the ideal point, each objective scaled to [0, 1] on the front."""
    scaled: dict[int, list[float]] = {t.number: [] for t in front}
    for metric, direction in objectives:
        values = [t.metric(metric) for t in front]
        low, high = min(values), max(values)
        for t, v in zip(front, values, strict=True):
            x = 0.0 if high == low else (v - low) / (high - low)
            scaled[t.number].append(1.0 - x if direction == "maximize" else x)
    return min(front, key=lambda t: (math.hypot(*scaled[t.number]), t.number))


def _by_number(trials: Sequence[TrialRecord], number: int) -> TrialRecord:
    for t in trials:
        if t.number == number:
            if not t.config:
                raise SelectionError(f"trial {number} has no engine config to export")
            return t
    raise SelectionError(f"no trial {number} in this study")


def baseline(trials: Sequence[TrialRecord]) -> TrialRecord | None:
    """The measured baseline trial (vLLM's defaults), if there is one."""
    return next((t for t in trials if t.role == "baseline" and t.measured), None)


def confirm_slo_text(candidate: Mapping[str, Any]) -> str:
    """A confirm candidate's SLOs on one line: each one's median `measured / bound` over
    the rounds with its spread, `ok` or `MISS` (autotune.study._confirm); `-` without SLOs."""
    slos = candidate.get("slos") or {}
    parts = []
    for name, s in slos.items():
        median, spread = s.get("median"), s.get("spread")
        if median is None:
            parts.append(f"{name} -")
            continue
        wobble = f" ±{spread:.2f}" if spread else ""
        parts.append(f"{name} {median:.2f}{wobble} {'ok' if s.get('holds') else 'MISS'}")
    return ", ".join(parts) or "-"


@dataclass(frozen=True)
class Miss:
    """By how much a measured trial misses one constraint."""

    name: str  # an SLO's metric, "error_rate", or "agreement_tokens" (a lower bound)
    measured: float
    bound: float
    over: float  # the relative violation, > 0: measured / bound - 1 (below: 1 - measured / bound)

    @property
    def below(self) -> bool:
        return self.name == "agreement_tokens"


def answers_otherwise(trial: TrialRecord) -> bool:
    """Measured and infeasible, its worst miss the accuracy gate's (`--min-agreement`), not an
    SLO's: how `show` and the dashboard word it."""
    worst = next(iter(misses(trial)), None)
    return worst is not None and worst.below


def misses(trial: TrialRecord) -> list[Miss]:
    """The constraints `trial` violates, worst first (from its stored constraint values:
    an SLO's is `measured / bound - 1`, see autotune.measure._objectives)."""
    out = []
    for name, value in trial.constraints.items():
        if value <= 0 or name in (FAILED, OOM):
            continue
        if name == AGREEMENT:  # min_agreement - agreement_tokens (1 where not measured)
            agreed = trial.metric("agreement_tokens")
            if agreed != agreed:
                out.append(Miss("agreement_tokens", agreed, math.nan, value))
            else:
                out.append(
                    Miss("agreement_tokens", agreed, agreed + value, value / (agreed + value))
                )
            continue
        measured = trial.metric(name)
        if name == ERROR_RATE:
            out.append(Miss(name, measured, measured - value, value))
        else:
            out.append(Miss(name, measured, measured / (1.0 + value), value))
    return sorted(out, key=lambda m: -m.over)


def closest(trials: Sequence[TrialRecord]) -> TrialRecord | None:
    """The measured trial with the smallest total relative violation: what to look at (and,
    with `export --allow-infeasible`, to deploy) when nothing is feasible."""
    measured = [t for t in trials if t.measured]
    if not measured:
        return None
    return min(measured, key=lambda t: (sum(m.over for m in misses(t)), t.number))


def miss_text(trial: TrialRecord) -> str:
    """`p99_ttft_ms 5,012 > 2,000 (+151%), agreement_tokens 0.60 < 0.95 (-37%)`: the
    trial's misses on one line."""
    return ", ".join(_one_miss(m) for m in misses(trial))


def _one_miss(m: Miss) -> str:
    if m.below and m.measured != m.measured:
        return f"{m.name} not measured (its engine did not answer the reference prompts)"
    if m.below:
        return f"{m.name} {m.measured:.2f} < {m.bound:.2f} ({-m.over:+.0%})"
    return f"{m.name} {readable(m.measured)} > {readable(m.bound)} ({m.over:+.0%})"
