"""How studies look in a terminal: progress lines and the Pareto table (rich)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from autotune.selection import (
    CONFIRM_ATTR,
    baseline,
    confirmed_winner,
    pareto_front,
    study_objectives,
)
from autotune.status import PREDICTED_STATUSES, TrialStatus
from autotune.store import TrialRecord, study_records
from autotune.study import (
    Event,
    SkipRule,
    StudyResult,
    TrialFinished,
    TrialSkipped,
    TrialStarted,
)


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
            f"p99 TTFT {s.ttft_ms.p99:.1f} ms, p99 TPOT {s.tpot_ms.p99:.2f} ms, "
            f"{s.errors} errors (start-up {m.engine.get('startup_s', 0):.0f} s, "
            f"trial {m.device_s:.0f} s)"
        )
    records = study_records(event.study)
    attrs = event.study.user_attrs
    front = pareto_front(records, study_objectives(attrs))
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


def _with_spread(t: TrialRecord, name: str, fmt: str) -> str:
    value = format(t.metric(name), fmt)
    wobble = t.spread.get(name)
    return value if not wobble else f"{value} ±{format(wobble, fmt)}"


def print_confirm(console: Console, attrs: dict[str, Any]) -> None:
    """The confirm step's table: every candidate's runs, median, spread, conservative value;
    the winner and its gain over the baseline (an interval, or "no significant gain")."""
    result = attrs.get(CONFIRM_ATTR)
    if not isinstance(result, dict):
        return
    metric, direction = result.get("metric", "?"), result.get("direction", "maximize")
    table = Table(
        title=f"Confirm: {result.get('rounds')} alternating rounds, {metric} ({direction[:3]})",
        title_justify="left",
    )
    for col in ("trial", "runs", "median", "spread", "conservative", "feasible"):
        table.add_column(col, justify="right" if col != "runs" else "left")
    base = result.get("baseline")
    winner = result.get("winner")
    for number, c in (result.get("candidates") or {}).items():
        mark = (" w" if str(winner) == number else "") + (" b" if str(base) == number else "")
        runs = ", ".join("-" if v is None else f"{v:,.4g}" for v in c.get("values") or [])

        def num(key: str, c: dict[str, Any] = c) -> str:
            value = c.get(key)
            return "-" if value is None else f"{value:,.4g}"

        feasible = f"{c.get('feasible_rounds', 0)}/{len(c.get('values') or [])}"
        row = (num("median"), num("spread"), num("conservative"), feasible)
        table.add_row(f"{number}{mark}", runs, *row)
    console.print(table)
    gain = result.get("gain") or {}
    who = "none" if winner is None else f"trial {winner}"
    console.print(f"confirmed winner (w): {who}; vs baseline (b): {gain.get('verdict', '?')}")


def _ratio(value: float, base: float | None) -> str:
    if base is None or base == 0 or value != value:
        return ""
    return f"{value / base:.2f}x"


def trial_table(
    title: str, rows: Sequence[TrialRecord], base: TrialRecord | None, marks: dict[int, str]
) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("trial", justify="right", no_wrap=True)
    table.add_column("config", overflow="fold")
    capacity = any("capacity_rps" in t.metrics for t in rows)  # a capacity-search study
    if capacity:
        table.add_column("capacity req/s", justify="right", no_wrap=True)
    peak = any("peak_memory_gib" in t.metrics for t in rows)  # an offline study
    if peak:
        table.add_column("peak GiB", justify="right", no_wrap=True)
    for col in ("out tok/s", "vs base", "TTFT p50/p99 ms", "TPOT p50/p99 ms"):
        table.add_column(col, justify="right", no_wrap=True)
    table.add_column("status", overflow="fold")
    base_tps = base.metric("output_throughput") if base else None
    for t in rows:
        mark = marks.get(t.number, "")
        if t.measured:
            cells = [
                _with_spread(t, "output_throughput", ",.0f"),
                _ratio(t.metric("output_throughput"), base_tps),
                f"{t.metric('p50_ttft_ms'):.1f} / {t.metric('p99_ttft_ms'):.1f}",
                f"{t.metric('p50_tpot_ms'):.2f} / {t.metric('p99_tpot_ms'):.2f}",
            ]
        else:
            cells = ["-", "", "-", "-"]
        if peak:
            cells.insert(0, f"{t.metric('peak_memory_gib'):.2f}" if t.measured else "-")
        if capacity:
            cells.insert(0, f"{t.metric('capacity_rps'):.2f}" if t.measured else "-")
        predicted = t.status in PREDICTED_STATUSES  # the gate's, not a measured failure
        status = t.status if t.feasible or not t.measured else "ok (misses SLO)"
        if not t.measured and t.reason:
            status = f"{t.status}: {t.reason[: 100 if predicted else 60]}"
        if t.repair_of is not None:
            status += f" (repair of {t.repair_of})"
        cell = Text(f"~ {status}", style="dim") if predicted else status
        table.add_row(f"{t.number}{mark}", t.description, *cells, cell)
    return table


def print_front(
    console: Console, study: str, records: Sequence[TrialRecord], attrs: dict[str, Any],
    show_all: bool = False,
) -> None:  # fmt: skip
    objectives = study_objectives(attrs)
    front = pareto_front(records, objectives)
    base = baseline(records)
    marks = {t.number: "*" for t in front}
    winner = confirmed_winner(attrs)
    w = ", w confirmed winner" if winner is not None else ""
    if winner is not None:
        marks[winner] = marks.get(winner, "") + " w"
    if base is not None:
        marks[base.number] = marks.get(base.number, "") + " b"
    if show_all:
        rows = list(records)
        title = f"Study {study}: all {len(rows)} trials (* Pareto front, b baseline{w})"
    else:
        rows = front + ([base] if base is not None and base not in front else [])
        title = f"Study {study}: Pareto front of {len(records)} trials (b baseline{w})"
    console.print(trial_table(title, rows, base, marks))
    predicted = sum(t.status in PREDICTED_STATUSES for t in rows)
    if predicted:
        console.print(
            f"~ {predicted} predicted, never launched: the gate's prediction from an earlier "
            "trial's failure, not a measurement"
        )
    names = ", ".join(f"{m} ({d[:3]})" for m, d in objectives)
    slos = attrs.get("slos") or {}
    slo_text = ", ".join(f"{k} <= {v:g}" for k, v in slos.items()) or "none"
    console.print(f"objectives: {names}; SLOs: {slo_text}")
    if not front:
        console.print("[yellow]no measured trial meets every constraint yet[/]")
    print_confirm(console, attrs)
