"""The confirm step: re-measure the best candidates and the baseline, side by side, and say
plainly whether anything beats the defaults.

One run can crown the wrong config on a noisy host (docs/benchmarks.md, "Verdicts", has this
host's run-to-run spread over fresh engines). After the budget, the top `top` feasible configs
other than the baseline (by their conservative primary objective) and the baseline are each
measured again, `rounds` times, in alternating order (A B base, then base B A, ...), each on a
fresh engine, so that drift hits every candidate alike. The values are the engine's, as
measured: no correction.

- **SLOs are judged per round, then over rounds.** A bound relative to the baseline
  (`--slo p99_ttft_ms=baseline*1.2`) is, in each round, the factor times what the baseline
  measured *in that round* (paired): the baseline can never miss a bound relative to itself,
  and a round on a slow host moves both alike. An absolute bound is the number given. A
  candidate holds an SLO when the median over rounds of `measured / bound` is <= 1 (the
  spread is shown beside it); a p99 over a small workload is about its largest sample, and
  one bad round does not decide. A candidate that failed to run in any round is out.
- **The best candidate** is the qualified non-baseline config with the best conservative
  primary value (median made worse by the spread, half the range).
- **Its gain over the baseline** is an interval from the per-round paired ratios
  (`candidate / baseline - 1`, better = positive): their mean +- Student's t (scipy, 90%
  two-sided) times the standard error. Only an interval above 0 is a gain; the winner (what
  `export` deploys) is then the candidate, else the baseline, and the verdict says which in
  plain words ("no config measured better than your defaults; best candidate trial 4: -3% to
  +5%"). Where the baseline itself misses an absolute SLO over the rounds, a qualified
  candidate wins on that alone.
- **The baseline is never confirmed alone**: with no other feasible config the step runs
  nothing and says so.

The result is kept with the study (user attribute `confirm`, updated after every run, and
`confirm.json` in the study folder); every run keeps its folder under `confirm/`.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from autotune import layout
from autotune.drift import compared
from autotune.engine import EngineConfig
from autotune.measure import Measure, Measurement
from autotune.selection import (
    BASIS_ATTR,
    CONFIRM_ATTR,
    SLOS_ATTR,
    baseline,
    study_objectives,
)
from autotune.space import SearchSpace
from autotune.spec import TuneSpec
from autotune.store import StudyStore, TrialRecord
from autotune.study._harness import Harness, trial_engine_config

CONFIRM_FILE = "confirm.json"
LEVEL = 0.90  # the gain's interval: two-sided


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
    """The SLOs a confirm step judges: absolute bounds, and the factors of those relative to
    the baseline (judged against the baseline's value in the same round)."""

    absolute: Mapping[str, float] = field(default_factory=dict)
    relative: Mapping[str, float] = field(default_factory=dict)  # metric -> factor
    max_error_rate: float = 0.0

    @classmethod
    def of_study(cls, attrs: Mapping[str, Any], spec: TuneSpec) -> Bounds:
        """The bounds a study fixed (its `slos` and `slo_basis` attributes), else the spec's."""
        stored = dict(attrs.get(SLOS_ATTR) or spec.slos)
        basis = attrs.get(BASIS_ATTR) or {}
        relative = {name: float(basis[name]["factor"]) for name in basis if name in stored}
        relative.update({k: v for k, v in spec.relative_slos.items() if k not in relative})
        absolute = {k: float(v) for k, v in stored.items() if k not in relative}
        return cls(absolute, relative, spec.max_error_rate)

    @property
    def names(self) -> list[str]:
        return [*self.absolute, *self.relative]

    def ratio(self, name: str, run: ConfirmRun, base: ConfirmRun | None) -> float | None:
        """`measured / bound` of SLO `name` in `run`'s round (None: not measured there)."""
        value = run.slos.get(name)
        if value is None or not math.isfinite(value):
            return None
        if name in self.relative:
            ref = None if base is None else base.slos.get(name)
            if ref is None or not math.isfinite(ref) or ref <= 0:
                return None
            return value / (self.relative[name] * ref)
        bound = self.absolute[name]
        return value / bound if bound > 0 else 0.0


def t_quantile(df: int, level: float = LEVEL) -> float:
    """Student's t quantile of a two-sided `level` interval with `df` degrees of freedom."""
    from scipy.stats import t as student_t  # here: scipy.stats costs every command 0.5 s

    return float(student_t.ppf(0.5 + level / 2, df))


def choose_candidates(
    records: Sequence[TrialRecord], objectives: Sequence[tuple[str, str]], top: int
) -> list[TrialRecord]:
    """The `top` best feasible trials other than the baseline, by conservative primary value,
    then the baseline if it was measured. Empty when no trial but the baseline is feasible:
    the baseline is never confirmed against itself alone. Trials are compared as
    `autotune.drift.compared` sees them (the runs of one config merged)."""
    records = compared(records)
    metric, direction = objectives[0]
    sign = 1.0 if direction == "maximize" else -1.0
    base = baseline(records)
    others = [t for t in records if t.feasible and (base is None or t.number != base.number)]
    ranked = sorted(others, key=lambda t: (-sign * t.conservative(metric, direction), t.number))
    chosen = ranked[:top]
    if not chosen:
        return []
    return [*chosen, base] if base is not None else chosen


def round_order(numbers: Sequence[int], round_index: int) -> list[int]:
    """Candidates in alternating order: forward in even rounds, backward in odd ones."""
    return list(numbers) if round_index % 2 == 0 else list(reversed(numbers))


def evaluate(
    runs: Sequence[ConfirmRun],
    numbers: Sequence[int],
    direction: str,
    baseline_number: int | None,
    rounds: int,
    bounds: Bounds | None = None,
) -> dict[str, Any]:
    """Per-candidate statistics, the best candidate, its gain over the baseline, the winner."""
    bounds = bounds or Bounds()
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
            "qualified": len(values) == len(mine) == rounds and holds,
            "device_s": round(sum(r.device_s for r in mine), 2),
        }
    qualified = [n for n in numbers if stats[str(n)]["qualified"]]
    contenders = [n for n in qualified if n != baseline_number]
    best = (
        max(contenders, key=lambda n: (sign * stats[str(n)]["conservative"], -n))
        if contenders
        else None
    )
    base_ok = baseline_number is not None and baseline_number in qualified
    paired = gain(runs, best, baseline_number, direction)
    winner, verdict = _verdict(best, baseline_number, base_ok, paired, stats)
    if len(runs) < len(numbers) * rounds:  # kept after every run: a verdict needs them all
        winner = None
        verdict = (
            f"no verdict: {len(runs)} of the step's {len(numbers) * rounds} runs were measured "
            "(it is still running, or was stopped)"
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
    runs: Sequence[ConfirmRun], candidate: int | None, base: int | None, direction: str
) -> dict[str, Any]:
    """`candidate`'s paired gain over the baseline, round by round, as a 90% interval
    (`mean`, `low`, `high`; absent with fewer than 2 paired rounds)."""
    if candidate is None or base is None or candidate == base:
        return {}
    by_round: dict[int, dict[int, float | None]] = {}
    for r in runs:
        by_round.setdefault(r.round, {})[r.trial] = r.value
    paired = []
    for values in by_round.values():
        w, b = values.get(candidate), values.get(base)
        if w is None or b is None or w <= 0 or b <= 0:
            continue
        paired.append(w / b - 1 if direction == "maximize" else b / w - 1)
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
    span = _span(paired)
    if not base_ok:
        mine = stats.get(str(base), {})
        if mine.get("holds"):  # it held them where it ran, but failed to run in a round
            return best, f"trial {best}: your defaults did not run in every round{span}"
        missed = _missed(mine)
        return (
            best,
            f"trial {best}: your defaults miss {missed} over the rounds; it holds them{span}",
        )
    low, high = paired.get("low"), paired.get("high")
    if low is not None and low > 0:
        return best, f"trial {best}: gain {paired['mean']:+.1%} over your defaults{span}"
    if high is not None and high < 0:
        return base, (
            f"no config measured better than your defaults; best candidate trial {best}"
            f"{span}: the defaults are better"
        )
    return base, f"no config measured better than your defaults; best candidate trial {best}{span}"


def _span(paired: Mapping[str, Any]) -> str:
    if paired.get("low") is None:
        n = len(paired.get("paired") or [])
        return f" (only {n} paired round{'s' if n != 1 else ''}: no interval)"
    return f": {paired['low']:+.1%} to {paired['high']:+.1%} ({LEVEL:.0%} interval)"


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


@dataclass
class Confirmer:
    """Runs the confirm step of a study whose trials are stored."""

    spec: TuneSpec
    space: SearchSpace
    store: StudyStore
    measure: Measure
    on_run: Callable[[int, int, int, Measurement], None] = lambda r, n, total, m: None
    # The engine config of a candidate's params, on devices leased as the trials' were
    # (`Harness.leased`); None: the host as a whole.
    configure: Callable[[dict[str, Any]], AbstractContextManager[EngineConfig]] | None = None

    @classmethod
    def of(
        cls,
        harness: Harness,
        store: StudyStore,
        on_run: Callable[[int, int, int, Measurement], None] = lambda r, n, total, m: None,
    ) -> Confirmer:
        """The confirm step of `harness`'s study: its measure, on devices leased as the trials'
        were. Its runs are summarized (goodput) within the bounds the study's baseline fixed,
        as the trials' were, so the harness adopts them from the store first."""
        harness.bounds.adopt(store.study_attrs(harness.spec.study))
        return cls(
            harness.spec,
            harness.space,
            store,
            harness.measure,
            on_run=on_run,
            configure=harness.leased,
        )

    def run(self, top: int, rounds: int) -> dict[str, Any]:
        name = self.spec.study
        records = self.store.trials(name)
        attrs = self.store.study_attrs(name)
        bounds = Bounds.of_study(attrs, self.spec)
        objectives = study_objectives(attrs)
        metric, direction = objectives[0]
        chosen = choose_candidates(records, objectives, top)
        numbers = [t.number for t in chosen]
        base = baseline(records)
        base_number = base.number if base is not None else None
        result: dict[str, Any] = {
            "metric": metric,
            "direction": direction,
            "top": top,
            "rounds": rounds if chosen else 0,
            "order": [round_order(numbers, k) for k in range(rounds)] if chosen else [],
            "baseline": base_number,
            "started": _now(),
        }
        runs: list[ConfirmRun] = []
        if not chosen:
            result.update(_nothing_to_confirm(base))
            result["finished"] = _now()
            self._keep(result)
            return result
        by_number = {t.number: t for t in chosen}
        # A second confirm step keeps the first's folders.
        stamp = result["started"].replace(":", "").replace("+0000", "Z")
        for k in range(rounds):
            for number in round_order(numbers, k):
                trial = by_number[number]
                folder = layout.confirm_run_dir(self.spec.study_dir, stamp, k, number)
                with self._configured(trial.params) as config:
                    m = self.measure(config, folder)
                runs.append(self._run(k, number, m, metric, bounds))
                self.on_run(k, number, len(runs), m)
                self._keep(
                    {**result, **evaluate(runs, numbers, direction, base_number, rounds, bounds)}
                )
        final = {**result, **evaluate(runs, numbers, direction, base_number, rounds, bounds)}
        final["finished"] = _now()
        self._keep(final)
        return final

    def _configured(self, params: dict[str, Any]) -> AbstractContextManager[EngineConfig]:
        if self.configure is not None:
            return self.configure(params)
        return nullcontext(trial_engine_config(self.spec, self.space, params))

    def _run(self, k: int, number: int, m: Measurement, metric: str, bounds: Bounds) -> ConfirmRun:
        """One run's values, as the engine measured them."""
        if not m.ok or m.summary is None:
            return ConfirmRun(k, number, m.status, None, m.device_s)
        summary = m.summary
        value = summary.metric(metric)
        slos = {name: summary.metric(name) for name in bounds.names}
        error_rate = summary.metric("error_rate")
        return ConfirmRun(
            k,
            number,
            m.status,
            value if math.isfinite(value) else None,
            m.device_s,
            slos,
            error_rate if math.isfinite(error_rate) else 0.0,
        )

    def _keep(self, result: dict[str, Any]) -> None:
        """After every run: a crash loses no confirm measurement."""
        self.store.set_study_attr(self.spec.study, CONFIRM_ATTR, result)
        path = self.spec.study_dir / CONFIRM_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=1))


def _nothing_to_confirm(base: TrialRecord | None) -> dict[str, Any]:
    """The result when no config but the baseline met the SLOs in the search: nothing is run."""
    if base is not None and base.feasible:
        verdict = (
            "no config measured better than your defaults: no trial but the baseline met the "
            "SLOs; the winner is the baseline (not re-measured)"
        )
        return {"candidates": {}, "best_candidate": None, "winner": base.number,
                "gain": {"verdict": verdict}}  # fmt: skip
    verdict = "no winner: no measured trial met the SLOs; nothing was re-measured"
    return {"candidates": {}, "best_candidate": None, "winner": None, "gain": {"verdict": verdict}}


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
