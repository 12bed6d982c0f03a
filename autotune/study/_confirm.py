"""The confirm step: re-measure the front's best configs and the baseline, side by side.

One run can crown the wrong config on a noisy machine (measured here: a config drifted 26%
over half an hour, while vLLM's defaults served within 5-7% of the best). After the budget,
the top `top` configs of the feasible front (by their conservative primary objective) and the
baseline are each measured again, `rounds` times, in alternating order (A B C base, then
base C B A, ...), each on a fresh engine, so that drift hits every candidate alike.

- The winner is the candidate that was feasible in every round with the best *conservative*
  primary value: the median over rounds made worse by the spread (half the range).
- The winner's gain over the baseline is an interval from the per-round paired ratios
  (`winner / baseline - 1`, better = positive): their mean +- Student's t (90%, two-sided)
  times the standard error. An interval that includes 0 is reported as "no significant
  gain", never as a percentage.

The result is kept with the study (user attribute `confirm`, updated after every run, and
`confirm.json` in the study folder); every run keeps its folder under `confirm/`.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import statistics
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from autotune import layout
from autotune.drift import compared, engine_speed, scaled, scaled_constraint
from autotune.engine import EngineConfig
from autotune.selection import (
    CONFIRM_ATTR,
    InfeasibleError,
    baseline,
    pareto_front,
    study_objectives,
)
from autotune.space import SearchSpace
from autotune.spec import TuneSpec
from autotune.store import StudyStore, TrialRecord
from autotune.study._harness import trial_engine_config
from autotune.study._measure import Measure, Measurement
from autotune.study._objectives import constraint_values
from autotune.study._slos import adopt_bounds

CONFIRM_FILE = "confirm.json"

# Student's t, 95th percentile (a two-sided 90% interval), by degrees of freedom.
_T95 = {1: 6.314, 2: 2.920, 3: 2.353, 4: 2.132, 5: 2.015, 6: 1.943, 7: 1.895, 8: 1.860, 9: 1.833}


@dataclass(frozen=True)
class ConfirmRun:
    """What one candidate measured in one round."""

    round: int
    trial: int
    status: str
    value: float | None  # the primary metric (None: not measured)
    feasible: bool
    device_s: float


def t95(df: int) -> float:
    """Student's t quantile 0.95 for `df` degrees of freedom (rounded up beyond the table)."""
    if df in _T95:
        return _T95[df]
    return 1.812 if df <= 10 else 1.725 if df <= 20 else 1.697 if df <= 30 else 1.645


def choose_candidates(
    records: Sequence[TrialRecord], objectives: Sequence[tuple[str, str]], top: int
) -> list[TrialRecord]:
    """The `top` best front trials by conservative primary value (then, where the front is
    smaller, the next best feasible trials: a one-objective front has one point), and the
    baseline if it was measured. Trials are compared as `autotune.drift.compared` sees them:
    as at the study's start, the runs of one config merged."""
    records = compared(records)
    metric, direction = objectives[0]
    sign = 1.0 if direction == "maximize" else -1.0

    def rank(t: TrialRecord) -> tuple[float, int]:
        return -sign * t.conservative(metric, direction), t.number

    front = sorted(pareto_front(records, objectives), key=rank)
    if not front:
        raise InfeasibleError("no measured trial meets every constraint: nothing to confirm")
    on_front = {t.number for t in front}
    rest = sorted((t for t in records if t.feasible and t.number not in on_front), key=rank)
    chosen = [*front, *rest][:top]
    base = baseline(records)
    if base is not None and all(t.number != base.number for t in chosen):
        chosen.append(base)
    return chosen


def round_order(numbers: Sequence[int], round_index: int) -> list[int]:
    """Candidates in alternating order: forward in even rounds, backward in odd ones."""
    return list(numbers) if round_index % 2 == 0 else list(reversed(numbers))


def evaluate(
    runs: Sequence[ConfirmRun],
    numbers: Sequence[int],
    direction: str,
    baseline_number: int | None,
    rounds: int,
) -> dict[str, Any]:
    """Per-candidate statistics, the conservative winner and its gain over the baseline."""
    sign = 1.0 if direction == "maximize" else -1.0
    stats: dict[str, dict[str, Any]] = {}
    for number in numbers:
        mine = [r for r in runs if r.trial == number]
        values = [r.value for r in mine if r.value is not None]
        ok = len(values) == len(mine) == rounds and all(r.feasible for r in mine)
        median = statistics.median(values) if values else None
        wobble = (max(values) - min(values)) / 2 if values else None
        conservative = None if median is None or wobble is None else median - sign * wobble
        stats[str(number)] = {
            "values": [r.value for r in sorted(mine, key=lambda r: r.round)],
            "statuses": [r.status for r in sorted(mine, key=lambda r: r.round)],
            "median": median,
            "spread": wobble,
            "conservative": conservative,
            "feasible_rounds": sum(r.feasible for r in mine),
            "qualified": ok,
            "device_s": round(sum(r.device_s for r in mine), 2),
        }
    qualified = [n for n in numbers if stats[str(n)]["qualified"]]
    winner = (
        max(qualified, key=lambda n: (sign * stats[str(n)]["conservative"], -n))
        if qualified
        else None
    )
    return {
        "candidates": stats,
        "winner": winner,
        "gain": gain(runs, winner, baseline_number, direction),
    }


def gain(
    runs: Sequence[ConfirmRun], winner: int | None, base: int | None, direction: str
) -> dict[str, Any]:
    """The winner's paired gain over the baseline, round by round, as a 90% interval."""
    if winner is None:
        return {"verdict": "no winner: no candidate held the constraints in every round"}
    if base is None:
        return {"verdict": "no baseline measured: no gain to report"}
    if winner == base:
        return {"verdict": "the baseline is the winner: no gain over what runs today"}
    by_round: dict[int, dict[int, float | None]] = {}
    for r in runs:
        by_round.setdefault(r.round, {})[r.trial] = r.value
    paired = []
    for values in by_round.values():
        w, b = values.get(winner), values.get(base)
        if w is None or b is None or w <= 0 or b <= 0:
            continue
        paired.append(w / b - 1 if direction == "maximize" else b / w - 1)
    out: dict[str, Any] = {"paired": [round(p, 4) for p in paired]}
    if len(paired) < 2:
        out["verdict"] = "no significant gain (fewer than 2 paired rounds)"
        return out
    mean = statistics.fmean(paired)
    half = t95(len(paired) - 1) * statistics.stdev(paired) / math.sqrt(len(paired))
    out.update(mean=round(mean, 4), low=round(mean - half, 4), high=round(mean + half, 4))
    if mean - half > 0:
        out["verdict"] = f"gain {mean:+.1%} (90% interval {mean - half:+.1%} to {mean + half:+.1%})"
    elif mean + half < 0:
        out["verdict"] = (
            f"the baseline is better: {mean:+.1%} "
            f"(90% interval {mean - half:+.1%} to {mean + half:+.1%})"
        )
    else:
        out["verdict"] = "no significant gain (the 90% interval includes 0)"
    return out


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

    def run(self, top: int, rounds: int) -> dict[str, Any]:
        name = self.spec.study
        records = self.store.trials(name)
        attrs = self.store.study_attrs(name)
        adopt_bounds(self.spec, attrs)  # the bounds the baseline fixed (a standalone confirm)
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
            "rounds": rounds,
            "order": [round_order(numbers, k) for k in range(rounds)],
            "baseline": base_number,
            "started": _now(),
        }
        runs: list[ConfirmRun] = []
        by_number = {t.number: t for t in chosen}
        # A second confirm step keeps the first's folders.
        stamp = result["started"].replace(":", "").replace("+0000", "Z")
        for k in range(rounds):
            for number in round_order(numbers, k):
                trial = by_number[number]
                folder = layout.confirm_run_dir(self.spec.study_dir, stamp, k, number)
                with self._configured(trial.params) as config:
                    m = self.measure(config, folder)
                runs.append(self._run(k, number, m, metric))
                self.on_run(k, number, len(runs), m)
                self._keep({**result, **evaluate(runs, numbers, direction, base_number, rounds)})
        final = {**result, **evaluate(runs, numbers, direction, base_number, rounds)}
        final["finished"] = _now()
        self._keep(final)
        return final

    def _configured(self, params: dict[str, Any]) -> AbstractContextManager[EngineConfig]:
        if self.configure is not None:
            return self.configure(params)
        return nullcontext(trial_engine_config(self.spec, self.space, params))

    def _run(self, k: int, number: int, m: Measurement, metric: str) -> ConfirmRun:
        """One run's value and feasibility; a probed run's as at the probe's reference speed
        (a fixed rate was sent at rate x speed: autotune.study._speed)."""
        speed = engine_speed(m.engine) or 1.0
        value = m.summary.metric(metric) if m.ok and m.summary is not None else None
        if value is not None:
            value = scaled(metric, value, speed)
        constraints = constraint_values(
            m.summary, self.spec.slos, self.spec.max_error_rate, m.status
        )
        feasible = m.ok and all(
            scaled_constraint(name, v, speed) <= 0 for name, v in constraints.items()
        )
        return ConfirmRun(k, number, m.status, value, feasible, m.device_s)

    def _keep(self, result: dict[str, Any]) -> None:
        """After every run: a crash loses no confirm measurement."""
        self.store.set_study_attr(self.spec.study, CONFIRM_ATTR, result)
        path = self.spec.study_dir / CONFIRM_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=1))


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
