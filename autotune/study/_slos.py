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

With `--min-agreement`, the baseline fixes one more thing: its greedy outputs are the reference
every other trial's are compared with (`Reference`, shared with the workplan; the study keeps
them in `agreement_reference`), and no other trial runs before they are known.

The bounds are the study's, not the spec's: `StudyBounds` (one per harness) starts from the spec's
SLOs (`vocab.slo.Slo`) and changes in one place, `fix`/`fix_reference`/`adopt`, each a new
tuple of SLOs or a new `Reference`; the workload plan of each trial, the recorder and the pruning
judge read `StudyBounds.values` (a new dict each time) and `reference` at their moment, so
nothing is shared and changed under its holder. The spec is never changed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from autotune.bench import Summary
from autotune.measure import Reference
from autotune.spec import TuneSpec
from autotune.store import StudyFacts
from autotune.study._errors import StudyError
from autotune.vocab.slo import Slo, bounds_of, slos_of


@dataclass
class StudyBounds:
    """A study's SLOs (`slos`: the spec's, each relative one fixed once the baseline measured
    it) and, with --min-agreement, the baseline's greedy outputs. Fixing a bound replaces
    `slos` with new values, and the outputs `reference` with a new one; `values` is a new dict
    at each read, so no plan, recorder or judge holds one that changes under it."""

    slos: tuple[Slo, ...] = ()
    reference: Reference | None = None  # with --min-agreement: the baseline's greedy outputs

    @classmethod
    def of(cls, spec: TuneSpec) -> StudyBounds:
        """The bounds of a study of `spec` before its baseline ran."""
        reference = Reference() if spec.min_agreement is not None else None
        return cls(slos_of(spec.slos, spec.relative_slos), reference)

    @property
    def values(self) -> dict[str, float]:
        """Metric -> bound of every SLO whose bound is known (given, or fixed)."""
        return bounds_of(self.slos)

    def pending(self) -> list[str]:
        """What the baseline has yet to fix: relative SLOs' bounds, the agreement reference."""
        return self.relative_pending() + (["greedy outputs"] if self.reference_pending() else [])

    def relative_pending(self) -> list[str]:
        """The relative SLOs whose bound is not fixed yet."""
        return [s.metric for s in self.slos if s.bound is None]

    def reference_pending(self) -> bool:
        return self.reference is not None and not self.reference.outputs

    def adopt(self, facts: StudyFacts) -> bool:
        """Take the bounds a study's baseline fixed (its stored facts); True when none is
        pending any more."""
        fixed = {s.metric: s for s in facts.all_slos if s.relative and s.baseline is not None}
        self.slos = tuple(fixed.get(s.metric, s) if s.bound is None else s for s in self.slos)
        outputs = facts.agreement_reference.outputs if facts.agreement_reference else None
        if self.reference_pending() and outputs:
            self.reference = Reference(tuple(outputs))
        return not self.pending()

    def fix_reference(self, outputs: list[Any], trial: int) -> dict[str, Any]:
        """The baseline's greedy outputs become the reference; what to store."""
        assert self.reference is not None
        self.reference = Reference(tuple(outputs))
        return {"trial": trial, "outputs": outputs}

    def fix(self, summary: Summary, trial: int) -> dict[str, Any]:
        """Fix the pending bounds from the baseline's `summary` (trial number `trial`); the
        basis to store. Raises StudyError when the baseline did not measure a metric."""
        basis: dict[str, Any] = {}
        slos = []
        for slo in self.slos:
            if slo.bound is not None:
                slos.append(slo)
                continue
            value = summary.metric(slo.metric)
            if not math.isfinite(value) or value <= 0:
                raise StudyError(
                    f"the baseline (trial {trial}) measured no {slo.metric} ({value}): a bound "
                    f"relative to it cannot be fixed; give --slo {slo.metric}=NUMBER instead"
                )
            slos.append(slo.fixed(value))
            basis[slo.metric] = {"factor": slo.factor, "baseline": value, "trial": trial}
        self.slos = tuple(slos)
        return basis
