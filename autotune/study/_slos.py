"""Baseline-relative SLOs: bounds that the baseline's own measurement fixes.

`--slo p99_tpot_ms=baseline*1.2` ("no more than 20% worse than what runs today") is kept in
the spec as a factor (`TuneSpec.relative_slos`). The baseline (trial 0) runs before any other
trial of the study, its benchmark `BASELINE_RUNS` (3) times on its one engine
(`Harness.baseline_measure`); when it is recorded, each factor becomes an absolute bound,
`factor x the baseline's value` (the median of its runs: a p99 of one small run is about its
largest sample), and from then on the bound is a number like any other. The study keeps it:
the `slos` attribute holds every bound (given and fixed), and `slo_basis` says what each fixed
one came from; `show`, `export`, the dashboard, a resumed study and every worker read it from
there, so it is fixed once, ever. The confirm step judges a relative bound against the
baseline of each of its rounds instead (`_confirm`).

The bounds change in one place, `fix_bounds`/`adopt_bounds`, and in place (`spec.slos` is the
dict that the workload plan, the recorder and the pruning judge all hold).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from autotune.bench import Summary
from autotune.selection import BASIS_ATTR, SLOS_ATTR
from autotune.spec import TuneSpec
from autotune.study._errors import StudyError


def pending(spec: TuneSpec) -> list[str]:
    """The relative SLOs whose bound is not fixed yet."""
    return [name for name in spec.relative_slos if name not in spec.slos]


def adopt_bounds(spec: TuneSpec, attrs: Mapping[str, Any]) -> bool:
    """Take the bounds a study's baseline fixed (its stored attributes) into `spec`; True when
    none is pending any more."""
    stored = attrs.get(BASIS_ATTR) or {}
    bounds = attrs.get(SLOS_ATTR) or {}
    for name in pending(spec):
        if name in stored and name in bounds:
            spec.slos[name] = float(bounds[name])
    return not pending(spec)


def fix_bounds(spec: TuneSpec, summary: Summary, trial: int) -> dict[str, Any]:
    """Fix the pending bounds from the baseline's `summary` (trial number `trial`), in place;
    the basis to store. Raises StudyError when the baseline did not measure a metric."""
    basis: dict[str, Any] = {}
    for name in pending(spec):
        value = summary.metric(name)
        if not math.isfinite(value) or value <= 0:
            raise StudyError(
                f"the baseline (trial {trial}) measured no {name} ({value}): a bound "
                f"relative to it cannot be fixed; give --slo {name}=NUMBER instead"
            )
        factor = spec.relative_slos[name]
        basis[name] = {"factor": factor, "baseline": value, "trial": trial}
    for name, entry in basis.items():
        spec.slos[name] = entry["factor"] * entry["baseline"]
    return basis
