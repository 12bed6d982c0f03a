"""Early stopping: end a trial's benchmark once the requests finished so far decide it.

Two verdicts, checked while the benchmark runs (the load client's guard asks every 0.2 s):

- *Certainly infeasible*: an SLO on a latency percentile is already broken, whatever the
  requests still to come do. With N requests in all, the linear-interpolation percentile q
  lies above the bound as soon as `N - floor((N - 1) q / 100)` requests are over it (fewer
  completed requests only lower that count, so N is the cautious choice). Likewise an error
  rate that is already over the limit.
- *Dominated with margin*: after `min_fraction` of the requests (and at least
  `min_requests`), the running metrics are dominated by a feasible trial of the front even
  when they are made `margin` better on every objective. Like is compared with like: the
  front trial's metrics are recomputed from its own records of the same requests (every
  trial sends the same requests on the same schedule), because a partial run's metrics are
  biased (its throughput window still holds the ramp-up). A front trial whose records are not
  on this machine is not used.

A stopped trial is recorded with status `pruned` and its partial metrics; it is never on the
front (only fully measured trials are), and it saves the rest of its benchmark's device time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from autotune.bench import RequestRecord, summarize

# Partial values of these cannot be computed from a run's requests so far.
_NOT_RUNNING = frozenset({"capacity_rps"})
_PER_REQUEST: dict[str, Callable[[RequestRecord], float | None]] = {
    "ttft": lambda r: r.ttft,
    "tpot": lambda r: r.tpot,
    "e2e": lambda r: r.e2e,
}

Judge = Callable[[Sequence[RequestRecord]], str | None]


@dataclass(frozen=True)
class PruneRule:
    margin: float = 0.1
    min_fraction: float = 0.25
    min_requests: int = 8


@dataclass(frozen=True)
class FrontPoint:
    """A feasible trial of the front: its number and its measured requests."""

    number: int
    records: tuple[RequestRecord, ...]


def make_judge(
    rule: PruneRule,
    objectives: Sequence[tuple[str, str]],
    front: Sequence[FrontPoint],
    slos: Mapping[str, float],
    max_error_rate: float,
    total: int,
) -> Judge:
    """The guard's judge for one trial of `total` measured requests."""
    needed = max(rule.min_requests, math.ceil(rule.min_fraction * total))
    dominance = all(metric not in _NOT_RUNNING for metric, _ in objectives) and bool(front)

    # The judge runs in the load client's event loop: summarizing the front's runs at every
    # look (every 0.2 s) would delay the stamping of streamed tokens. Dominance is judged only
    # each time another tenth of the requests has finished.
    step = max(1, total // 10)
    next_look = [needed]

    def judge(finished: Sequence[RequestRecord]) -> str | None:
        records = list(finished)
        broken = _broken_slo(records, slos, total) or _broken_error_rate(
            records, max_error_rate, total
        )
        if broken is not None:
            return broken
        if not dominance or len(records) < next_look[0]:
            return None
        next_look[0] = len(records) + step
        return _dominated(records, rule.margin, objectives, front, slos, total)

    return judge


def _broken_slo(records: list[RequestRecord], slos: Mapping[str, float], total: int) -> str | None:
    for name, bound in slos.items():
        parts = name.split("_")
        if len(parts) != 3 or parts[1] not in _PER_REQUEST or not parts[0].startswith("p"):
            continue
        q = float(parts[0][1:])
        value = _PER_REQUEST[parts[1]]
        over = sum(1 for r in records if r.ok and (v := value(r)) is not None and v * 1e3 > bound)
        must = total - math.floor((total - 1) * q / 100)
        if over >= must:
            return (
                f"{name} SLO already broken: {over} of {total} requests over {bound:g} ms "
                f"after {len(records)} finished"
            )
    return None


def _broken_error_rate(
    records: list[RequestRecord], max_error_rate: float, total: int
) -> str | None:
    errors = sum(1 for r in records if not r.ok)
    if total and errors / total > max_error_rate:
        return f"error rate already over {max_error_rate:g}: {errors} of {total} requests failed"
    return None


def _dominated(
    records: list[RequestRecord],
    margin: float,
    objectives: Sequence[tuple[str, str]],
    front: Sequence[FrontPoint],
    slos: Mapping[str, float],
    total: int,
) -> str | None:
    running = _values(records, objectives, slos)
    if running is None:
        return None
    helped = [
        v * (1 + margin) if d == "maximize" else v / (1 + margin)
        for v, (_, d) in zip(running, objectives, strict=True)
    ]
    indices = {r.index for r in records}
    for point in front:
        same = [r for r in point.records if r.index in indices]
        theirs = _values(same, objectives, slos) if len(same) == len(indices) else None
        if theirs is not None and _weakly_dominates(theirs, helped, objectives):
            shown = ", ".join(
                f"{m} {v:.4g} vs {f:.4g}"
                for (m, _), v, f in zip(objectives, running, theirs, strict=True)
            )
            return (
                f"dominated by trial {point.number} with a {margin:.0%} margin on the same "
                f"{len(records)} of {total} requests ({shown})"
            )
    return None


def _values(
    records: Sequence[RequestRecord],
    objectives: Sequence[tuple[str, str]],
    slos: Mapping[str, float],
) -> list[float] | None:
    summary = summarize(records, slos)
    values = [summary.metric(metric) for metric, _ in objectives]
    return values if all(math.isfinite(v) for v in values) else None


def _weakly_dominates(
    a: Sequence[float], b: Sequence[float], objectives: Sequence[tuple[str, str]]
) -> bool:
    return all(
        (x >= y if d == "maximize" else x <= y)
        for x, y, (_, d) in zip(a, b, objectives, strict=True)
    )
