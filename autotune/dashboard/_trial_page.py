"""The trial page's HTML: outcome, export, metrics, distributions, log, profile."""

from __future__ import annotations

from urllib.parse import quote

from autotune.dashboard._html import Frame, esc, facts, num, table
from autotune.dashboard._labels import STATS
from autotune.dashboard._trial import TrialView


def trial_base(v: TrialView) -> str:
    return f"/studies/{quote(v.study, safe='')}/trials/{v.number}"


def _outcome(v: TrialView, frame: Frame) -> str:
    status = v.status if not v.kind else f"{v.status} ({v.outcome})"
    if v.measured and not v.feasible:
        status += ": misses a constraint"
    repair = f"repair of trial {v.repair_of}" if v.repair_of is not None else ""
    study = frame.link(f"/studies/{quote(v.study, safe='')}", v.study)
    return facts(
        [
            ("study", study),
            ("role", esc(v.role)),
            ("status", esc(status)),
            ("reason", esc(v.reason)),
            ("config", esc(v.description)),
            ("state (Optuna)", esc(v.state)),
            ("device seconds", num(v.device_s, ".1f") if v.device_s is not None else ""),
            ("trial folder", esc(v.trial_dir or "")),
            ("repair", esc(repair)),
        ]
    )


def _export(v: TrialView, frame: Frame) -> str:
    base = trial_base(v)
    downloads = ""
    if not v.has_config:
        return "<h2>Config</h2><p class='note'>no engine config was recorded for this trial</p>"
    if frame.served:
        downloads = (
            f'<p><a class="button" href="{base}/export.yaml" download="{esc(v.export_name)}">'
            "download YAML</a>"
            + (
                f' <a class="button" href="{base}/export.env" '
                f'download="{esc(v.export_name[:-5])}.env">download env file</a>'
                if v.export_env is not None
                else ""
            )
            + "</p>"
        )
    env = (
        f"<p>environment ({esc(v.export_name[:-5])}.env):</p><pre>{esc(v.export_env)}</pre>"
        if v.export_env is not None
        else ""
    )
    return (
        "<h2>Config</h2>"
        + downloads
        + f'<p>serve it: <code id="serve-cmd">{esc(v.serve_command)}</code> '
        '<button data-copy="serve-cmd">copy</button></p>'
        + f'<pre id="export-yaml">{esc(v.export_yaml)}</pre>'
        + env
    )


def _metrics(v: TrialView) -> str:
    if not v.measured and not v.latencies:
        note = "<h2>Metrics</h2><p class='note'>not measured: " + esc(v.reason or v.status) + "</p>"
        return note + _predicted(v)
    rows = [
        [
            esc(row.latency),
            *(num(row.values.get(s), ",.2f") for s in STATS),
            esc(row.interval_p99),
            num(row.spread_p99, ",.2f") if row.spread_p99 else "",
        ]
        for row in v.latencies
    ]
    latency = table(["latency (ms)", *STATS, "p99 90% interval", "p99 spread"], rows)
    others = table(["metric", "value"], [[esc(k), num(x)] for k, x in v.others])
    constraints = table(
        ["constraint", "value (≤ 0 holds)"],
        [[esc(k), num(x)] for k, x in sorted(v.constraints.items())],
    )
    engine = table(["engine fact", "value"], [[esc(k), num(x)] for k, x in v.engine.items()])
    return (
        f"<h2>Metrics</h2>{latency}{others}{_predicted(v)}"
        f"<h2>Constraints and engine</h2>{constraints}{engine}"
    )


def _predicted(v: TrialView) -> str:
    """The engine model's prediction beside the measurement (made before the trial ran)."""
    if not v.predicted:
        return ""
    rows = [
        [esc(name), num(low, ",.2f"), num(mid, ",.2f"), num(high, ",.2f"),
         num(measured, ",.2f") if measured is not None else "-"]
        for name, low, mid, high, measured in v.predicted
    ]  # fmt: skip
    head = ["predicted before it ran", "low", "predicted", "high", "measured"]
    return "<h2>Engine model</h2>" + table(head, rows)


def _distributions(v: TrialView) -> str:
    if not v.figures:
        return f"<h2>Latency distributions</h2><p class='note'>{esc(v.records_note)}</p>"
    return (
        "<h2>Latency distributions</h2>"
        f"<p class='note'>{esc(v.records_note)}</p>"
        '<div class="grid"><div class="card"><div id="ttft" class="chart"></div></div>'
        '<div class="card"><div id="tpot" class="chart"></div></div></div>'
    )


def _log(v: TrialView) -> str:
    if not v.log:
        return "<h2>Engine log</h2><p class='note'>no engine log for this trial</p>"
    return f"<h2>Engine log</h2><p class='note'>{esc(v.log_source)}</p><pre>{esc(v.log)}</pre>"


def _profile(v: TrialView, frame: Frame) -> str:
    p = v.profile
    if p is None:
        return ""
    ops = table(
        ["operator", "self ms", "share"],
        [[esc(o["name"]), num(o["self_ms"], ",.2f"), num(o["share"], ".1%")] for o in p.top_ops],
    )
    phases = (
        "<p>"
        + ", ".join(f"{esc(k.removesuffix('_share'))} {num(x, '.0%')}" for k, x in p.phases.items())
        + "</p>"
        if p.phases
        else ""
    )
    trace = ""
    if p.trace:
        url = f"{trial_base(v)}/profile/{quote(p.trace, safe='')}"
        trace = f"<p>trace: {frame.link(url, p.trace)}</p>" if frame.served else ""
    note = f"<p class='note'>{esc(p.note)}</p>" if p.note else ""
    return f"<h2>Profile</h2>{note}{phases}{trace}{ops if p.top_ops else ''}"


def trial_main(v: TrialView, frame: Frame) -> str:
    params = table(["parameter", "value"], [[esc(k), num(x, "")] for k, x in v.params.items()])
    return (
        f"<h1>Trial {v.number} of {esc(v.study)}</h1>"
        + _outcome(v, frame)
        + (f"<h2>Parameters</h2>{params}" if v.params else "")
        + _export(v, frame)
        + _metrics(v)
        + _distributions(v)
        + _profile(v, frame)
        + _log(v)
    )
