"""Profile one trial's config: its engine, the torch profiler on, around a short benchmark.

The engine is started by the same launcher as a trial (own process group, teardown checked,
failures classified), with the profiler turned on as the installed vLLM understands (see
`autotune.engine._profiler`). The workload's warm-up runs first, unprofiled; then
`POST /start_profile`, `requests` of the workload's measured requests at the study's load,
`POST /stop_profile`, and a wait until the trace files are written whole. Everything stays in
`folder` (`ROOT/STUDY/profiles/trial-NNNN/`): the traces, the engine log, the requests and
`summary.json` (operators by self time, prefill vs decode steps; see `autotune.engine._trace`).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from autotune.bench import (
    AbortKind,
    BenchmarkAborted,
    Guard,
    LoadProfile,
    RequestSpec,
    run_benchmark,
    write_records,
)
from autotune.engine import (
    NO_STEP_MARKS,
    EngineConfig,
    EngineError,
    Failure,
    LaunchSettings,
    Mechanism,
    RunningEngine,
    TeardownError,
    TraceError,
    launch,
    profiling_mechanism,
    read_profiler_trace,
    reap_stale_engine,
    step_phases,
    top_ops,
    with_profiler,
)
from autotune.vocab import layout
from autotune.vocab.status import TrialStatus

logger = logging.getLogger(__name__)

TRACE_SUFFIXES = (".pt.trace.json.gz", ".pt.trace.json")
# torch_npu's profiler (vllm-ascend) writes each worker's parsed timeline, a Chrome trace, as
# `<worker>_<pid>_<time>_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json` under the folder.
ASCEND_TRACE = "ASCEND_PROFILER_OUTPUT/trace_view.json"
FRONTEND_MARK = ".async_llm"  # the API server's own trace (AsyncLLM), beside the worker's
_OWN_FILES = (layout.PROFILER_TABLE, layout.ENGINE_LOG, layout.REQUESTS, layout.PROFILE_SUMMARY)


class ProfileError(Exception):
    """The profile could not be taken; the message says why, for the user."""


@dataclass(frozen=True)
class ProfilePlan:
    """What a profile runs: the warm-up, then the profiled requests, at the study's load."""

    warmup: Sequence[RequestSpec]
    requests: Sequence[RequestSpec]
    load: LoadProfile
    hang_s: float | None = 120.0
    deadline_s: float | None = 1800.0
    trace_timeout_s: float = 300.0  # for the profiler to write its files after the stop
    http_timeout_s: float = 600.0  # for /start_profile and /stop_profile to answer


def profile_config(
    config: EngineConfig,
    plan: ProfilePlan,
    settings: LaunchSettings,
    folder: Path,
    trial: int,
    vllm_version: str | None,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """Run the profile of `config` into `folder` and return the summary it wrote there.

    Raises ProfileError when the engine fails (its failure kind and cause), the server has no
    profiler endpoints, the benchmark breaks or no trace appears; the engine is always torn
    down first."""
    mechanism = profiling_mechanism(vllm_version)
    reap_stale_engine(folder)  # one a killed earlier profile left running
    _clear(folder)
    config = with_profiler(config, folder, mechanism)
    try:
        with launch(config, settings, folder, clock=clock) as engine:
            _profiled_run(engine, config.api_model_name, plan, folder, mechanism, vllm_version)
            trace = wait_for_trace(folder, plan.trace_timeout_s)
    except EngineError as exc:
        raise ProfileError(f"the engine failed: {exc.failure.kind}: {exc.failure.reason}") from None
    except TeardownError as exc:
        raise ProfileError(str(exc)) from None
    summary = summarize_trace(folder / trace, trial, vllm_version, mechanism, len(plan.requests))
    (folder / layout.PROFILE_SUMMARY).write_text(json.dumps(summary, indent=1))
    return summary


def _profiled_run(
    engine: RunningEngine,
    model: str,
    plan: ProfilePlan,
    folder: Path,
    mechanism: Mechanism,
    version: str | None,
) -> None:
    """Warm-up, start, the profiled requests, stop; a broken run ends as ProfileError."""
    guard = Guard(probe=engine.probe, hang_s=plan.hang_s, deadline_s=plan.deadline_s)
    try:
        if plan.warmup:
            run_benchmark(engine.url, model, plan.warmup, (), plan.load, guard=guard)
        _post(engine.url, "/start_profile", plan.http_timeout_s, mechanism, version)
        records = run_benchmark(engine.url, model, (), plan.requests, plan.load, guard=guard)
    except BenchmarkAborted as aborted:  # the engine is torn down: no /stop_profile
        engine.mark_failed()
        failure = engine.failure(TrialStatus.CRASH)
        if aborted.abort.kind is not AbortKind.ENGINE:
            failure = Failure(TrialStatus.HANG, aborted.abort.reason)
        raise ProfileError(f"the benchmark broke off: {failure.kind}: {failure.reason}") from None
    _post(engine.url, "/stop_profile", plan.http_timeout_s, mechanism, version)
    write_records(folder / layout.REQUESTS, records)
    failed = [r for r in records if not r.ok]
    if len(failed) == len(records):
        raise ProfileError(f"no profiled request completed: {failed[0].error}")


def _post(url: str, path: str, timeout_s: float, mechanism: Mechanism, version: str | None) -> None:
    try:
        response = httpx.post(url + path, timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise ProfileError(f"POST {path} failed: {exc}") from None
    if response.status_code == 404:
        how = "--profiler-config" if mechanism == "profiler-config" else "VLLM_TORCH_PROFILER_DIR"
        raise ProfileError(
            f"the server has no {path}: the profiler did not turn on with {how} "
            f"(chosen for vLLM {version or 'unknown'}; is the engine command that vLLM?)"
        )
    if response.status_code != 200:
        raise ProfileError(f"POST {path}: HTTP {response.status_code}: {response.text[:200]}")


def trace_files(folder: Path) -> list[Path]:
    """The traces in `folder`: torch's at its top, torch_npu's in its `*_ascend_pt/` folders."""
    top = [p for p in folder.iterdir() if p.name.endswith(TRACE_SUFFIXES)]
    return sorted([*top, *folder.glob(f"*_ascend_pt/{ASCEND_TRACE}")])


def _label(path: Path) -> str:
    """What names a trace's process: its file name, or torch_npu's `*_ascend_pt` folder."""
    return path.parents[1].name if path.name == Path(ASCEND_TRACE).name else path.name


def main_trace(paths: Sequence[Path]) -> Path | None:
    """The worker's trace: rank 0's, else the largest one that is not the API server's."""
    workers = [p for p in paths if FRONTEND_MARK not in _label(p)]
    if not workers:
        return None
    ranked = [p for p in workers if _label(p).startswith("rank0")] or workers
    return max(ranked, key=lambda p: p.stat().st_size)


def wait_for_trace(
    folder: Path,
    timeout_s: float,
    poll_s: float = 0.5,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """The main trace (its path in `folder`) once it is written whole: readable, its size unchanged
    between two looks (the profiler may still flush after `/stop_profile` answers)."""
    deadline = clock() + timeout_s
    last: tuple[str, int] | None = None
    while True:
        found = main_trace(trace_files(folder))
        if found is not None:
            now = (str(found), found.stat().st_size)
            if now == last and now[1] > 0 and _readable(found):
                return str(found.relative_to(folder))
            last = now
        if clock() > deadline:
            what = "was never written whole" if found else "appeared"
            raise ProfileError(f"no trace {what} in {folder} within {timeout_s:.0f} s")
        sleep(poll_s)


def _readable(path: Path) -> bool:
    try:
        read_profiler_trace(path)
    except TraceError:
        return False
    return True


def summarize_trace(
    path: Path, trial: int, version: str | None, mechanism: Mechanism, requests: int
) -> dict[str, Any]:
    """The `summary.json` of a trace: top operators by self time, prefill vs decode steps."""
    events = read_profiler_trace(path)
    phases = step_phases(events)
    summary: dict[str, Any] = {
        "trial": trial,
        "trace": path.name,
        "top_ops": [
            {"name": op.name, "self_ms": op.self_ms, "share": op.share} for op in top_ops(events)
        ],
        "phases": None if phases is None else phases.to_dict(),
    }
    if phases is None:
        summary["phases_note"] = NO_STEP_MARKS
    summary.update(
        vllm_version=version,
        mechanism=mechanism,
        requests=requests,
        created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    )
    return summary


def _clear(folder: Path) -> None:
    """A new profile of the same trial replaces the last one's files (never others')."""
    folder.mkdir(parents=True, exist_ok=True)
    for path in folder.iterdir():
        own = path.name.endswith(TRACE_SUFFIXES) or path.name.endswith(_OWN_FILES)
        if path.is_file() and (own or path.name.startswith("engine.")):
            path.unlink()
