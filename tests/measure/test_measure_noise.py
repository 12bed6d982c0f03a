"""`measure` on a fake engine process: repeated runs on one engine, and early stopping."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from support import fake_settings, processes_mentioning

from autotune.bench import (
    LoadProfile,
    RequestSpec,
    pooled_summary,
    spread,
    summarize,
    with_intervals,
    with_rates,
)
from autotune.bench._records import read_records
from autotune.engine import EngineConfig
from autotune.measure import Workplan, load_measurement, measure, resummarized
from autotune.vocab.status import TrialStatus

CONFIG = EngineConfig(model="tiny", served_model_name="tiny", args={"max_num_seqs": 4})
REQUESTS = [RequestSpec([1, 2, 3, 4], 16) for _ in range(24)]
ENV = {"FAKE_ENGINE_STARTUP_S": "0.1", "FAKE_ENGINE_STEP_S": "0.005"}


def plan(repeats: int = 1) -> Workplan:
    return Workplan(
        [RequestSpec([1, 2], 4)], REQUESTS, LoadProfile(concurrency=4), {}, repeats=repeats
    )


def test_repeats_run_on_one_engine_and_pool_their_requests(tmp_path: Path) -> None:
    trial = tmp_path / "trial"
    m = measure(CONFIG, trial, plan(repeats=3), fake_settings(tmp_path, extra_env=ENV))

    assert m.ok, m.reason
    assert m.engine.repeats == 3
    log = (trial / "engine.log").read_text()
    assert log.count("$ ") == 1  # one engine start for the three runs
    batches = [read_records(trial / "runs" / f"run-{k}.jsonl") for k in range(3)]
    runs = [summarize(batch) for batch in batches]
    assert all(r.completed == len(REQUESTS) for r in runs)
    # The runs' requests pooled (latencies over all, rates over their steady windows), with
    # each metric's 90% interval, and what the engine counted over all three (the fake
    # engine's cache blocks are longer than these prompts: no hit).
    pooled = with_intervals(pooled_summary(batches), batches)
    assert m.summary == with_rates(pooled, m.engine.counters)
    assert m.summary.completed == 3 * len(REQUESTS)
    assert m.summary.intervals is not None and "p99_ttft_ms" in m.summary.intervals
    assert m.summary.prefix_cache_hit_rate == 0.0
    assert m.spread["output_throughput"] == spread(runs)["output_throughput"] >= 0
    # The saved measurement rebuilds the same medians and spread (resume, a lost store).
    saved = load_measurement(trial, {})
    assert saved is not None and saved.summary == m.summary and saved.spread == m.spread
    # Bounds fixed after the run (a relative SLO) re-summarize the records the measurement
    # holds, with no read: the same summary as the folder's, the trial folder gone or not.
    slos = {"p99_ttft_ms": 0.001}
    again = load_measurement(trial, slos)
    shutil.rmtree(trial)
    tight = resummarized(m, slos)
    assert again is not None and tight.summary == again.summary != m.summary
    assert tight.summary is not None and tight.summary.goodput == 0.0 < m.summary.goodput
    assert processes_mentioning(str(trial)) == []


def test_a_judged_run_stops_early_and_keeps_what_it_finished(tmp_path: Path) -> None:
    trial = tmp_path / "trial"

    def judge(finished: object) -> str | None:
        return "dominated (test)" if len(finished) >= 6 else None  # type: ignore[arg-type]

    m = measure(CONFIG, trial, plan(), fake_settings(tmp_path, extra_env=ENV), judge=judge)

    assert m.status == TrialStatus.PRUNED and m.reason == "dominated (test)" and not m.ok
    assert m.summary is not None and 6 <= m.summary.completed < len(REQUESTS)
    assert m.summary.errors == 0  # requests cut short are not errors of the engine
    assert m.engine.abort.kind == "pruned"
    data = json.loads((trial / "measurement.json").read_text())
    assert data["status"] == "pruned"
    saved = load_measurement(trial, {})
    assert saved is not None and saved.summary == m.summary
    assert processes_mentioning(str(trial)) == []
