"""How studies look in a terminal: the Pareto table, the confirm step's and the trials' (rich).
The lines `tune` prints as it goes are `_progress`'s."""

from __future__ import annotations

import math
import shlex
import statistics
import textwrap
from collections.abc import Sequence
from typing import Any

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from autotune.answer.repeats import compared
from autotune.answer.selection import (
    answers_otherwise,
    baseline,
    closest,
    confirm_slo_text,
    judged_percentile,
    miss_text,
    misses,
    pareto_front,
    study_objectives,
)
from autotune.engine import failure_headline
from autotune.predict import REPORTED
from autotune.store import StudyFacts, TrialFacts, TrialRecord
from autotune.study import (
    percentage_errors,
)
from autotune.vocab.numbers import interval_text, readable
from autotune.vocab.slo import slo_text
from autotune.vocab.status import PREDICTED_STATUSES


def _with_spread(t: TrialRecord, name: str, fmt: str) -> str:
    """The metric with its 90% interval where the trial has one, else its spread over runs."""
    value = format(t.metric(name), fmt)
    if name in t.intervals:
        return f"{value} {interval_text(t.metric(name), t.intervals[name], fmt)}".rstrip()
    wobble = t.spread.get(name)
    return value if not wobble else f"{value} ±{format(wobble, fmt)}"


def _pair(t: TrialRecord, latency: str, fmt: str, q: str) -> str:
    """`p50 / q`, the `q` percentile with its 90% interval (`126.1 / 261.9 240.0-290.0`)."""
    p50 = format(t.metric(f"p50_{latency}_ms"), fmt)
    return f"{p50} / {_with_spread(t, f'{q}_{latency}_ms', fmt)}"


def print_confirm(console: Console, facts: StudyFacts) -> None:
    """The confirm step's table: every candidate's runs, median, spread, conservative value;
    the winner and its gain over the baseline (an interval, or "no significant gain")."""
    result = facts.confirm
    if result is None:
        return
    metric, direction = result.get("metric", "?"), result.get("direction", "maximize")
    turns = len(result.get("turns") or [])  # rounds whose engines took turns batch by batch
    how = f" ({turns} with engines in turns)" if turns else ""
    table = Table(
        title=f"Confirm: {result.get('rounds')} alternating rounds{how}, {metric} "
        f"({direction[:3]})",
        title_justify="left",
    )
    for col in ("trial", "runs", "median", "spread", "conservative", "SLOs: measured / bound"):
        table.add_column(
            col, justify="left" if col in ("runs", "SLOs: measured / bound") else "right"
        )
    base = result.get("baseline")
    winner = result.get("winner")
    for number, c in (result.get("candidates") or {}).items():
        mark = (" w" if str(winner) == number else "") + (" b" if str(base) == number else "")
        runs = ", ".join("-" if v is None else readable(v) for v in c.get("values") or [])

        def num(key: str, c: dict[str, Any] = c) -> str:
            value = c.get(key)
            return "-" if value is None else readable(value)

        row = (num("median"), num("spread"), num("conservative"), confirm_slo_text(c))
        table.add_row(f"{number}{mark}", runs, *row)
    if table.row_count:  # a step with nothing to re-measure is its verdict line alone
        console.print(table)
    gain = result.get("gain") or {}
    who = "none" if winner is None else f"trial {winner}"
    if winner is not None and str(winner) == str(base):
        who += " (the baseline: your defaults)"
    console.print(f"confirmed winner (w): {who}; verdict: {gain.get('verdict', '?')}")


def _ratio(value: float, base: float | None) -> str:
    if base is None or base == 0 or value != value:
        return ""
    return f"{value / base:.2f}x"


WIDE_MIN = 160  # below this width a config column is too narrow to read: stack each trial
STACKED_LINES = 3  # the most lines a stacked trial takes (its status first, then its config)


def _columns(rows: Sequence[TrialRecord], q: str) -> list[str]:
    """The number columns: capacity (a capacity-search study), peak memory (offline), then
    throughput, its ratio to the baseline's and the latency percentiles."""
    heads = []
    if any("capacity_rps" in t.metrics for t in rows):
        heads.append("capacity req/s")
    if any("peak_memory_gib" in t.metrics for t in rows):
        heads.append("peak GiB")
    tail = ["agree"] if any("agreement_tokens" in t.metrics for t in rows) else []
    predicted = [PREDICTED_TPS] if any(_predicted(t) for t in rows) else []
    return [*heads, "out tok/s", *predicted, "vs base", f"TTFT p50/{q} ms", f"TPOT p50/{q} ms",
            *tail]  # fmt: skip


PREDICTED_TPS = "predicted"  # the engine model's output tok/s, made before the trial ran


def _predicted(t: TrialRecord) -> str:
    """The engine model's output tok/s for the trial, predicted before it ran ("" if none)."""
    predicted = t.predicted("output_throughput")
    return f"~{predicted:,.0f}" if math.isfinite(predicted) else ""


def _numbers(t: TrialRecord, heads: Sequence[str], base_tps: float | None, q: str) -> list[str]:
    if not t.measured:
        return [_predicted(t) if h == PREDICTED_TPS else "" if h == "vs base" else "-"
                for h in heads]  # fmt: skip
    cells = {
        "capacity req/s": f"{t.metric('capacity_rps'):.2f}",
        "peak GiB": f"{t.metric('peak_memory_gib'):.2f}",
        "out tok/s": _with_spread(t, "output_throughput", ",.0f"),
        PREDICTED_TPS: _predicted(t),
        "vs base": _ratio(t.metric("output_throughput"), base_tps),
        f"TTFT p50/{q} ms": _pair(t, "ttft", ".1f", q),
        f"TPOT p50/{q} ms": _pair(t, "tpot", ".2f", q),
        # The share of the baseline's greedy tokens; "-" where the engine did not answer.
        "agree": f"{t.metrics['agreement_tokens']:.2f}" if "agreement_tokens" in t.metrics else "-",
    }
    return [cells[h] for h in heads]


def _status(t: TrialRecord, limit: int | None = None) -> str:
    """What became of the trial; a failure's reason cause first (`failure_headline`), cut to
    `limit` characters if given."""
    status = t.status if t.feasible or not t.measured else _infeasible(t)
    if t.repair_of is not None:  # before the reason: a long one wraps, the link stays whole
        status += f" (repair of {t.repair_of})"
    if t.remeasure_of is not None:  # the incumbent run again (autotune.search._remeasure)
        status += f" (again: {t.remeasure_of})"
    if t.engine.voided or t.engine.stall_kept_s:
        status += f" ({voided_text(t.engine)})"
    if not t.measured and t.reason:
        reason = failure_headline(t.reason)
        if limit is not None and len(reason) > limit:
            reason = reason[: limit - 1] + "…"
        status = f"{status}: {reason}"
    return f"~ {status}" if t.status in PREDICTED_STATUSES else status


def voided_text(engine: TrialFacts) -> str:
    """Runs made again: the tuner stood still in them (bench/_stall.py), or their rate departed
    from the trial's other batches (a degraded run)."""
    voided = engine.voided or []
    stalls = [f"{v.stall_s:.1f} s" for v in voided if v.stall_s is not None]
    why = [f"the tuner stalled {', '.join(stalls)}"] if stalls else []
    if any(v.reason == "degraded" for v in voided):
        why.append(f"{sum(v.reason == 'degraded' for v in voided)} degraded")
    kept = (
        f"; a run with a {engine.stall_kept_s:.1f} s stall kept (the host stalls run after run)"
        if engine.stall_kept_s
        else ""
    )
    return f"{len(voided)} run{'s' if len(voided) > 1 else ''} voided: {'; '.join(why)}{kept}"


def _infeasible(t: TrialRecord) -> str:
    return "ok (answers otherwise)" if answers_otherwise(t) else "ok (misses SLO)"


def _status_text(t: TrialRecord, text: str) -> Text:
    # The gate's predictions are dim: not measured failures.
    return Text(text, style="dim" if t.status in PREDICTED_STATUSES else "")


def trial_table(
    title: str,
    rows: Sequence[TrialRecord],
    base: TrialRecord | None,
    marks: dict[int, str],
    q: str = "p99",
) -> Table:
    """The trials as one table, the config in a column (for a wide console); TTFT and TPOT at
    their p50 and `q`."""
    table = Table(title=title, title_justify="left")
    table.add_column("trial", justify="right", no_wrap=True)
    table.add_column("config", overflow="fold", min_width=30)
    heads = _columns(rows, q)
    for col in heads:
        table.add_column(col, justify="right", no_wrap=True)
    table.add_column("status", overflow="fold", min_width=16, max_width=48)
    base_tps = base.metric("output_throughput") if base else None
    for t in rows:
        status = _status_text(t, _status(t, limit=120))
        cells = _numbers(t, heads, base_tps, q)
        table.add_row(f"{t.number}{marks.get(t.number, '')}", Text(t.description), *cells, status)
    return table


def stacked_table(
    title: str,
    rows: Sequence[TrialRecord],
    base: TrialRecord | None,
    marks: dict[int, str],
    width: int,
    q: str = "p99",
) -> Group:
    """The trials for a narrow console, each on at most STACKED_LINES lines: its numbers and
    status (a trial with no measurement: its status, cause first, on up to two lines), then
    its config under them, indented, cut with `…` where it would take more."""
    heads = _columns(rows, q)
    base_tps = base.metric("output_throughput") if base else None
    names = [f"{t.number}{marks.get(t.number, '')}" for t in rows]
    cells = [_numbers(t, heads, base_tps, q) for t in rows]
    first = max(len("trial"), *(len(n) for n in names))
    sizes = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(heads)]
    if first + sum(s + 2 for s in sizes) > width and "vs base" in heads:
        drop = heads.index("vs base")  # the least needed: the throughput itself stays
        del heads[drop], sizes[drop]
        for c in cells:
            del c[drop]
    indent = " " * (first + 2)
    room = max(20, width - len(indent))

    def line(name: str, values: Sequence[str]) -> str:
        return "  ".join(
            [name.rjust(first), *(v.rjust(s) for v, s in zip(values, sizes, strict=True))]
        )

    header = line("trial", heads)
    out = [
        Text(title),
        Text(header, style="bold", no_wrap=True),
        Text("─" * min(width, len(header))),
    ]
    for t, name, values in zip(rows, names, cells, strict=True):
        status, lines = _status(t), []
        if t.measured and len(line(name, values)) + 2 + len(status) <= width:
            lines.append(Text(line(name, values) + "  ") + _status_text(t, status))
        else:
            if t.measured:
                lines.append(Text(line(name, values), no_wrap=True))
                name = ""
            most = STACKED_LINES - len(lines) - 1  # a line is left for the config
            wrapped = textwrap.wrap(status, room, max_lines=most, placeholder=" …") or [""]
            for k, part in enumerate(wrapped):
                lead = name.rjust(first) + "  " if k == 0 and name else indent
                lines.append(Text(lead) + _status_text(t, part))
        most = STACKED_LINES - len(lines)
        config = textwrap.wrap(
            t.description or "(no config)", room, max_lines=most, placeholder=" …"
        )
        lines.extend(Text(indent + part, no_wrap=True) for part in config)
        out.extend(lines)
    return Group(*out)


def print_front(
    console: Console, study: str, records: Sequence[TrialRecord], facts: StudyFacts,
    show_all: bool = False,
) -> None:  # fmt: skip
    objectives = study_objectives(facts)
    front = pareto_front(records, objectives)
    base = baseline(records)
    marks = {t.number: "*" for t in front}
    winner = facts.confirmed_winner
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
    q = judged_percentile(facts)
    if console.width >= WIDE_MIN:
        console.print(trial_table(title, rows, base, marks, q))
    else:
        console.print(stacked_table(title, rows, base, marks, console.width, q))
    predicted = sum(t.status in PREDICTED_STATUSES for t in rows)
    if predicted:
        console.print(
            f"~ {predicted} predicted, never launched: the gate's prediction from earlier "
            "trials (a failure, or the engine model), not a measurement"
        )
    line = model_error_line(records)
    if line:
        console.print(line)
    names = ", ".join(f"{m} ({d[:3]})" for m, d in objectives)
    console.print(f"objectives: {names}; SLOs: {slo_text(facts.all_slos)}")
    if not front:
        console.print("[yellow]no measured trial meets every constraint yet[/]")
    print_confirm(console, facts)


def model_error_line(records: Sequence[TrialRecord]) -> str:
    """How far the engine model's predictions, made before each trial ran, were from what it
    measured: the median absolute percentage error (the mean is one degenerate run's: a client
    that read all of a request's tokens in one chunk measures a TPOT near 0); "" before any was
    scored."""
    errors = percentage_errors(records)
    labels = ("tok/s", "TTFT p50", "p99", "TPOT p50", "p99")
    shown = zip(REPORTED, labels, strict=True)
    if not errors.get("output_throughput"):
        return ""
    parts = [f"{label} {statistics.median(errors[m]):.0%}" for m, label in shown if errors.get(m)]
    n = len(errors["output_throughput"])
    head = f"engine model, predicted before each of {n} trials ran: median error "
    return head + ", ".join(parts)


def print_infeasible(
    console: Console, study: str, records: Sequence[TrialRecord], facts: StudyFacts
) -> bool:
    """When no measured trial meets every constraint: the closest one, by how much it misses
    each, and what to try. False when the study has a feasible trial (nothing printed).
    Trials are judged as export judges them (`compared`: a config's runs merged)."""
    records = compared(records)
    if pareto_front(records, study_objectives(facts)):
        return False
    near = closest(records)
    if near is None:
        console.print("[yellow]no trial was measured: there is no config to suggest[/]")
        return True
    console.print(
        f"[yellow]no measured config meets every constraint.[/] Closest: trial {near.number}"
        f" ({near.description or 'baseline'}), which misses {miss_text(near)}."
    )
    worst = next(iter(misses(near)), None)
    tips = []
    if worst is not None and worst.below:
        tips.append(
            "a lower --min-agreement, or a space without the options that change what the "
            "model answers (quantization, kv_cache_dtype, speculative_config)"
        )
    elif worst is not None and worst.name != "error_rate":
        tips.append(
            f"a looser bound (--slo {worst.name}={worst.measured * 1.1:.0f}, or relative to "
            f"what runs today: --slo {worst.name}=baseline*1.2)"
        )
    if not facts.capacity:
        tips.append("--load capacity (each config at the highest rate within the SLOs)")
    tips.append("less load (a lower --concurrency or --rate, fewer or shorter prompts)")
    console.print("  to try: " + "; ".join(tips))
    console.print(f"  export it anyway: autotune export {shlex.quote(study)} --allow-infeasible")
    return True
