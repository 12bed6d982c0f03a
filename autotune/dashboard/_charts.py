"""The dashboard's charts as plotly figure dicts (JSON-ready; plotly.js draws them).

Every point of a trial carries its number in `customdata`, so that a click opens its page.
Values that are not finite (a latency with no sample is `inf`) are left out of the charts.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

from autotune.dashboard._labels import (
    FEASIBLE_COLOUR,
    GROUP_COLOURS,
    INFEASIBLE_COLOUR,
    OTHER_COLOUR,
    metric_label,
    status_group,
)
from autotune.store import TrialRecord
from autotune.vocab.numbers import readable

Figure = dict[str, Any]
ObjectivePair = tuple[str, str]  # (metric, "maximize" | "minimize")

WINNER = "exported winner"
BASELINE = "baseline"
SLO_SHAPE = "SLO"  # shape names start with it: `SLO p99_ttft_ms`
FAR = 10.0  # an SLO bound this many times the largest value puts its axis on a log scale


def layout(title: str, x_title: str, y_title: str, **more: Any) -> dict[str, Any]:
    return {
        "title": {"text": title, "x": 0.01},
        "xaxis": {"title": {"text": x_title}, "zeroline": False, "automargin": True},
        "yaxis": {"title": {"text": y_title}, "zeroline": False, "automargin": True},
        "margin": {"l": 70, "r": 20, "t": 40, "b": 50},
        "height": 420,
        "hovermode": "closest",
        "legend": {"orientation": "h", "y": -0.18},
        **more,
    }


def empty(title: str, message: str) -> Figure:
    """A figure with no data and a message in its middle."""
    note = {"text": html.escape(message), "showarrow": False, "x": 0.5, "y": 0.5}
    hidden = {"visible": False}
    return {
        "data": [],
        "layout": {
            **layout(title, "", ""),
            "xaxis": hidden,
            "yaxis": hidden,
            "annotations": [{**note, "xref": "paper", "yref": "paper"}],
        },
    }


def axis_value(value: Any) -> Any:
    """A parameter value as an axis takes it: booleans as `true`/`false` categories."""
    return str(value).lower() if isinstance(value, bool) else value


def hover(t: TrialRecord, *lines: str) -> str:
    role = f" ({t.role})" if t.role else ""
    config = "<br>".join(html.escape(part) for part in t.description.split()) or "(no config)"
    return f"<b>trial {t.number}</b>{role}<br>{config}" + "".join(f"<br>{x}" for x in lines)


def _finite(t: TrialRecord, metric: str) -> bool:
    return math.isfinite(t.metric(metric))


def _points(
    name: str, trials: Sequence[TrialRecord], x: str, y: str, marker: dict[str, Any]
) -> dict[str, Any]:
    def line(metric: str, t: TrialRecord) -> str:
        return f"{metric_label(metric)}: {readable(t.metric(metric))}"

    return {
        "type": "scatter",
        "mode": "markers",
        "name": name,
        "x": [t.metric(x) for t in trials],
        "y": [t.metric(y) for t in trials],
        "customdata": [t.number for t in trials],
        "text": [hover(t, line(x, t), line(y, t)) for t in trials],
        "hovertemplate": "%{text}<extra></extra>",
        "marker": marker,
    }


def front_2d(
    trials: Sequence[TrialRecord], x: ObjectivePair, y: ObjectivePair
) -> list[TrialRecord]:
    """The trials no other of `trials` beats on both `x` and `y`, in x order."""
    sx = 1.0 if x[1] == "maximize" else -1.0
    sy = 1.0 if y[1] == "maximize" else -1.0

    def beats(a: TrialRecord, b: TrialRecord) -> bool:
        ax, ay = sx * a.metric(x[0]), sy * a.metric(y[0])
        bx, by = sx * b.metric(x[0]), sy * b.metric(y[0])
        return ax >= bx and ay >= by and (ax > bx or ay > by)

    front = [t for t in trials if not any(beats(o, t) for o in trials if o is not t)]
    return sorted(front, key=lambda t: (t.metric(x[0]), t.metric(y[0])))


def slo_shapes(slos: dict[str, float], x: str, y: str) -> list[dict[str, Any]]:
    """A dashed line at each SLO bound that limits a plotted metric."""
    shapes = []
    for metric, axis in ((x, "x"), (y, "y")):
        bound = slos.get(metric)
        if bound is None:
            continue
        line = {"color": "#d62728", "width": 2, "dash": "dash"}
        text = f"SLO {metric_label(metric)} ≤ {bound:g}"
        where: dict[str, Any] = (
            {"xref": "x", "x0": bound, "x1": bound, "yref": "paper", "y0": 0, "y1": 1}
            if axis == "x"
            else {"xref": "paper", "x0": 0, "x1": 1, "yref": "y", "y0": bound, "y1": bound}
        )
        shapes.append(
            {
                "type": "line",
                "name": f"{SLO_SHAPE} {metric}",
                **where,
                "line": line,
                "label": {
                    "text": text,
                    "textposition": "end",
                    "yanchor": "top",  # under a horizontal line: on the chart's top edge too
                    "font": {"color": "#d62728"},
                },
            }
        )
    return shapes


def pareto(
    trials: Sequence[TrialRecord],
    x: ObjectivePair,
    y: ObjectivePair,
    slos: dict[str, float],
    baseline: int | None,
    winner: int | None,
) -> Figure:
    """Measured trials in the (x, y) plane: feasible ones coloured, the others grey; the
    front of the pair as a line; the baseline and the exported winner marked; SLO lines."""
    title = f"{metric_label(x[0])} vs {metric_label(y[0])}"
    measured = [t for t in trials if t.measured and _finite(t, x[0]) and _finite(t, y[0])]
    if not measured:
        return empty(title, "no measured trial yet")
    feasible = [t for t in measured if t.feasible]
    infeasible = [t for t in measured if not t.feasible]
    data = [
        _points("feasible", feasible, x[0], y[0], {"color": FEASIBLE_COLOUR, "size": 10}),
        _points(
            "infeasible (misses a constraint)",
            infeasible,
            x[0],
            y[0],
            {"color": INFEASIBLE_COLOUR, "size": 9},
        ),
    ]
    front = front_2d(feasible, x, y)
    if front:
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": "front of these two",
                "x": [t.metric(x[0]) for t in front],
                "y": [t.metric(y[0]) for t in front],
                "line": {"color": FEASIBLE_COLOUR, "dash": "dot", "width": 1},
                "hoverinfo": "skip",
            }
        )
    by_number = {t.number: t for t in measured}
    for number, name, marker in (
        (baseline, BASELINE, {"symbol": "diamond-open", "size": 18, "color": "#000000"}),
        (winner, WINNER, {"symbol": "star", "size": 20, "color": "#ffbf00"}),
    ):
        if number in by_number:
            marker = {**marker, "line": {"width": 2, "color": "#000000"}}
            trace = _points(f"{name} (trial {number})", [by_number[number]], x[0], y[0], marker)
            data.append(trace)
    fig_layout = layout(title, metric_label(x[0]), metric_label(y[0]))
    fig_layout["shapes"] = slo_shapes(slos, x[0], y[0])
    for axis, metric in (("xaxis", x[0]), ("yaxis", y[0])):
        if _far_bound(slos.get(metric), [t.metric(metric) for t in measured]):
            fig_layout[axis]["type"] = "log"
    return {"data": data, "layout": fig_layout}


def _far_bound(bound: float | None, values: Sequence[float]) -> bool:
    """An SLO bound so far beyond the points that a linear axis would squash them (a log
    axis shows both the points and the line)."""
    return bound is not None and min(values) > 0 and bound > FAR * max(values)


def history(trials: Sequence[TrialRecord], objective: ObjectivePair) -> Figure:
    """Each measured trial's first objective by trial number, and the best feasible so far."""
    metric, direction = objective
    title = f"best {metric_label(metric)} so far"
    measured = sorted(
        (t for t in trials if t.measured and _finite(t, metric)), key=lambda t: t.number
    )
    if not measured:
        return empty(title, "no measured trial yet")
    better = max if direction == "maximize" else min
    steps_x: list[int] = []
    steps_y: list[float] = []
    best: float | None = None
    for t in measured:
        if t.feasible:
            value = t.metric(metric)
            best = value if best is None else better(best, value)
        if best is not None:
            steps_x.append(t.number)
            steps_y.append(best)

    def trace(name: str, rows: list[TrialRecord], colour: str) -> dict[str, Any]:
        label = metric_label(metric)
        return {
            "type": "scatter",
            "mode": "markers",
            "name": name,
            "x": [t.number for t in rows],
            "y": [t.metric(metric) for t in rows],
            "customdata": [t.number for t in rows],
            "text": [hover(t, f"{label}: {readable(t.metric(metric))}") for t in rows],
            "hovertemplate": "%{text}<extra></extra>",
            "marker": {"color": colour, "size": 9},
        }

    data = [
        trace("feasible", [t for t in measured if t.feasible], FEASIBLE_COLOUR),
        trace("infeasible", [t for t in measured if not t.feasible], INFEASIBLE_COLOUR),
        {
            "type": "scatter",
            "mode": "lines",
            "name": "best feasible so far",
            "x": steps_x,
            "y": steps_y,
            "line": {"shape": "hv", "color": "#2ca02c", "width": 2},
        },
    ]
    fig_layout = layout(title, "trial", metric_label(metric))
    if len(trials) <= 20:
        fig_layout["xaxis"]["dtick"] = 1  # whole trial numbers
    return {"data": data, "layout": fig_layout}


def param_map(trials: Sequence[TrialRecord], x: str, y: str) -> Figure:
    """Every trial with both parameters at (x, y), coloured by what became of it."""
    title = f"{x} x {y}: outcome"
    groups: dict[str, list[TrialRecord]] = {}
    for t in trials:
        if x in t.params and y in t.params:
            groups.setdefault(status_group(t), []).append(t)
    if not groups:
        return empty(title, "no trial has both parameters yet")
    data = []
    for group in sorted(groups, key=_group_order):
        rows = groups[group]
        reasons = [html.escape(t.reason[:120]) if t.reason else group for t in rows]
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": group,
                "x": [axis_value(t.params[x]) for t in rows],
                "y": [axis_value(t.params[y]) for t in rows],
                "customdata": [t.number for t in rows],
                "text": [hover(t, r) for t, r in zip(rows, reasons, strict=True)],
                "hovertemplate": "%{text}<extra></extra>",
                "marker": {"color": GROUP_COLOURS.get(group, OTHER_COLOUR), "size": 11},
            }
        )
    return {"data": data, "layout": layout(title, x, y)}


def _group_order(group: str) -> tuple[int, str]:
    order = list(GROUP_COLOURS)
    return (order.index(group) if group in order else len(order), group)


def importance(values: dict[str, float], note: str, metric: str) -> Figure:
    """Horizontal bars, the most important parameter on top."""
    title = f"parameter importance for {metric_label(metric)}"
    if not values:
        return empty(title, note)
    names = sorted(values, key=lambda k: values[k])
    bars = {
        "type": "bar",
        "orientation": "h",
        "name": "importance",
        "x": [values[k] for k in names],
        "y": names,
        "marker": {"color": FEASIBLE_COLOUR},
    }
    height = max(240, 60 + 32 * len(names))
    return {"data": [bars], "layout": layout(title, "importance (PED-ANOVA)", "", height=height)}


def histogram(values: Sequence[float], title: str, x_title: str) -> Figure:
    """The distribution of one per-request latency."""
    if not values:
        return empty(title, "no sample")
    bars = {"type": "histogram", "x": list(values), "nbinsx": 40, "name": title}
    return {"data": [bars], "layout": layout(title, x_title, "requests", height=320)}
