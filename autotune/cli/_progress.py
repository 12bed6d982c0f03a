"""What `tune` prints as a study goes: one line as each trial starts, ends or is skipped, and
the study's summary (rich). The tables are `_render`'s."""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console

from autotune.answer.selection import judged_percentile, pareto_front, study_objectives
from autotune.bench import Summary
from autotune.cli._render import voided_text
from autotune.store import StudyFacts, study_records
from autotune.study import (
    Event,
    SkipRule,
    StudyResult,
    TrialFinished,
    TrialSkipped,
    TrialStarted,
)
from autotune.vocab.status import TrialStatus


def event_printer(console: Console) -> Callable[[Event], None]:
    def show(event: Event) -> None:
        if isinstance(event, TrialStarted):
            console.print(
                f"[bold][{event.index}/{event.total}][/] trial {event.number}: {event.description}"
            )
        elif isinstance(event, TrialSkipped):
            console.print(f"  skipped trial {event.number} ({event.status}): {event.reason}")
        elif isinstance(event, TrialFinished):
            _finished(console, event)

    return show


def _counted(s: Summary) -> str:
    """What the engine counted, where it did: `, prefix cache 78%, drafts accepted 81% (3.06
    tokens/step)`."""
    parts = []
    if s.prefix_cache_hit_rate is not None:
        parts.append(f"prefix cache {s.prefix_cache_hit_rate:.0%}")
    if s.spec_acceptance_rate is not None:
        length = s.spec_acceptance_length
        per_step = f" ({length:.2f} tokens/step)" if length is not None else ""
        parts.append(f"drafts accepted {s.spec_acceptance_rate:.0%}{per_step}")
    return "".join(f", {p}" for p in parts)


def _latencies(s: Summary, facts: StudyFacts) -> str:
    """TTFT and TPOT at the percentile the study judges (`judged_percentile`): `p90 TTFT 412.0
    ms, p90 TPOT 9.81 ms`."""
    q = judged_percentile(facts)
    ttft, tpot = getattr(s.ttft_ms, q), getattr(s.tpot_ms, q)
    return f"{q} TTFT {ttft:.1f} ms, {q} TPOT {tpot:.2f} ms"


def _finished(console: Console, event: TrialFinished) -> None:
    m = event.measurement
    if m.status == TrialStatus.PRUNED:
        console.print(f"  trial {event.number} [yellow]pruned[/]: {m.reason} ({m.device_s:.0f} s)")
    elif m.summary is None:
        console.print(f"  trial {event.number} [red]{m.status}[/]: {m.reason} ({m.device_s:.0f} s)")
    else:
        s = m.summary
        capacity = "" if s.capacity_rps is None else f"capacity {s.capacity_rps:.2f} req/s, "
        peak = "" if s.peak_memory_gib is None else f"peak {s.peak_memory_gib:.2f} GiB, "
        console.print(
            f"  trial {event.number} [green]ok[/]: {capacity}"
            f"{s.output_throughput:,.0f} output tok/s, {peak}"
            f"{_latencies(s, StudyFacts.of(event.study))}, "
            f"{s.errors} errors{_counted(s)} (start-up {m.engine.startup_s or 0:.0f} s, "
            f"trial {m.device_s:.0f} s)"
        )
    if m.engine.voided or m.engine.stall_kept_s:
        console.print(f"  [yellow]{voided_text(m.engine)}[/] (each made again; kept in voided/)")
    records = study_records(event.study)
    front = pareto_front(records, study_objectives(StudyFacts.of(event.study)))
    if front:
        best = front[0]
        console.print(
            f"  best so far: trial {best.number}, "
            f"{best.metric('output_throughput'):,.0f} tok/s ({len(front)} on the front)"
        )


def print_summary(console: Console, result: StudyResult) -> None:
    failed_share = result.failed_device_s / result.device_s if result.device_s else 0.0
    pruned = (
        f"; {result.pruned} pruned early, about {result.saved_device_s:.0f} device-seconds "
        "saved (against the median full trial)"
        if result.pruned
        else ""
    )
    console.print(
        f"\n{result.measured} measured, {result.failed} failed, {result.skipped} skipped "
        f"before launch; {result.device_s:.0f} device-seconds "
        f"({failed_share:.0%} on failed trials)"
        + pruned
        + ("; the space is exhausted" if result.exhausted else "")
        + ("; interrupted" if result.interrupted else "")
    )
    line = skips_line(result)
    if line:
        console.print(line)


def skips_line(result: StudyResult) -> str:
    """What each rule of the gate kept from launching: `skipped before launch: 3
    predicted_unsupported, 1 duplicate; the learned rules saved 3 launches (about 90
    device-seconds at this run's mean failed launch)`; empty when nothing was skipped."""
    counts = [(rule, result.skips.get(rule, 0)) for rule in SkipRule]
    parts = [f"{n} {rule}" for rule, n in counts if n]
    if not parts:
        return ""
    line = "skipped before launch: " + ", ".join(parts)
    if result.predicted:
        line += f"; the learned rules saved {result.predicted} launches"
        if result.mean_failed_device_s:
            saved = result.predicted * result.mean_failed_device_s
            line += f" (about {saved:.0f} device-seconds at this run's mean failed launch)"
    return line
