"""`tune --load-client vllm-bench`: every trial measured by vLLM's own client (the real
`vllm bench serve` of the installed vLLM) against the fake engine, and stored as any trial."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from autotune.bench import read_records
from autotune.store import StudyStore

Invoke = Callable[..., Any]
TuneArgv = Callable[..., list[str | Path]]


def test_tune_measures_each_trial_with_vllm_bench_serve(
    cli: Invoke, tune_argv: TuneArgv, tmp_path: Path
) -> None:
    pytest.importorskip("vllm.benchmarks.serve")
    pytest.importorskip("pandas")
    result = cli(*tune_argv("vb", "--trials", "1", "--load-client", "vllm-bench"))
    assert result.exit_code == 0, result.output
    trial = tmp_path / "studies" / "vb" / "trial-0000"
    log = (trial / "engine.log").read_text()
    lines = [line for line in log.splitlines() if "completion requests with fields:" in line]
    # The warm-up, by autotune's client; then the measured requests, by vLLM's, which sends
    # repetition_penalty (autotune's does not).
    assert len(lines) == 2 and "repetition_penalty" not in lines[0], lines
    assert "repetition_penalty" in lines[1], lines
    records = read_records(trial / "requests.jsonl")
    assert len(records) == 8 and all(r.ok for r in records)  # WORKLOAD: 8 prompts, 8 out
    assert all(r.output_tokens == 8 and len(r.token_times) == 8 for r in records)
    assert all(r.ttft is not None and 0 < r.ttft < 5 for r in records)
    store = StudyStore(f"sqlite:///{tmp_path / 'studies' / 'vb' / 'study.db'}", create=False)
    (only,) = store.trials("vb")
    assert only.status == "ok" and only.metric("output_throughput") > 0
    assert only.metric("p50_tpot_ms") > 0


def test_tune_with_the_own_client_sends_no_vllm_fields(
    cli: Invoke, tune_argv: TuneArgv, tmp_path: Path
) -> None:
    """The check above can fail: autotune's own client's body has no repetition_penalty."""
    result = cli(*tune_argv("own", "--trials", "1"))
    assert result.exit_code == 0, result.output
    log = (tmp_path / "studies" / "own" / "trial-0000" / "engine.log").read_text()
    lines = [line for line in log.splitlines() if "completion requests with fields:" in line]
    assert len(lines) == 1 and "repetition_penalty" not in lines[0], lines
