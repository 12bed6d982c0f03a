"""What the engine counted, per trial: the prefix cache's hit rate from vLLM's `/metrics`
counters (the fake engine keeps them as vLLM does), on the shared-prefix workload, with
caching off, and over repeated runs, which must not replay prompts the engine has cached."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.store import StudyStore
from cli.conftest import ENGINE_COMMAND, invoke

SHARED = "shared-prefix:groups=2,prefix=256,input=8,output=4,prompts=10,warmup=1"


def _tune(
    model: Path, root: Path, study: str, workload: str, *more: str, output: list[str] | None = None
) -> dict[str, float]:
    result = invoke(
        "tune", "--study", study, "--model", model, "--engine-command", ENGINE_COMMAND,
        "--space", "cpu-quick", "--workload", workload, "--concurrency", "2", "--root", root,
        "--trials", "1", "--precision", "off", *more,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    if output is not None:
        output.append(result.output)
    (trial,) = StudyStore(f"sqlite:///{root / study / 'study.db'}", create=False).trials(study)
    counted = json.loads((root / study / "trial-0000" / "measurement.json").read_text())
    assert counted["engine"]["counters"] == trial.engine.counters
    return trial.metrics


def test_shared_prefix_requests_hit_the_cache_their_group_filled(
    tiny_model: Path, tmp_path: Path
) -> None:
    printed: list[str] = []
    metrics = _tune(tiny_model, tmp_path, "shared", SHARED, output=printed)
    # 8 of 10 requests find their group's prefix: about 0.8 * 256/265 of the tokens, less the
    # partial block at the prefix's end.
    assert 0.6 < metrics["prefix_cache_hit_rate"] < 0.8
    assert "spec_acceptance_rate" not in metrics  # no speculation: not measured, not 0
    rate = f"{metrics['prefix_cache_hit_rate']:.0%}"
    assert f"0 errors, prefix cache {rate} (start-up" in printed[0]
    assert "drafts accepted" not in printed[0]


def test_no_caching_no_hit_rate(tiny_model: Path, tmp_path: Path) -> None:
    metrics = _tune(tiny_model, tmp_path, "off", SHARED, "--option", "enable_prefix_caching=false")
    assert "prefix_cache_hit_rate" not in metrics


def test_repeated_runs_do_not_replay_what_the_engine_cached(
    tiny_model: Path, tmp_path: Path
) -> None:
    workload = "random:input=64,output=4,prompts=8,warmup=1"
    metrics = _tune(tiny_model, tmp_path, "rep", workload, "--repeats", "3")
    # Three runs of the same 8 prompts would find runs 2 and 3 whole in the cache (~0.6).
    assert metrics["prefix_cache_hit_rate"] < 0.05
    runs = sorted((tmp_path / "rep" / "trial-0000" / "runs").glob("*.jsonl"))
    assert len(runs) == 3


def test_a_trace_is_replayed_at_its_own_times(tiny_model: Path, tmp_path: Path) -> None:
    """`tune` with a trace: each request is sent at its row's time / rate_scale (the client's
    send times, from requests.jsonl), with its row's lengths; no --rate is needed."""
    rows = [(0, 64, 4), (400, 32, 6), (1200, 128, 2), (1600, 64, 4)]
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(
        json.dumps({"timestamp": t, "input_length": i, "output_length": o, "hash_ids": [7]}) + "\n"
        for t, i, o in rows
    ))  # fmt: skip
    result = invoke(
        "tune", "--study", "tr", "--model", tiny_model, "--engine-command", ENGINE_COMMAND,
        "--space", "cpu-quick", "--workload", f"trace:path={trace},rate_scale=2,warmup=0,block=16",
        "--root", tmp_path, "--trials", "1",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    records = [
        json.loads(line)
        for line in (tmp_path / "tr" / "trial-0000" / "requests.jsonl").read_text().splitlines()
    ]
    sent = [r["send_time"] - records[0]["send_time"] for r in records]
    assert sent == pytest.approx([0.0, 0.2, 0.6, 0.8], abs=0.05)
    assert [r["output_tokens"] for r in records] == [4, 6, 2, 4]
    store = StudyStore(f"sqlite:///{tmp_path / 'tr' / 'study.db'}", create=False)
    assert (store.study_facts("tr").load or {})["trace"] is True
    refused = invoke(
        "tune", "--study", "tr2", "--model", tiny_model, "--space", "cpu-quick",
        "--workload", f"trace:path={trace}", "--rate", "5", "--root", tmp_path,
    )  # fmt: skip
    assert refused.exit_code == 2
    assert "a trace sets its own arrivals: drop --rate" in refused.output
