"""The dashboard's words: metric labels, what became of a trial, and the colour of each."""

from __future__ import annotations

import re

from autotune.answer.selection import answers_otherwise
from autotune.store import TrialRecord
from autotune.vocab.status import TrialStatus

_NAMES = {
    "output_throughput": "output tok/s",
    "total_throughput": "total tok/s",
    "request_throughput": "requests/s",
    "goodput": "goodput (req/s)",
    "capacity_rps": "capacity (req/s)",
    "peak_memory_gib": "peak memory (GiB)",
    "error_rate": "error rate",
    "errors": "errors",
    "completed": "completed requests",
    "duration_s": "duration (s)",
}
_LATENCY = re.compile(r"(mean|p50|p90|p99)_(ttft|tpot|itl|e2e)_ms")
LATENCIES = ("ttft", "tpot", "itl", "e2e")
STATS = ("mean", "p50", "p90", "p99")

# What became of a trial (coarse), as the tables and the studies list count it.
RUNNING, QUEUED, OK, MISSES_SLO, ANSWERS_OTHERWISE, PRUNED, FAILED, SKIPPED, UNUSED = (
    "running",
    "queued",
    "ok",
    "misses SLO",
    "answers otherwise",  # measured, and below `--min-agreement`: the accuracy gate, no SLO
    "pruned",
    "failed",
    "skipped",
    "unused",
)

# Marker colours of the parameter map, by status group (failure kinds as the engine names them).
GROUP_COLOURS = {
    TrialStatus.OK: "#2ca02c",
    "ok, misses SLO": "#98df8a",
    "ok, answers otherwise": "#dbdb8d",
    TrialStatus.PRUNED: "#bcbd22",
    TrialStatus.OOM: "#d62728",
    TrialStatus.PREDICTED_OOM: "#ff9896",
    TrialStatus.KV_CAPACITY: "#e377c2",
    "timeout": "#ff7f0e",
    TrialStatus.CRASH: "#8c564b",
    TrialStatus.INVALID_CONFIG: "#9467bd",
    TrialStatus.UNSUPPORTED: "#17becf",
    TrialStatus.PREDICTED_UNSUPPORTED: "#9edae5",  # the light twin, as predicted_oom is
    TrialStatus.PREDICTED_WORSE: "#c5b0d5",
    TrialStatus.PREDICTED_INFEASIBLE: "#f7b6d2",
    "running": "#1f77b4",
}
OTHER_COLOUR = "#7f7f7f"
FEASIBLE_COLOUR = "#1f77b4"
INFEASIBLE_COLOUR = "#c7c7c7"


def metric_label(metric: str) -> str:
    """`p99_ttft_ms` -> `p99 TTFT (ms)`; `output_throughput` -> `output tok/s`."""
    if metric in _NAMES:
        return _NAMES[metric]
    m = _LATENCY.fullmatch(metric)
    return f"{m.group(1)} {m.group(2).upper()} (ms)" if m else metric


def outcome(t: TrialRecord) -> str:
    """What became of the trial: running, queued, ok, misses SLO, answers otherwise (its worst
    miss is the accuracy gate's, as `show` says it), pruned, failed (launched
    and failed, or interrupted), skipped (never launched: a predicted OOM, a duplicate, a
    config a rule rejects), unused (a slot another worker filled)."""
    if t.state == "running":
        return RUNNING
    if t.state == "waiting":
        return QUEUED
    if t.status == TrialStatus.UNUSED:
        return UNUSED
    if t.status == TrialStatus.PRUNED:
        return PRUNED
    if t.status == TrialStatus.OK:
        if t.feasible:
            return OK
        return ANSWERS_OTHERWISE if answers_otherwise(t) else MISSES_SLO
    if t.device_s is None and t.state == "complete":
        return SKIPPED
    return FAILED


def failure_kind(t: TrialRecord) -> str:
    """The failure kind of a failed or skipped trial (`oom`, `crash`, ...); empty otherwise."""
    return t.status if outcome(t) in (FAILED, SKIPPED) else ""


def status_group(t: TrialRecord) -> str:
    """The parameter map's colour group: `ok`, `ok, misses SLO`, `ok, answers otherwise`,
    `pruned`, a failure kind
    (`startup_timeout` and `hang` are both `timeout`), `running`."""
    kind = outcome(t)
    if kind == OK:
        return "ok"
    if kind in (MISSES_SLO, ANSWERS_OTHERWISE):
        return f"ok, {kind}"
    if kind in (RUNNING, QUEUED):
        return "running"
    if t.status in (TrialStatus.STARTUP_TIMEOUT, TrialStatus.HANG):
        return "timeout"
    return t.status or kind
