"""The best-config YAML: what `vllm serve --config` takes as it is, plus an env file."""

from __future__ import annotations

import math
import shlex
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist
from typing import Any

import yaml

from autotune.answer.repeats import Noise, compared
from autotune.answer.selection import (
    FALLBACK_Z,
    MARGIN_Z,
    SelectionError,
    closest,
    judged_percentile,
    margin,
    miss_text,
    misses,
    pareto_front,
    pick,
    slo_noise,
    study_objectives,
)
from autotune.devices import hardware_line, serve_command
from autotune.engine import config_file_mapping, env_file_text
from autotune.store import StudyFacts, TrialRecord
from autotune.vocab.numbers import interval_text, readable
from autotune.vocab.slo import slo_text

CONFIRMED = "confirmed winner: alternating re-runs paired with the baseline"


@dataclass(frozen=True)
class Exported:
    yaml_path: Path
    env_path: Path | None
    command: str


@dataclass(frozen=True)
class ExportText:
    """What an export writes: the YAML text, the env file's text (None without one), and the
    command that serves it."""

    yaml: str
    env: str | None
    command: str


def choose_export(
    records: Sequence[TrialRecord],
    facts: StudyFacts | Mapping[str, Any],
    rule: str | None = None,
    number: int | None = None,
    allow_infeasible: bool = False,
) -> tuple[TrialRecord, str]:
    """The trial `export` writes and how it was chosen: trial `number`, else the pick `rule`,
    else the confirmed winner when the study has one, else max-throughput. Raises
    SelectionError when nothing fits, InfeasibleError when nothing is feasible (unless
    `allow_infeasible`: then the measured trial closest to the constraints). Picks compare
    configs as `repeats.compared` does: as measured, a config's runs merged, and keep
    their SLOs clear of the noise the study's repeated runs measured (`selection.pick`), on
    the runs alone (pooled with the engine model's prediction, it held more configs that their
    other runs put past the bound: docs/prediction.md, benchmarks/pooled_margin.py).
    `facts`: the study's (a script's stored attributes are read as `StudyFacts`)."""
    facts = StudyFacts.read(facts)
    measured = slo_noise(records)
    if number is None:
        records = compared(records)
    if allow_infeasible and number is None:
        objectives = study_objectives(facts)
        near = closest(records)
        if not pareto_front(records, objectives) and near is not None:
            return near, "closest to the constraints; infeasible, --allow-infeasible"
    winner = facts.confirmed_winner
    if number is None and rule is None and winner is not None:
        number, how = winner, CONFIRMED
    else:
        how = f"trial {number}" if number is not None else f"pick {rule or 'max-throughput'}"
    relative = [s.metric for s in facts.all_slos if s.relative]
    chosen = pick(records, study_objectives(facts), rule or "", number, measured, relative)
    if how.startswith("pick "):
        how += margin_text(chosen, measured, relative)
    return chosen, how + _confirm_missed(chosen, facts)


def _confirm_missed(chosen: TrialRecord, facts: StudyFacts) -> str:
    """Where the confirm step re-measured `chosen` and found it missing the SLOs over its
    rounds, that (the search's runs had it feasible); empty otherwise."""
    confirm = facts.confirm or {}
    mine = (confirm.get("candidates") or {}).get(str(chosen.number))
    if "finished" not in confirm or not isinstance(mine, dict) or mine.get("holds", True):
        return ""
    return "; BUT the confirm step measured it missing the SLOs over its rounds"


def margin_text(chosen: TrialRecord, measured: dict[str, Noise], relative: list[str]) -> str:
    """How the pick's SLOs stand against the measured noise, for its header (empty without
    an SLO whose noise was measured)."""
    clear = margin(chosen, measured, relative)
    if clear == math.inf:
        return ""
    df = min(n.df for n in measured.values())
    sure = f"{_sure(clear)} sure, on {df} degree{'s' if df != 1 else ''} of freedom"
    if clear >= MARGIN_Z:
        return f"; its SLOs hold by {clear:.1f} sd of the noise measured ({sure})"
    held = next((z for z in FALLBACK_Z if clear >= z), None)
    surest = "" if held is None else f", the best of those held by {held:.1f} sd ({_sure(held)})"
    return (
        f"; within the noise measured of an SLO bound ({clear:.1f} sd, {sure}): no config "
        f"held them by {MARGIN_Z:.1f} sd (90%){surest}, so it may miss one on another run"
    )


def _sure(z: float) -> str:
    """The one-sided confidence of a margin of `z` normal sd: `94%`, `>99.9%`."""
    p = NormalDist().cdf(z)
    return ">99.9%" if p > 0.999 else f"{p:.0%}"


def default_choice(records: Sequence[TrialRecord], facts: StudyFacts) -> TrialRecord | None:
    """The trial a plain `autotune export` writes (the confirmed winner, else the pick of the
    front), as `show`, `studies` and the dashboard name it; None where export would refuse."""
    try:
        return choose_export(records, facts)[0]
    except SelectionError:
        return None


def header_lines(study: str, trial: TrialRecord, facts: StudyFacts, how: str) -> list[str]:
    """The comment header: where the config comes from and what it measured."""
    m, q = trial.metric, judged_percentile(facts)
    host = facts.host or {}
    vllm = trial.engine.vllm_version or ", ".join(
        f"{k} {v}" for k, v in (host.get("vllm") or {}).items()
    )
    lines = [
        f"vllm-autotune: study {study!r}, trial {trial.number} ({how})",
        f"config: {trial.description}" if trial.description else "",
        "BASELINE: vLLM's defaults as the study ran them" if trial.role == "baseline" else "",
        f"vLLM's batch defaults here: {facts.baseline_defaults}" if facts.baseline_defaults else "",
        f"measured: {m('output_throughput'):,.0f} output tok/s, {m('request_throughput'):.2f} req/s"
        f", TTFT p50/{q} {m('p50_ttft_ms'):.1f}/{m(f'{q}_ttft_ms'):.1f} ms"
        f", TPOT p50/{q} {m('p50_tpot_ms'):.2f}/{m(f'{q}_tpot_ms'):.2f} ms"
        if trial.measured
        else f"not measured: {trial.status} {trial.reason}".rstrip(),
        _runs_line(trial),
        _intervals_line(trial, q),
        _agreement_line(trial),
        _confirmed_line(trial, facts),
        f"INFEASIBLE: it misses {miss_text(trial)}" if trial.measured and misses(trial) else "",
        f"workload: {compact(facts.workload)}; load: {compact(facts.load)}",
        f"SLOs: {slo_text(facts.all_slos)}",
        f"vLLM: {vllm or 'unknown'}; host: {hardware_line(host)}",
    ]
    return [line for line in lines if line]


def _runs_line(trial: TrialRecord) -> str:
    """Where the values are the mean of a config's repeated runs (re-measures)."""
    if trial.runs <= 1:
        return ""
    return f"values: the mean of {trial.runs} runs of this config, as measured"


def _intervals_line(trial: TrialRecord, q: str) -> str:
    """How precisely the run measured the figures above (their 90% intervals; latencies at the
    percentile `q` the study judges), and what ended its batches."""
    shown = [
        (name, label, fmt)
        for name, label, fmt in (
            ("output_throughput", "output tok/s", ",.0f"),
            (f"{q}_ttft_ms", f"{q} TTFT", ".1f"),
            (f"{q}_tpot_ms", f"{q} TPOT", ".2f"),
        )
        if name in trial.intervals
    ]
    if not trial.measured or not shown:
        return ""
    parts = [
        f"{label} {interval_text(trial.metric(name), trial.intervals[name], fmt)}"
        for name, label, fmt in shown
    ]
    sized = f"; {trial.engine.sized}" if trial.engine.sized else ""
    return f"90% intervals of this run: {', '.join(parts)}{sized}"


def _agreement_line(trial: TrialRecord) -> str:
    """How its greedy outputs agreed with the baseline's (--min-agreement)."""
    tokens, exact = trial.metric("agreement_tokens"), trial.metric("agreement_exact")
    if tokens != tokens:
        return ""
    return (
        f"answers: {tokens:.0%} of the baseline's greedy tokens, {exact:.0%} of its prompts "
        "word for word"
    )


def _confirmed_line(trial: TrialRecord, facts: StudyFacts) -> str:
    """What the confirm step re-measured for this trial, and its verdict if it won."""
    confirm = facts.confirm
    if confirm is None or "finished" not in confirm:
        return ""
    verdict = (confirm.get("gain") or {}).get("verdict", "?")
    mine = (confirm.get("candidates") or {}).get(str(trial.number))
    if not isinstance(mine, dict) or mine.get("median") is None:
        # The baseline as the winner of a confirm step that had nothing else to run.
        return f"confirmed: {verdict}" if confirm.get("winner") == trial.number else ""
    metric, rounds = confirm.get("metric", "?"), confirm.get("rounds", "?")
    line = (
        f"confirmed: {metric} median {readable(mine['median'])} "
        f"±{readable(mine.get('spread') or 0.0)} over {rounds} alternating rounds"
    )
    if confirm.get("winner") in (trial.number, None):  # its verdict, or why none won
        line += f"; verdict: {verdict}"
    return line


def compact(value: Any, sep: str = ",") -> str:
    """A stored setting (workload, load, SLOs) on one line: `k=v` pairs, None values left out."""
    if isinstance(value, dict):
        return sep.join(f"{k}={v}" for k, v in value.items() if v is not None)
    return "" if value is None else str(value)


def render_export(
    study: str, trial: TrialRecord, facts: StudyFacts, yaml_path: str, how: str
) -> ExportText:
    """The export of `trial` as it is written to `yaml_path` (the path is named in the serve
    command): the one rendering `export` and the dashboard's download share."""
    env_path = Path(yaml_path).with_suffix(".env") if trial.env else None
    command = serve_command(yaml_path)
    if env_path is not None:
        command = f"set -a; . {shlex.quote(_sourced(str(env_path)))}; set +a; {command}"
    lines = [*header_lines(study, trial, facts, how), f"serve: {command}"]
    header = "".join(f"# {one_line(line)}\n" for line in lines)
    mapping = config_file_mapping(trial.config)
    body = yaml.safe_dump(mapping, sort_keys=False, default_flow_style=False)
    env = env_file_text(trial.env) if env_path is not None else None
    return ExportText(header + body, env, command)


def _sourced(path: str) -> str:
    """`path` as `.` must be given it: a bare name is looked up on $PATH (dash never looks in
    the current folder), and one starting with `-` would be read as an option."""
    return path if "/" in path and not path.startswith("-") else f"./{path}"


_BREAKING = frozenset({"Cc", "Cs", "Zl", "Zp"})  # control, surrogate, line and paragraph


def control_characters(text: str) -> list[str]:
    """The characters of `text` that would end a line of a YAML comment (PyYAML breaks lines at
    NEL and U+2028/9 too) or that YAML refuses to read: control characters, line and paragraph
    separators, lone surrogates (a file name's undecodable bytes)."""
    return [c for c in text if unicodedata.category(c) in _BREAKING or c in "\ufffe\uffff"]


def one_line(text: str) -> str:
    """`text` as one line of a comment: each of its `control_characters` escaped (`\\n`,
    `\\x1b`, `\\u2028`), so no value in a header (a description, a dataset path) can start
    a YAML key."""
    bad = set(control_characters(text))
    return "".join(c.encode("unicode_escape").decode() if c in bad else c for c in text)


def export_trial(
    study: str, trial: TrialRecord, facts: StudyFacts, out: Path, how: str
) -> Exported:
    """Write `out` (YAML) and, when the trial set environment variables, `out.env` beside it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    text = render_export(study, trial, facts, str(out), how)
    out.write_text(text.yaml)
    env_path = None
    if text.env is not None:
        env_path = out.with_suffix(".env")
        env_path.write_text(text.env)
    return Exported(out, env_path, text.command)
