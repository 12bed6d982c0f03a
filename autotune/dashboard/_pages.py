"""The dashboard's pages as HTML: the studies list, a study, a trial, and errors."""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import quote

from autotune.answer.selection import confirm_slo_text
from autotune.dashboard._data import StudyRow, StudyView, TrialRow, finite
from autotune.dashboard._html import Frame, document, esc, facts, num, table
from autotune.dashboard._labels import (
    ANSWERS_OTHERWISE,
    FAILED,
    MISSES_SLO,
    OK,
    PRUNED,
    QUEUED,
    RUNNING,
    SKIPPED,
    metric_label,
)
from autotune.dashboard._trial import TrialView
from autotune.dashboard._trial_page import trial_main

BADGES = {
    OK: "ok",
    MISSES_SLO: "warn",
    ANSWERS_OTHERWISE: "warn",
    PRUNED: "warn",
    FAILED: "bad",
    SKIPPED: "bad",
    RUNNING: "run",
}


def study_url(name: str) -> str:
    return f"/studies/{quote(name, safe='')}"


def trial_url(name: str, number: int | str) -> str:
    return f"{study_url(name)}/trials/{number}"


def badge(text: str, kind: str = "") -> str:
    cls = BADGES.get(kind or text, "")
    return f'<span class="badge {cls}">{esc(text)}</span>'


def studies_page(frame: Frame, rows: Sequence[StudyRow], where: str, signature: str) -> str:
    cells = [
        [
            frame.link(study_url(r.name), r.name),
            esc(r.model),
            esc(r.hardware),
            esc(r.scenario),
            f"{r.done} / {r.failed} / {r.pruned}",
            f"{num(r.best)} {esc(r.objective)}" if r.best is not None else "-",
            esc(r.created),
            badge("running", RUNNING) if r.running else "",
        ]
        for r in rows
    ]
    headers = ["study", "model", "hardware", "scenario", "done / failed / pruned"]
    headers += ["winner (first objective)", "started", ""]
    body = (
        table(headers, cells)
        if rows
        else f'<p class="note">no study in {esc(where)} yet; this page refreshes itself.</p>'
    )
    main = f"<h1>Studies</h1><p class='note'>from {esc(where)}</p>{body}"
    return document(frame, "studies", main, poll="/api/studies", signature=signature)


def _select(id_: str, options: Sequence[tuple[str, str]], chosen: str) -> str:
    opts = "".join(
        f'<option value="{esc(v)}"{" selected" if v == chosen else ""}>{esc(label)}</option>'
        for v, label in options
    )
    return f'<select id="{id_}">{opts}</select>'


def _summary(v: StudyView, frame: Frame) -> str:
    r = v.row
    objectives = ", ".join(f"{o.label} ({o.direction[:3]})" for o in v.objectives)
    slos = esc(v.slo_text).replace("&lt;=", "≤")
    running = f" {badge(f'{r.running} running', RUNNING)}" if r.running else ""
    best = (
        f"{num(r.best)} ({frame.link(trial_url(r.name, r.best_trial), f'trial {r.best_trial}')})"
        if r.best is not None and r.best_trial is not None
        else "no feasible trial yet"
    )
    return facts(
        [
            ("model", esc(r.model)),
            ("hardware", esc(r.hardware)),
            ("scenario / platform / space", esc(f"{r.scenario} / {r.platform} / {r.space}")),
            ("workload", esc(v.workload)),
            ("load", esc(v.load)),
            ("objectives", esc(objectives)),
            ("SLOs", slos),
            (
                "trials",
                f"{r.trials}: {r.done} measured, {r.failed} failed or skipped, "
                f"{r.pruned} pruned{running}",
            ),
            (f"winner's {r.objective}", best),
            ("started", esc(r.created)),
            ("storage", esc(v.storage)),
        ]
    )


def _winner(v: StudyView, frame: Frame) -> str:
    w = v.winner
    if w is None:
        return f'<h2>Exported winner</h2><p class="note">none: {esc(v.winner_note)}</p>'
    link = frame.link(trial_url(v.row.name, w.number), f"trial {w.number}")
    return (
        f"<h2>Exported winner: {link}</h2>"
        f"<p>{esc(w.how)}; {esc(w.description)}</p>"
        f'<p>serve it: <code id="winner-cmd">{esc(w.command)}</code></p>'
        f"<details><summary>the exported YAML</summary><pre>{esc(w.yaml)}</pre></details>"
    )


def _confirm(v: StudyView, frame: Frame) -> str:
    c = v.confirm
    if c is None:
        return ""
    rows = []
    for cand in c.candidates:
        number = int(cand["number"])
        marks = (" (winner)" if number == c.winner else "") + (
            " (baseline)" if number == c.baseline else ""
        )
        values = ", ".join(num(x) for x in cand.get("values") or [])
        rows.append(
            [
                frame.link(trial_url(v.row.name, number), str(number)) + esc(marks),
                values,
                num(cand.get("median")),
                num(cand.get("spread")),
                num(cand.get("conservative")),
                esc(confirm_slo_text(cand)),
            ]
        )
    state = "" if c.finished else f" {badge('in progress', RUNNING)}"
    headers = ["trial", "runs", "median", "spread", "conservative", "SLOs: median measured / bound"]
    winner = "none" if c.winner is None else f"trial {c.winner}"
    if c.winner is not None and c.winner == c.baseline:
        winner += " (the baseline: your defaults)"
    return (
        f"<h2>Confirm step{state}</h2>"
        f"<p>{esc(c.rounds)} alternating rounds on {esc(c.metric)} ({esc(c.direction[:3])}); "
        f"winner: <b>{esc(winner)}</b>; verdict: <b>{esc(c.verdict or '?')}</b></p>"
        + table(headers, rows)
    )


def _trial_cells(t: TrialRow, v: StudyView, frame: Frame, columns: Sequence[str]) -> list[str]:
    winner = v.winner.number if v.winner is not None else None
    marks = [m for m, on in (("front", t.on_front), ("winner", t.number == winner)) if on]
    values = [num(t.values.get(c)) for c in columns] if t.values else ["-"] * len(columns)
    return [
        frame.link(trial_url(v.row.name, t.number), str(t.number)),
        esc(" ".join([t.role, *marks]).strip()),
        badge(t.outcome),
        esc(t.kind),
        esc(t.reason[:300]),
        esc(t.description),
        *values,
        num(t.device_s, ".1f"),
    ]


def _trials_table(v: StudyView, frame: Frame) -> str:
    columns = next((list(t.values) for t in v.trials if t.values), [])
    labels = [metric_label(c) for c in columns]
    headers = ["trial", "role", "status", "failure kind", "reason", "config", *labels]
    rows = [_trial_cells(t, v, frame, columns) for t in v.trials]
    return table([*headers, "device s"], rows)


def study_main(v: StudyView, frame: Frame) -> str:
    name = v.row.name
    y_chosen = v.y_options[0].metric if v.y_options else ""
    y_select = _select("pareto-y", [(o.metric, o.label) for o in v.y_options], y_chosen)
    px, py = [*v.param_pair, "", ""][:2]
    options = [(p, p) for p in v.param_names]
    param_selects = _select("param-x", options, px) + " x " + _select("param-y", options, py)
    optuna = (
        f' <a class="button" href="{esc(frame.optuna_url)}">open in optuna-dashboard</a>'
        if frame.optuna_url
        else ""
    )
    first = v.objectives[0].label
    charts = (
        '<div class="grid">'
        f'<div class="card"><div>Pareto front: {esc(first)} vs {y_select}</div>'
        '<div id="pareto" class="chart"></div></div>'
        '<div class="card"><div>History</div><div id="history" class="chart"></div></div>'
        f'<div class="card"><div>Parameters: {param_selects}</div>'
        '<div id="params" class="chart"></div></div>'
        '<div class="card"><div>Importance</div><div id="importance" class="chart"></div></div>'
        "</div>"
    )
    return (
        f"<h1>Study {esc(name)}{optuna}</h1>"
        + _summary(v, frame)
        + _winner(v, frame)
        + _confirm(v, frame)
        + "<h2>Charts</h2><p class='note'>Grey points miss a constraint; dashed red lines "
        "are SLO bounds; click a point to open its trial.</p>"
        + charts
        + f"<h2>Trials ({len(v.trials)})</h2>"
        + _trials_table(v, frame)
    )


def study_page(v: StudyView, frame: Frame) -> str:
    data = {
        "figures": finite(v.figures),
        "params": {str(t.number): t.params for t in v.trials},
        "trialUrl": trial_url(v.row.name, "{n}") if frame.served else None,
    }
    poll = f"/api{study_url(v.row.name)}/state"
    title = f"study {v.row.name}"
    return document(frame, title, study_main(v, frame), poll=poll, signature=v.signature, data=data)


def trial_page(v: TrialView, frame: Frame) -> str:
    live = v.outcome in (RUNNING, QUEUED)
    poll = f"/api{study_url(v.study)}/state" if live else None
    data = {"figures": finite(v.figures), "trialUrl": None}
    title = f"{v.study} trial {v.number}"
    return document(frame, title, trial_main(v, frame), poll=poll, signature=v.signature, data=data)


def error_page(frame: Frame, status: str, message: str, known: Sequence[str] = ()) -> str:
    listed = ""
    if known:
        links = ", ".join(frame.link(study_url(k), k) for k in known)
        listed = f"<p>known studies: {links}</p>"
    main = f"<h1>{esc(status)}</h1><div class='error'><p>{esc(message)}</p>{listed}</div>"
    return document(frame, status, main)
