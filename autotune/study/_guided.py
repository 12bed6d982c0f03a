"""A structure-aware search for the one objective the user deploys: pattern search from the
baseline along what is known of vLLM's knobs.

What it uses, that a general-purpose sampler does not know:

- **the baseline is a good start**: vLLM's defaults serve well; the best config is usually a
  few moves away from them, so the search starts there and refines, instead of spending its
  first trials on random points;
- **memory-monotone directions**: a knob whose larger value takes more memory (max_num_seqs,
  max_num_batched_tokens, gpu_memory_utilization, the KV size) buys throughput until memory or
  latency runs out; such a move is tried first when the objective is a throughput;
- **the failure boundary already learned**: a move whose neighbour in the same direction failed
  (OOM, a broken SLO) is tried last, and proposals the gate rules out cost nothing and are
  remembered as tried points;
- **scales**: moves are made in the parameter's own scale (log where the space says so), and
  their size halves when no move around the incumbent improves it (local refinement), so the
  search ends off any grid, at the resolution of the parameter's step.

Stateless: every proposal is derived from the study's trials (so it works the same on resume,
with several lanes and with several workers). The incumbent is the best feasible trial by the
study's (first) objective; a point is "tried" once any trial (running, measured, skipped) has
its params. When every move at the smallest size has been tried, it samples at random.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.samplers import BaseSampler, RandomSampler
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

FIRST_STEP = 0.25  # a move's first size, as a share of the parameter's (log) range
MIN_STEP = 1 / 64  # below this the neighbourhood is exhausted


@dataclass(frozen=True)
class _Point:
    number: int
    params: dict[str, Any]
    value: float | None  # the objective (None: infeasible or not measured)
    failed: bool  # launched or predicted, and no feasible measurement


class GuidedSampler(BaseSampler):
    """Pattern search around the incumbent over `distributions` (the space's).

    `up`: parameters whose larger value takes more memory (tried upwards first when
    `prefer_up`, i.e. the objective is a throughput to maximize).
    """

    def __init__(
        self,
        distributions: Mapping[str, BaseDistribution],
        up: Sequence[str] = (),
        prefer_up: bool = True,
        seed: int | None = None,
    ) -> None:
        self._distributions = dict(distributions)
        self._up = set(up)
        self._prefer_up = prefer_up
        self._random = RandomSampler(seed=seed)

    def infer_relative_search_space(
        self, study: optuna.Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return dict(self._distributions)

    def sample_relative(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        search_space: dict[str, BaseDistribution],
    ) -> dict[str, Any]:
        if not search_space:
            return {}
        points = _points(study, trial.number)
        tried = {_key(p.params) for p in points}
        sign = 1.0 if study.directions[0] == StudyDirection.MAXIMIZE else -1.0
        incumbent = _incumbent(points, sign)
        if incumbent is None:
            return {}  # no feasible point yet: the independent (random) sampler proposes
        for candidate in self._moves(incumbent, points, sign):
            if _key(candidate) not in tried:
                return candidate
        return {}

    def sample_independent(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        return self._random.sample_independent(study, trial, param_name, param_distribution)

    def _moves(
        self, incumbent: _Point, points: Sequence[_Point], sign: float
    ) -> list[dict[str, Any]]:
        """Moves from the incumbent, largest first; at each size, the most promising first."""
        moves: list[dict[str, Any]] = []
        momentum = _momentum(incumbent, points, sign, self._distributions)
        if momentum is not None:
            moves.append(momentum)
        step = FIRST_STEP
        while step >= MIN_STEP:
            ranked = []
            for name, dist in self._distributions.items():
                for sign in (1, -1):
                    moved = _move(incumbent.params, name, dist, sign, step)
                    if moved is not None:
                        ranked.append((self._rank(name, sign, incumbent, moved, points), moved))
                if isinstance(dist, CategoricalDistribution):
                    for choice in dist.choices:
                        if choice != incumbent.params.get(name):
                            other = {**incumbent.params, name: choice}
                            ranked.append((self._rank(name, 0, incumbent, other, points), other))
            ranked.sort(key=lambda item: item[0])
            moves.extend(m for _, m in ranked)
            step /= 2
        return moves

    def _rank(
        self,
        name: str,
        sign: int,
        incumbent: _Point,
        moved: dict[str, Any],
        points: Sequence[_Point],
    ) -> tuple[int, int]:
        """Lower first: moves past a known failure last; memory-up moves first (throughput)."""
        blocked = any(
            p.failed and _beyond(incumbent.params, moved, p.params, name, self._distributions)
            for p in points
        )
        preferred = 0
        if sign != 0 and name in self._up:
            preferred = 0 if (sign > 0) == self._prefer_up else 1
        elif sign != 0:
            preferred = 1
        return (int(blocked), preferred)


def _momentum(
    incumbent: _Point,
    points: Sequence[_Point],
    sign: float,
    distributions: Mapping[str, BaseDistribution],
) -> dict[str, Any] | None:
    """The move that made the incumbent (from the incumbent before it), made once more from
    the incumbent: pattern search's extrapolation along a direction that paid."""
    previous, best = None, None
    for p in sorted(points, key=lambda p: p.number):
        if p.value is None:
            continue
        if best is None or sign * p.value > sign * (best.value or 0.0):
            previous, best = best, p
    if previous is None or best is not incumbent:
        return None
    out = dict(incumbent.params)
    for name, dist in distributions.items():
        a = to_unit(previous.params.get(name), dist)
        b = to_unit(incumbent.params.get(name), dist)
        if a is None or b is None or abs(b - a) < 1e-9:
            continue
        out[name] = from_unit(min(1.0, max(0.0, b + (b - a))), dist)
    return out if out != incumbent.params else None


def _points(study: optuna.Study, current: int) -> list[_Point]:
    out = []
    for t in study.get_trials(deepcopy=False):
        if t.number == current or not t.params:
            continue
        if t.state == TrialState.COMPLETE and t.values:
            feasible = all(c <= 0 for c in (t.constraints or {}).values())
            value = t.values[0] if feasible else None
            out.append(_Point(t.number, dict(t.params), value, failed=not feasible))
        elif t.state in (TrialState.RUNNING, TrialState.WAITING):
            out.append(_Point(t.number, dict(t.params), None, failed=False))
    return out


def _incumbent(points: Sequence[_Point], sign: float) -> _Point | None:
    feasible = [p for p in points if p.value is not None]
    if not feasible:
        return None
    return max(feasible, key=lambda p: sign * (p.value or 0.0))


def _key(params: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, repr(v)) for k, v in params.items()))


def to_unit(value: Any, dist: BaseDistribution) -> float | None:
    """A numeric value as a share of its (log) range."""
    if not isinstance(dist, IntDistribution | FloatDistribution) or value is None:
        return None
    low, high = float(dist.low), float(dist.high)
    if high <= low:
        return 0.0
    if dist.log:
        return (math.log(float(value)) - math.log(low)) / (math.log(high) - math.log(low))
    return (float(value) - low) / (high - low)


def from_unit(u: float, dist: BaseDistribution) -> Any:
    """The value at share `u` of the range, on the distribution's step."""
    assert isinstance(dist, IntDistribution | FloatDistribution)
    low, high = float(dist.low), float(dist.high)
    if dist.log:
        x = math.exp(math.log(low) + u * (math.log(high) - math.log(low)))
    else:
        x = low + u * (high - low)
    step = dist.step
    if step:
        x = low + round((x - low) / step) * step
    x = min(high, max(low, x))
    if isinstance(dist, IntDistribution):
        return round(x)
    return float(round(x, 10))


def _move(
    params: Mapping[str, Any], name: str, dist: BaseDistribution, sign: int, step: float
) -> dict[str, Any] | None:
    """`params` with `name` moved by `step` of its range in direction `sign` (None: no move)."""
    u = to_unit(params.get(name), dist)
    if u is None:
        return None
    value = from_unit(min(1.0, max(0.0, u + sign * step)), dist)
    if value == params.get(name):
        return None
    return {**params, name: value}


def _beyond(
    start: Mapping[str, Any],
    moved: Mapping[str, Any],
    failed: Mapping[str, Any],
    name: str,
    distributions: Mapping[str, BaseDistribution],
) -> bool:
    """Whether a failed point lies on the far side of the move along `name`, with the other
    parameters as at the start (the move heads into known failure)."""
    if any(failed.get(k) != v for k, v in start.items() if k != name):
        return False
    dist = distributions[name]
    a, b, f = (to_unit(p.get(name), dist) for p in (start, moved, failed))
    if a is None or b is None or f is None:
        return failed.get(name) == moved.get(name)
    return (b - a) * (f - a) > 0 and abs(f - a) <= abs(b - a) + 1e-9
