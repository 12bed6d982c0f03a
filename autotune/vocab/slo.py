"""One SLO: a metric, its bound (absolute, or a factor of the baseline's own value), how it is
judged and how it reads. The spec, the study's stored facts, the trials' constraints, the
confirm step, export, show and the dashboard all use this one type.

A trial's constraints (`autotune.measure.constraint_values`) hold one value per SLO, named by
its metric, `measured / bound - 1` (<= 0: held), beside the constraints that are no SLO's:
`NOT_SLOS`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from autotune.vocab.numbers import readable

# The constraints of a trial that are not an SLO's: no measurement, out of memory, the
# error-rate bound, and --min-agreement (a share of the baseline's greedy tokens, bounded
# from below).
FAILED = "failed"
OOM = "oom"
ERROR_RATE = "error_rate"
AGREEMENT = "agreement"
NOT_SLOS: tuple[str, ...] = (FAILED, OOM, ERROR_RATE, AGREEMENT)

PERCENTILES = ("p50", "p90", "p99")  # what a latency SLO's metric name may start with


@dataclass(frozen=True)
class Slo:
    """An upper bound on one metric. Absolute (`bound` given), or relative to the baseline
    (`factor`: `--slo p99_tpot_ms=baseline*1.2`), whose bound is `factor x baseline` once the
    baseline measured it (`fixed`); until then `bound` is None."""

    metric: str
    bound: float | None = None
    factor: float | None = None  # relative to the baseline: the bound is factor x its value
    baseline: float | None = None  # the baseline's value that fixed a relative bound

    @property
    def relative(self) -> bool:
        return self.factor is not None

    @property
    def percentile(self) -> str | None:
        """How it is judged: the percentile of the run's requests it bounds (`percentile_of`)."""
        return percentile_of(self.metric)

    def fixed(self, baseline: float) -> Slo:
        """This relative SLO with its bound fixed by the baseline's measured value."""
        assert self.factor is not None, f"{self.metric}: an absolute SLO is fixed already"
        return replace(self, bound=self.factor * baseline, baseline=baseline)

    @property
    def text(self) -> str:
        """`p99_ttft_ms <= 2,000`; `p99_tpot_ms <= 230 (baseline 191.7 x 1.2)`; a relative
        one not fixed yet: `p99_tpot_ms <= baseline x 1.2 (not measured yet)`."""
        if self.bound is None:
            return f"{self.metric} <= baseline x {self.factor:g} (not measured yet)"
        how = ""
        if self.factor is not None and self.baseline is not None:
            how = f" (baseline {readable(self.baseline)} x {self.factor:g})"
        return f"{self.metric} <= {readable(self.bound)}{how}"

    def ratio(self, measured: float, baseline: float | None = None) -> float | None:
        """`measured / bound`: above 1 it misses. A relative SLO is judged against
        `baseline` where one is given (the baseline of the same round, as the confirm step
        pairs them; the baseline's own run against itself: 1 / factor), else against its
        fixed bound. None where not measured, or where the bound is not known."""
        if not math.isfinite(measured):
            return None
        bound = self.bound
        if self.factor is not None and baseline is not None:
            if not math.isfinite(baseline) or baseline <= 0:
                return None
            bound = self.factor * baseline
        if bound is None:
            return None
        return measured / bound if bound > 0 else 0.0


def percentile_of(metric: str) -> str | None:
    """The percentile a latency metric is (`p90` of `p90_ttft_ms`); None for another metric."""
    head = metric.split("_")[0]
    return head if head in PERCENTILES else None


def slos_of(
    bounds: Mapping[str, float],
    relative: Mapping[str, float] = {},
    basis: Mapping[str, float] = {},
) -> tuple[Slo, ...]:
    """The SLOs of absolute `bounds` (metric -> bound, the fixed relative ones among them)
    and `relative` factors (metric -> factor), where `basis` (metric -> the baseline's value)
    says which relative bounds were fixed by what."""
    factors = dict(relative)
    out = []
    for name, bound in bounds.items():
        factor = factors.pop(name, None)
        if name in basis and factor is not None:
            out.append(Slo(name, float(bound), factor, float(basis[name])))
        elif factor is not None:  # fixed, its basis lost: read as the bound it is
            out.append(Slo(name, float(bound), factor))
        else:
            out.append(Slo(name, float(bound)))
    out.extend(Slo(name, factor=factor) for name, factor in factors.items())
    return tuple(out)


def bounds_of(slos: Iterable[Slo]) -> dict[str, float]:
    """Metric -> bound of the SLOs whose bound is known (a new dict: nothing shares it)."""
    return {s.metric: s.bound for s in slos if s.bound is not None}


def slo_text(slos: Iterable[Slo]) -> str:
    """SLOs on one line (`Slo.text`, comma-separated); `none` without any."""
    return ", ".join(s.text for s in slos) or "none"


def excess(measured: float, bound: float) -> float:
    """An SLO's constraint value: `measured / bound - 1` (<= 0: held; 1 where not measured)."""
    if math.isnan(measured):
        return 1.0
    return measured / bound - 1.0 if bound else 0.0
