"""Between two SLOs: a proposal midway between configs that miss different bounds.

vLLM's knobs trade one latency for another. More sequences per batch (max_num_seqs) empty the
queue, so the p99 TTFT falls, and make every decode step longer, so the p99 TPOT rises; a
larger token budget (max_num_batched_tokens) does the same through prefill chunks. Under
bounds on both, the configs that meet them lie in a strip between two regions that each miss
one of them. A smooth model fitted to the two sides (the GP's) does not see the strip: a
queue's TTFT is 50-100x its bound, the strip's margin a few percent, so the model predicts
infeasible well into it and proposes the corners (docs/benchmarks.md, the SLO landscape).

`BracketSampler` adds that known structure to the study's sampler. Two measured configs with
the same categorical values (tensor parallelism, ...) that each miss SLOs the other meets
bracket a strip between them, if the trade-off is monotone along the segment joining them; it
proposes the segment's midpoint (in each parameter's own scale, log where the space says so).
Each measured midpoint makes a shorter bracket with one end (bisection), until one meets both
bounds or the bracket is shorter than `MIN_WIDTH`. Where a group's configs all miss the same
SLO (no bracket yet), it proposes, once per group, the config opposite the nearest miss (every
numeric parameter's share of its range u taken to 1 - u): the far side of the trade-off, which
a model fitted to one side predicts to miss as well and so proposes late. An opposite that
fails to start (it takes more memory: an OOM) brackets with the one-sided misses while the
group has no pair of different misses open: the memory boundary and the strip lie between.
It brackets only while no config with those categorical values meets every SLO: once one
does, the base sampler refines from there. Otherwise (no bracket, every midpoint tried) the
base sampler proposes. A proposal of its own is marked (`MARK`: `midpoint` or `opposite`) on
the trial.

Stateless: brackets are read from the study's trials (what the sampler is told: wrapped in
`autotune.study._told.ToldSampler`, a constraint's sign is as at the study's start), so it
works the same on resume, with several lanes and with several workers. A running trial counts
as tried. Configs without a measurement (OOM, a crash, a predicted failure) bracket nothing,
but for a failed opposite (above).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from autotune.study._guided import from_unit, to_unit
from autotune.study._objectives import FAILED
from autotune.study._wrapped import WrappedSampler

MIN_WIDTH = 1 / 32  # a bracket narrower than this (largest share of a range) is not bisected
NEAR = 0.25  # a tried config within this share of a bracket's width of its midpoint bisects it
MARK = "autotune:bracket"  # the trial's system attribute: which proposal of this module it is
MIDPOINT, OPPOSITE = "midpoint", "opposite"


@dataclass(frozen=True)
class _Point:
    params: dict[str, Any]
    missed: frozenset[str] | None  # the SLOs it misses (None: not measured, or running)
    violation: float = 0.0  # the sum of its (told) constraint values over the missed SLOs
    mark: str | None = None  # MARK's value where this module proposed it
    failed: bool = False  # ended without a measurement (OOM, a crash, predicted to fail)


class BracketSampler(WrappedSampler):
    """`base`, except that a bracket between configs missing different ones of `slos` is
    bisected first; from the `after`-th trial on (the base's own start before it)."""

    def __init__(self, base: optuna.samplers.BaseSampler, slos: Sequence[str], after: int) -> None:
        super().__init__(base)
        self.slos = list(slos)
        self.after = after

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        """The base's search space (the GP's: every parameter the completed trials share) is
        what a bracket moves."""
        if search_space and trial.number >= self.after:
            trials = study.get_trials(deepcopy=False)
            proposal = next_proposal(trials, search_space, self.slos, trial.number)
            if proposal is not None:
                kind, params = proposal
                study._storage.set_trial_system_attr(trial._trial_id, MARK, kind)
                return params
        return self.base.sample_relative(study, trial, search_space)


def next_proposal(
    trials: Sequence[FrozenTrial],
    space: Mapping[str, BaseDistribution],
    slos: Sequence[str],
    current: int,
) -> tuple[str, dict[str, Any]] | None:
    """(MIDPOINT, the narrowest open bracket's midpoint), else (OPPOSITE, a one-sided group's
    opposite config), else None (see the module's text)."""
    points = [p for t in trials if t.number != current and (p := _point(t, space, slos))]
    groups: dict[tuple[tuple[str, str], ...], list[_Point]] = {}
    for p in points:
        groups.setdefault(_group(p.params, space), []).append(p)
    open_groups = [g for g in groups.values() if not any(p.missed == frozenset() for p in g)]
    midpoint = _narrowest_midpoint(open_groups, space)
    if midpoint is not None:
        return MIDPOINT, midpoint
    opposite = _first_opposite(open_groups, space)
    return None if opposite is None else (OPPOSITE, opposite)


def _narrowest_midpoint(
    groups: Sequence[list[_Point]], space: Mapping[str, BaseDistribution]
) -> dict[str, Any] | None:
    """The midpoint of the narrowest bracket: of two configs that miss different SLOs, or
    (where a group has no such pair open) of a failed opposite and a miss of one SLO."""
    best: tuple[float, dict[str, Any]] | None = None
    for group in groups:
        measured = [p for p in group if p.missed]
        pairs = [(a, b) for a, b in itertools.combinations(measured, 2) if _apart(a, b)]
        mid = _narrowest(pairs, group, space)
        if mid is None:  # the opposite failed: the boundary lies between it and a one-sided miss
            failed = [p for p in group if p.failed and p.mark == OPPOSITE]
            one_sided = [p for p in measured if len(p.missed or ()) == 1]
            mid = _narrowest([(a, b) for a in one_sided for b in failed], group, space)
        if mid is not None and (best is None or mid[0] < best[0]):
            best = mid
    return None if best is None else best[1]


def _apart(a: _Point, b: _Point) -> bool:
    """Each misses an SLO the other meets (both missing one says nothing of a strip)."""
    return bool(a.missed and b.missed and not a.missed & b.missed)


def _narrowest(
    pairs: Sequence[tuple[_Point, _Point]],
    group: Sequence[_Point],
    space: Mapping[str, BaseDistribution],
) -> tuple[float, dict[str, Any]] | None:
    """(width, midpoint) of the narrowest pair whose midpoint no tried config bisects yet."""
    best: tuple[float, dict[str, Any]] | None = None
    for a, b in pairs:
        width = _width(a.params, b.params, space)
        if width < MIN_WIDTH or (best is not None and width >= best[0]):
            continue
        mid = _midpoint(a.params, b.params, space)
        if mid is None or any(_near(p.params, mid, width, space) for p in group):
            continue
        best = (width, mid)
    return best


def _first_opposite(
    groups: Sequence[list[_Point]], space: Mapping[str, BaseDistribution]
) -> dict[str, Any] | None:
    """The opposite of the nearest one-sided miss, in the group whose miss is nearest; once a
    group (a trial marked OPPOSITE there, whatever it measured)."""
    best: tuple[float, dict[str, Any]] | None = None
    for group in groups:
        if any(p.mark == OPPOSITE for p in group):
            continue
        one_sided = [p for p in group if p.missed is not None and len(p.missed) == 1]
        if len({p.missed for p in one_sided}) != 1:
            continue  # none (missing every bound says nothing of the direction), or a bracket
        nearest = min(one_sided, key=lambda p: p.violation)
        if best is not None and nearest.violation >= best[0]:
            continue
        opposite = _opposite(nearest.params, space)
        if opposite is None or any(_near(p.params, opposite, 1.0, space) for p in group):
            continue
        best = (nearest.violation, opposite)
    return None if best is None else best[1]


def _point(
    trial: FrozenTrial, space: Mapping[str, BaseDistribution], slos: Sequence[str]
) -> _Point | None:
    if not trial.params or any(name not in trial.params for name in space):
        return None
    params = {name: trial.params[name] for name in space}
    mark = trial.system_attrs.get(MARK)
    if trial.state in (TrialState.RUNNING, TrialState.WAITING):
        return _Point(params, None, mark=mark)
    if trial.state != TrialState.COMPLETE:
        return None
    constraints = trial.constraints or {}
    if constraints.get(FAILED, 0.0) > 0 or any(name not in constraints for name in slos):
        return _Point(params, None, mark=mark, failed=True)
    missed = frozenset(name for name in slos if constraints[name] > 0)
    return _Point(params, missed, sum(constraints[name] for name in missed), mark)


def _group(
    params: Mapping[str, Any], space: Mapping[str, BaseDistribution]
) -> tuple[tuple[str, str], ...]:
    return tuple(
        (name, repr(params[name]))
        for name, dist in sorted(space.items())
        if isinstance(dist, CategoricalDistribution)
    )


def _units(params: Mapping[str, Any], space: Mapping[str, BaseDistribution]) -> dict[str, float]:
    return {
        name: u for name, dist in space.items() if (u := to_unit(params[name], dist)) is not None
    }


def _width(
    a: Mapping[str, Any], b: Mapping[str, Any], space: Mapping[str, BaseDistribution]
) -> float:
    ua, ub = _units(a, space), _units(b, space)
    return max((abs(ua[k] - ub[k]) for k in ua), default=0.0)


def _midpoint(
    a: Mapping[str, Any], b: Mapping[str, Any], space: Mapping[str, BaseDistribution]
) -> dict[str, Any] | None:
    ua, ub = _units(a, space), _units(b, space)
    mid = {
        name: from_unit((ua[name] + ub[name]) / 2, dist) if name in ua else a[name]
        for name, dist in space.items()
    }
    return None if mid == dict(a) or mid == dict(b) else mid


def _opposite(
    params: Mapping[str, Any], space: Mapping[str, BaseDistribution]
) -> dict[str, Any] | None:
    units = _units(params, space)
    out = {
        name: from_unit(1.0 - units[name], dist) if name in units else params[name]
        for name, dist in space.items()
    }
    return None if out == dict(params) else out


def _near(
    params: Mapping[str, Any],
    mid: Mapping[str, Any],
    width: float,
    space: Mapping[str, BaseDistribution],
) -> bool:
    """Whether a tried config is (about) the midpoint: it already bisects the bracket."""
    return params == mid or _width(params, mid, space) <= NEAR * width
