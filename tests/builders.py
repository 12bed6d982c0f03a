"""Builders of summaries and trial records as the store returns them: a helper module that
test modules and conftests import (the `summary_of` and `trial` fixtures wrap them)."""

from __future__ import annotations

from typing import Any

from autotune.bench import Stats, Summary
from autotune.store import TrialRecord


def stats(p99: float, p50: float | None = None) -> Stats:
    mid = p99 / 2 if p50 is None else p50
    return Stats(mean=mid, p50=mid, p90=p99, p99=p99)


def make_summary(
    throughput: float = 1000.0,
    ttft_p99: float = 50.0,
    tpot_p99: float = 5.0,
    completed: int = 10,
    errors: int = 0,
) -> Summary:
    return Summary(
        completed=completed,
        errors=errors,
        duration_s=1.0,
        output_throughput=throughput,
        total_throughput=throughput * 2,
        request_throughput=completed,
        goodput=completed,
        ttft_ms=stats(ttft_p99),
        tpot_ms=stats(tpot_p99),
        itl_ms=stats(tpot_p99),
        e2e_ms=stats(ttft_p99 + 10 * tpot_p99),
    )


def record(
    number: int,
    throughput: float | None,
    ttft: float = 50.0,
    tpot: float = 5.0,
    *,
    status: str = "ok",
    role: str = "",
    constraints: dict[str, float] | None = None,
    config: dict[str, Any] | None = None,
) -> TrialRecord:
    """A trial record as the store returns it; `throughput=None` means no measurement."""
    metrics = (
        {}
        if throughput is None
        else {"output_throughput": throughput, "p99_ttft_ms": ttft, "p99_tpot_ms": tpot}
    )
    return TrialRecord(
        number=number,
        state="complete",
        status=status,
        role=role,
        metrics=metrics,
        constraints={"failed": 0.0} if constraints is None else constraints,
        config={"model": "/m", "max_num_seqs": number} if config is None else config,
    )
