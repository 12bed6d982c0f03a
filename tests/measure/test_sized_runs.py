"""A trial's run sized to its decision: batches on one warm engine until precise, or a cap."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from support import fake_settings

from autotune.bench import LoadProfile, Precision, RequestSpec, read_records
from autotune.engine import EngineConfig
from autotune.measure import Measurement, Turns, Workplan, load_measurement, measure

CONFIG = EngineConfig(model="tiny", served_model_name="tiny", args={"max_num_seqs": 8})
ENV = {"FAKE_ENGINE_STARTUP_S": "0.1", "FAKE_ENGINE_STEP_S": "0.004"}


def requests(k: int) -> list[RequestSpec]:
    return [RequestSpec([k, i, 3], 16) for i in range(24)]


def plan(slos: dict[str, float], precision: Precision) -> Workplan:
    return Workplan(
        requests(100), requests(0), LoadProfile(concurrency=8), slos, precision=precision,
        rerun=requests,
    )  # fmt: skip


def test_a_p90_slo_runs_until_its_percentile_has_support(tmp_path: Path) -> None:
    # A p90 needs 100 requests (10 expected above it); a batch is 24: five batches.
    loose = Precision(throughput=1.0, slo=1.0)
    m = measure(CONFIG, tmp_path / "t", plan({"p90_ttft_ms": 5000.0}, loose), fake_settings(
        tmp_path, extra_env=ENV))  # fmt: skip
    assert m.ok, m.reason
    assert m.engine.repeats == 5 and m.summary is not None
    assert m.summary.completed == 5 * 24  # every batch's requests pooled
    assert m.engine.sized is not None and m.engine.sized.startswith("precise: 5 batches")
    assert (tmp_path / "t" / "engine.log").read_text().count("$ ") == 1  # one engine
    # Each metric carries its interval; the p90 over 120 requests is bounded both ways.
    lo, hi = m.summary.intervals["p90_ttft_ms"]
    assert lo <= m.summary.ttft_ms.p90 <= hi < float("inf")
    # The folder gives back the same pooled summary (resume, a lost store).
    again = load_measurement(tmp_path / "t", {"p90_ttft_ms": 5000.0})
    assert again is not None and again.summary == m.summary


def test_a_run_that_cannot_get_precise_stops_at_its_cap_and_says_so(tmp_path: Path) -> None:
    # A p99 needs 1,000 requests: the cap of 3 batches ends the run first.
    capped = Precision(throughput=1.0, slo=1.0, max_batches=3)
    m = measure(CONFIG, tmp_path / "t", plan({"p99_ttft_ms": 5000.0}, capped), fake_settings(
        tmp_path, extra_env=ENV))  # fmt: skip
    assert m.ok and m.engine.repeats == 3
    assert m.engine.sized is not None and m.engine.sized.startswith("cap: 3 batches")
    stored = json.loads((tmp_path / "t" / "measurement.json").read_text())
    assert stored["engine"]["sized"] == m.engine.sized
    # The p99 of 72 requests cannot bound its tail: no upper end.
    assert m.summary is not None and m.summary.intervals["p99_ttft_ms"][1] == float("inf")


def test_a_degraded_batch_is_voided_kept_and_made_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch 45% slower than the ones before it (a bad window of the host, not the config)
    is left out of the trial's metrics, kept in voided/, and made again on other prompts."""
    from autotune.bench import RequestRecord
    from autotune.measure import _runs

    steps = iter([0.02, 0.021, 0.019, 0.02, 0.036, 0.02, 0.02])
    drawn: list[int] = []

    def scripted(url, model, warmup, requests, profile, **kwargs):  # type: ignore[no-untyped-def]
        step = next(steps)
        drawn.append(requests[0].prompt[0])
        return [
            RequestRecord(i, 0.0, step, tuple(step * (k + 1) for k in range(16)), 16 * step, 3, 16)
            for i in range(len(requests))
        ]

    monkeypatch.setattr(_runs, "run_benchmark", scripted)
    plan = Workplan(
        [], requests(0), LoadProfile(concurrency=8), {}, repeats=6, rerun=requests
    )  # fmt: skip
    runner = _runs.Runner("http://x", "tiny", plan, None, tmp_path, lambda: None)
    done = runner.run_plan()
    assert len(done.runs) == 6 and len(list((tmp_path / "runs").glob("*.jsonl"))) == 6
    (voided,) = runner.voided
    assert voided.reason == "degraded" and (tmp_path / voided.records).exists()
    assert drawn == [0, 1, 2, 3, 4, 5, 6]  # the remade batch draws prompts of its own


def test_batches_a_hiccup_spoiled_leave_the_trials_metrics_the_first_included(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches cut to a fifth of their rate by a freeze of the host: the first (nothing before
    it to judge it by) and one after the remakes ran out. Once the batches are over each is
    judged against all the others: both leave the pooled metrics, move to voided/ and runs/
    is renumbered; the cap counts every batch measured."""
    from autotune.bench import RequestRecord
    from autotune.measure import _runs

    monkeypatch.setattr(_runs, "MAX_VOIDED", 0)  # no remake: only the end's judgement
    steps = iter([0.1, 0.02, 0.021, 0.019, 0.02, 0.1, 0.02, 0.02, 0.021])

    def scripted(url, model, warmup, requests, profile, **kwargs):  # type: ignore[no-untyped-def]
        step = next(steps)
        return [
            RequestRecord(i, 0.0, step, tuple(step * (k + 1) for k in range(16)), 16 * step, 3, 16)
            for i in range(len(requests))
        ]

    monkeypatch.setattr(_runs, "run_benchmark", scripted)
    capped = Precision(throughput=1.0, slo=1.0, max_batches=8)  # 8 judged wanted: the cap
    plan = Workplan([], requests(0), LoadProfile(concurrency=8), {}, precision=capped,
                    repeats=8, rerun=requests)  # fmt: skip
    runner = _runs.Runner("http://x", "tiny", plan, None, tmp_path, lambda: None)
    done = runner.run_plan()
    assert runner.sized is not None and runner.sized.startswith("cap: 8 batches")
    assert len(done.runs) == 6  # 8 measured, 2 left out
    assert sorted(p.name for p in (tmp_path / "runs").glob("*.jsonl")) == [
        f"run-{k}.jsonl" for k in range(6)
    ]
    assert all(r.ttft <= 0.021 for run in done.runs for r in run)  # none of the slow ones
    assert [v.reason for v in runner.voided] == ["degraded", "degraded"]
    assert all((tmp_path / v.records).exists() for v in runner.voided)


def test_a_host_that_stalls_run_after_run_keeps_the_third_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from autotune.bench import RequestRecord, Stall
    from autotune.measure import _runs

    class AlwaysStalled:
        def stall(self, timekeeping: object = None) -> Stall:
            return Stall(0.6, 0.25)

    def scripted(url, model, warmup, requests, profile, **kwargs):  # type: ignore[no-untyped-def]
        return [RequestRecord(i, 0.0, 0.1, (0.1, 0.2), 0.2, 3, 2) for i in range(len(requests))]

    monkeypatch.setattr(_runs, "StallWatch", AlwaysStalled)
    monkeypatch.setattr(_runs, "run_benchmark", scripted)
    plan = Workplan([], requests(0), LoadProfile(concurrency=8), {}, rerun=requests)
    runner = _runs.Runner("http://x", "tiny", plan, None, tmp_path, lambda: None)
    done = runner.run_plan()
    assert len(done.records) == 24  # measured, not failed: voiding again would not help
    assert [v.reason for v in runner.voided] == ["stall", "stall"]
    assert runner.stall_kept == 0.6


def test_in_turns_an_engine_that_ends_first_waits_before_its_summary_and_teardown(
    tmp_path: Path,
) -> None:
    """Its cap ends it after one batch; the other goes on for two more. Its work after the
    batches (summary, teardown) comes after the other's last batch, not beside it."""
    turns = Turns(2, turn_s=0.0)
    caps = (1, 3)
    returned: list[float] = [0.0, 0.0]
    measured: list[Measurement | None] = [None, None]

    def one(i: int) -> None:
        env = {**ENV, "FAKE_ENGINE_EXIT_DELAY_S": "0", "FAKE_ENGINE_STEP_S": "0.01"}
        p = plan({}, Precision(throughput=0.001, max_batches=caps[i]))
        measured[i] = measure(CONFIG, tmp_path / f"e{i}", p, fake_settings(tmp_path,
                              extra_env=env), turn=turns.party(i))  # fmt: skip
        returned[i] = time.monotonic()

    threads = [threading.Thread(target=one, args=(i,)) for i in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert all(m is not None and m.ok for m in measured), measured
    assert turns.batches == [0, 1, 1, 1]
    last = max(r.end_time for r in read_records(tmp_path / "e1" / "runs" / "run-2.jsonl"))
    assert returned[0] >= last
