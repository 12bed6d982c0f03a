"""What the dashboard shows, read from the store: the studies list and one study's view.

Each page has a view model (pydantic): the page renders it, and its JSON endpoint returns it.
Non-finite floats (`inf` latencies) become null in JSON.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from typing import Any

import optuna
from pydantic import BaseModel, ConfigDict, Field

from autotune.answer.export import choose_export, compact, default_choice, render_export
from autotune.answer.selection import (
    SelectionError,
    baseline,
    pareto_front,
    study_objectives,
)
from autotune.dashboard import _charts as charts
from autotune.dashboard._catalog import Catalog
from autotune.dashboard._importance import param_importance
from autotune.dashboard._labels import (
    ANSWERS_OTHERWISE,
    FAILED,
    MISSES_SLO,
    OK,
    PRUNED,
    RUNNING,
    SKIPPED,
    failure_kind,
    metric_label,
    outcome,
)
from autotune.devices import hardware_line
from autotune.store import (
    StudyFacts,
    StudyStore,
    TrialRecord,
    redact,
    storage_errors,
    study_records,
)
from autotune.vocab.slo import bounds_of, slo_text

LATENCY_Y = ("p99_ttft_ms", "p99_tpot_ms")  # always offered as the Pareto chart's y
KV_PARAMS = ("kv_cache_mib", "kv_cache_memory_bytes", "gpu_memory_utilization")


class View(BaseModel):
    model_config = ConfigDict(ser_json_inf_nan="null")

    def jsonable(self) -> dict[str, Any]:
        """The view as JSON types, with null for every non-finite float."""
        return finite(self.model_dump(mode="json"))


class StudyRow(View):
    """A study as the studies list shows it."""

    name: str
    model: str = ""
    hardware: str = ""
    platform: str = ""
    scenario: str = ""
    space: str = ""
    created: str = ""
    trials: int = 0
    done: int = 0
    failed: int = 0
    pruned: int = 0
    running: int = 0
    objective: str = ""
    direction: str = ""
    best: float | None = None
    best_trial: int | None = None


class ObjectiveView(View):
    metric: str
    direction: str
    label: str


class TrialRow(View):
    """One trial in a study's table."""

    number: int
    role: str = ""
    state: str
    outcome: str
    kind: str = ""
    reason: str = ""
    description: str = ""
    params: dict[str, Any] = Field(default_factory=dict)
    values: dict[str, float | None] = Field(default_factory=dict)
    device_s: float | None = None
    on_front: bool = False


class Winner(View):
    """The trial `autotune export` writes by default, and what it writes."""

    number: int
    how: str
    description: str
    yaml: str
    command: str


class ConfirmView(View):
    metric: str
    direction: str
    rounds: int | None = None
    finished: bool = False
    winner: int | None = None
    baseline: int | None = None
    verdict: str = ""
    candidates: list[dict[str, Any]] = Field(default_factory=list)


class StudyView(View):
    """Everything the study page shows."""

    row: StudyRow
    storage: str
    objectives: list[ObjectiveView]
    slos: dict[str, float] = Field(default_factory=dict)
    slo_text: str = "none"  # the bounds, and what a baseline-relative one came from
    workload: str = ""
    load: str = ""
    trials: list[TrialRow] = Field(default_factory=list)
    front: list[int] = Field(default_factory=list)
    baseline: int | None = None
    winner: Winner | None = None
    winner_note: str = ""
    confirm: ConfirmView | None = None
    importance: dict[str, float] = Field(default_factory=dict)
    importance_note: str = ""
    y_options: list[ObjectiveView] = Field(default_factory=list)
    param_names: list[str] = Field(default_factory=list)
    param_pair: list[str] = Field(default_factory=list)
    figures: dict[str, Any] = Field(default_factory=dict)
    signature: str = ""


class StudyState(View):
    """The cheap answer a page polls: has anything changed?"""

    name: str
    trials: int
    running: int
    signature: str


def finite(value: Any) -> Any:
    """`value` with every non-finite float replaced by None (JSON has no inf)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def read_study(store: StudyStore, name: str) -> tuple[optuna.Study, list[TrialRecord], StudyFacts]:
    """The Optuna study, its trials as records, and its attributes, in one read."""
    study = store.load(name)
    with storage_errors(store.url):
        return study, study_records(study), StudyFacts.of(study)


def signature(records: Sequence[TrialRecord], facts: StudyFacts) -> str:
    """Changes whenever a trial appears or changes state or status, or the confirm step moves."""
    marks = [(t.number, t.state, t.status) for t in records]
    text = json.dumps([marks, facts.confirm], sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def study_row(
    name: str,
    records: Sequence[TrialRecord],
    facts: StudyFacts,
    best: TrialRecord | None = None,
) -> StudyRow:
    """A study as the studies list shows it; `best`: the trial export writes, where the caller
    has it (else chosen here: one answer everywhere)."""
    metric, direction = study_objectives(facts)[0]
    kinds = [outcome(t) for t in records]
    best = best or default_choice(records, facts)
    return StudyRow(
        name=name,
        model=facts.model or "",
        hardware=hardware_line(facts.host) if facts.host else "",
        platform=facts.platform or "",
        scenario=facts.scenario or "online",
        space=facts.space or "",
        created=facts.created or "",
        trials=len(records),
        done=sum(k in (OK, MISSES_SLO, ANSWERS_OTHERWISE) for k in kinds),
        failed=sum(k in (FAILED, SKIPPED) for k in kinds),
        pruned=sum(k == PRUNED for k in kinds),
        running=sum(k == RUNNING for k in kinds),
        objective=metric,
        direction=direction,
        best=best.metric(metric) if best else None,
        best_trial=best.number if best else None,
    )


def study_rows(catalog: Catalog) -> list[StudyRow]:
    """Every study of the catalog, as the studies list shows it."""
    rows = []
    for info in catalog.studies():
        _, records, facts = read_study(catalog.store(info.name), info.name)
        rows.append(study_row(info.name, records, facts))
    return rows


def studies_signature(rows: Sequence[StudyRow]) -> str:
    """Changes whenever a study appears or its counts move."""
    text = json.dumps([(r.name, r.trials, r.running, r.done, r.failed, r.pruned) for r in rows])
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def study_state(catalog: Catalog, name: str) -> StudyState:
    _, records, facts = read_study(catalog.store(name), name)
    running = sum(outcome(t) == RUNNING for t in records)
    return StudyState(
        name=name, trials=len(records), running=running, signature=signature(records, facts)
    )


def default_params(names: Sequence[str]) -> list[str]:
    """The parameter map's default pair: max_num_seqs x the KV-cache size, where present."""
    first = "max_num_seqs" if "max_num_seqs" in names else (names[0] if names else "")
    kv = next((k for k in KV_PARAMS if k in names and k != first), None)
    kv = kv or next((k for k in names if "kv_cache" in k and "dtype" not in k), None)
    second = kv or next((k for k in names if k != first), "")
    return [first, second] if first and second and first != second else []


def y_options(
    objectives: Sequence[tuple[str, str]], slos: Sequence[str] = ()
) -> list[ObjectiveView]:
    """The Pareto chart's y choices: the other objectives, the SLOs' metrics (each an upper
    bound, drawn as its line), then p99 TTFT and p99 TPOT."""
    x = objectives[0][0]
    seen: dict[str, str] = {}
    lower = [*slos, *LATENCY_Y]
    for metric, direction in [*objectives[1:], *((m, "minimize") for m in lower)]:
        if metric != x and metric not in seen:
            seen[metric] = direction
    return [ObjectiveView(metric=m, direction=d, label=metric_label(m)) for m, d in seen.items()]


def winner(
    study: str, records: Sequence[TrialRecord], facts: StudyFacts
) -> tuple[TrialRecord | None, Winner | None, str]:
    """The trial `autotune export` picks by default, what it writes, or why there is none."""
    try:
        chosen, how = choose_export(records, facts)
    except SelectionError as exc:
        return None, None, str(exc).split(";")[0]
    text = render_export(study, chosen, facts, export_name(study, chosen.number), how)
    return (
        chosen,
        Winner(
            number=chosen.number,
            how=how,
            description=chosen.description,
            yaml=text.yaml,
            command=text.command,
        ),
        "",
    )


def export_name(study: str, number: int) -> str:
    """The download's file name (also the path its serve command names)."""
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in study)
    return f"{safe}-trial-{number}.yaml"


def confirm_view(facts: StudyFacts) -> ConfirmView | None:
    result = facts.confirm
    if result is None:
        return None
    candidates = [
        {"number": int(n), **c} for n, c in (result.get("candidates") or {}).items() if n.isdigit()
    ]
    return ConfirmView(
        metric=str(result.get("metric", "")),
        direction=str(result.get("direction", "maximize")),
        rounds=result.get("rounds"),
        finished="finished" in result,
        winner=result.get("winner"),
        baseline=result.get("baseline"),
        verdict=str((result.get("gain") or {}).get("verdict", "")),
        candidates=candidates,
    )


def trial_table_row(t: TrialRecord, columns: Sequence[str], front: set[int]) -> TrialRow:
    return TrialRow(
        number=t.number,
        role=t.role,
        state=t.state,
        outcome=outcome(t),
        kind=failure_kind(t),
        reason=t.reason,
        description=t.description,
        params=t.params,
        values={c: t.metric(c) for c in columns} if t.metrics else {},
        device_s=t.device_s,
        on_front=t.number in front,
    )


def study_view(catalog: Catalog, name: str) -> StudyView:
    """The study page's view: summary, charts, importance, trials, confirm result."""
    store = catalog.store(name)
    study, records, facts = read_study(store, name)
    objectives = study_objectives(facts)
    first = objectives[0]
    front = {t.number for t in pareto_front(records, objectives)}
    base = baseline(records)
    base_number = base.number if base else None
    picked, chosen, why_none = winner(name, records, facts)
    win_number = chosen.number if chosen else None
    slos = bounds_of(facts.all_slos)
    options = y_options(objectives, list(slos))
    names = sorted({k for t in records for k in t.params})
    pair = default_params(names)
    with storage_errors(store.url):
        importance, note = param_importance(study, *first)
    figures: dict[str, Any] = {
        "pareto": {
            o.metric: charts.pareto(
                records, first, (o.metric, o.direction), slos, base_number, win_number
            )
            for o in options
        },
        "history": charts.history(records, first),
        "params": charts.param_map(records, *pair)
        if pair
        else charts.empty("parameters", "the study has fewer than two parameters"),
        "importance": charts.importance(importance, note, first[0]),
    }
    columns = list(dict.fromkeys([first[0], *LATENCY_Y]))
    return StudyView(
        row=study_row(name, records, facts, picked),
        storage=redact(store.url),
        objectives=[
            ObjectiveView(metric=m, direction=d, label=metric_label(m)) for m, d in objectives
        ],
        slos=slos,
        slo_text=slo_text(facts.all_slos),
        workload=compact(facts.workload, ", "),
        load=compact(facts.load, ", "),
        trials=[trial_table_row(t, columns, front) for t in records],
        front=sorted(front),
        baseline=base_number,
        winner=chosen,
        winner_note=why_none,
        confirm=confirm_view(facts),
        importance=importance,
        importance_note=note,
        y_options=options,
        param_names=names,
        param_pair=pair,
        figures=figures,
        signature=signature(records, facts),
    )
