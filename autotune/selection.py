"""Which measured trials are best: the feasible Pareto front, the user's pick from it, and
the confirm step's winner. Pure functions over stored trials: `export`, `show` and the
dashboard use them without the study machinery."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

from autotune.spec import DEFAULT_OBJECTIVES
from autotune.store import TrialRecord

Pick = Literal["max-throughput", "min-ttft", "min-tpot", "knee"]
PICKS: tuple[str, ...] = ("max-throughput", "min-ttft", "min-tpot", "knee")
CONFIRM_ATTR = "confirm"  # the study attribute the confirm step keeps its result in


class SelectionError(Exception):
    """No trial fits the request; the message says why."""


def study_objectives(attrs: dict[str, Any]) -> list[tuple[str, str]]:
    """A stored study's (metric, direction) objectives; the defaults if it names none."""
    stored = attrs.get("objectives") or []
    return [(o["metric"], o["direction"]) for o in stored] or list(DEFAULT_OBJECTIVES)


def _dominates(a: Sequence[float], b: Sequence[float], signs: Sequence[float]) -> bool:
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
            _dominates(points[o.number], points[t.number], signs)
            for o in feasible
            if o.number != t.number
        )
    ]
    return sorted(front, key=lambda t: -t.metric("output_throughput"))


def pick(
    trials: Sequence[TrialRecord],
    objectives: Sequence[tuple[str, str]],
    how: str = "max-throughput",
    number: int | None = None,
) -> TrialRecord:
    """The trial to export: by number, or by a rule over the feasible Pareto front.

    Rules compare conservative values: a metric made worse by its spread over the trial's
    repeated runs (the metric itself for a single run), so a lucky run does not win."""
    if number is not None:
        return _by_number(trials, number)
    front = pareto_front(trials, objectives)
    if not front:
        raise SelectionError(
            "no measured trial meets every constraint (SLOs, error rate); "
            "use --trial N to export a specific trial"
        )
    how = how or "max-throughput"
    if how == "max-throughput":
        return max(front, key=lambda t: t.conservative("output_throughput", "maximize"))
    if how == "min-ttft":
        return min(front, key=lambda t: t.conservative("p99_ttft_ms", "minimize"))
    if how == "min-tpot":
        return min(front, key=lambda t: t.conservative("p99_tpot_ms", "minimize"))
    if how == "knee":
        return knee(front, objectives)
    raise SelectionError(f"unknown pick {how!r}; choose one of: {', '.join(PICKS)}")


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


def confirmed_winner(attrs: dict[str, Any]) -> int | None:
    """The trial the finished confirm step chose, if the study has one."""
    confirm = attrs.get(CONFIRM_ATTR)
    if not isinstance(confirm, dict) or "finished" not in confirm:
        return None
    winner = confirm.get("winner")
    return int(winner) if isinstance(winner, int) else None
