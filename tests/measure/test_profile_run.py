"""`profile_config` end to end against a fake engine that has vLLM's profiler endpoints."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from support import fake_settings, processes_mentioning

from autotune.bench import LoadProfile, RequestSpec, read_records
from autotune.engine import EngineConfig, LaunchSettings
from autotune.measure._profile import (
    ProfileError,
    ProfilePlan,
    main_trace,
    profile_config,
    summarize_trace,
    trace_files,
    wait_for_trace,
)
from autotune.vocab import layout

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "profile"
TRACE = FIXTURES / "trace.pt.trace.json.gz"
PROFILING_ENGINE = "{python} " + shlex.quote(str(FIXTURES / "fake_profiling_engine.py"))
CONFIG = EngineConfig(model="tiny", args={"max_num_seqs": 4})
PLAN = ProfilePlan(
    warmup=[RequestSpec(prompt=[1, 2, 3], max_tokens=2)],
    requests=[RequestSpec(prompt=[5, 6, 7, 8], max_tokens=4)] * 3,
    load=LoadProfile(concurrency=2),
    trace_timeout_s=10,
)
KEYS = {"trial", "trace", "top_ops", "phases", "vllm_version", "mechanism", "requests", "created"}


def settings(tmp_path: Path, command: str = PROFILING_ENGINE, **env: str) -> LaunchSettings:
    return fake_settings(
        tmp_path,
        command=command,
        extra_env={"FAKE_ENGINE_STARTUP_S": "0.1", "FAKE_PROFILE_TRACE": str(TRACE), **env},
    )


@pytest.mark.parametrize(
    ("version", "mechanism"), [("0.32.0", "profiler-config"), ("0.12.0", "env")]
)
def test_profile_writes_traces_log_requests_and_summary(
    tmp_path: Path, version: str, mechanism: str
) -> None:
    folder = layout.profile_dir(tmp_path / "studies" / "s1", 7)
    assert folder.name == "trial-0007"
    summary = profile_config(CONFIG, PLAN, settings(tmp_path), folder, 7, version)
    assert set(summary) == KEYS  # phases known: no phases_note
    assert summary["trial"] == 7 and summary["requests"] == 3
    assert summary["mechanism"] == mechanism and summary["vllm_version"] == version
    assert summary["trace"].startswith("rank0.") and (folder / summary["trace"]).is_file()
    assert json.loads((folder / layout.PROFILE_SUMMARY).read_text()) == summary
    assert summary["top_ops"][0] == {"name": "_C::onednn_mm", "self_ms": 66.533, "share": 0.6454}
    assert len(summary["top_ops"]) == 20
    assert summary["phases"]["steps"] == {"prefill": 2, "decode": 4}
    assert len(read_records(folder / "requests.jsonl")) == 3  # the profiled ones, not warm-up
    log = (folder / "engine.log").read_text()
    assert "fake vLLM engine" in log
    assert ("profiler_config" in log) == (mechanism == "profiler-config")
    assert not processes_mentioning(str(folder))


def test_a_second_profile_replaces_the_first(tmp_path: Path) -> None:
    folder = tmp_path / "trial-0001"
    profile_config(CONFIG, PLAN, settings(tmp_path), folder, 1, "0.32.0")
    (folder / "notes.txt").write_text("mine")
    profile_config(CONFIG, PLAN, settings(tmp_path), folder, 1, "0.32.0")
    traces = sorted(p.name for p in folder.glob("*.pt.trace.json.gz"))
    assert len(traces) == 2  # one worker trace and one API-server trace, of the last run
    assert (folder / "notes.txt").read_text() == "mine"
    assert (folder / "engine.log").read_text().count("fake vLLM engine") == 1


def test_a_server_without_profiler_endpoints_is_one_clear_error(tmp_path: Path) -> None:
    from support import FAKE_COMMAND

    folder = tmp_path / "p"
    with pytest.raises(ProfileError, match=r"no /start_profile: .*--profiler-config"):
        profile_config(CONFIG, PLAN, settings(tmp_path, FAKE_COMMAND), folder, 0, "0.32.0")
    assert not processes_mentioning(str(folder))


def test_an_engine_that_fails_to_start_says_how(tmp_path: Path) -> None:
    folder = tmp_path / "p"
    failing = settings(tmp_path, FAKE_ENGINE_FAIL="oom")
    with pytest.raises(ProfileError, match="the engine failed: oom"):
        profile_config(CONFIG, PLAN, failing, folder, 0, "0.32.0")
    assert (folder / "engine.log").is_file()


def test_wait_for_trace_waits_until_the_file_is_whole(tmp_path: Path) -> None:
    trace = tmp_path / "rank0.1.pt.trace.json.gz"
    whole = TRACE.read_bytes()
    steps = iter([b"", whole[:10], whole, whole])  # appears, grows, then stays
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s
        trace.write_bytes(next(steps))

    assert wait_for_trace(tmp_path, 10, poll_s=1, clock=lambda: now[0], sleep=sleep) == trace.name
    assert now[0] == 4


def test_wait_for_trace_gives_up(tmp_path: Path) -> None:
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    with pytest.raises(ProfileError, match="no trace appeared"):
        wait_for_trace(tmp_path, 5, poll_s=1, clock=lambda: now[0], sleep=sleep)


def test_main_trace_is_the_workers(tmp_path: Path) -> None:
    names = ["host_1.async_llm.9.pt.trace.json.gz", "rank0.9.pt.trace.json.gz"]
    paths = [tmp_path / n for n in names]
    for p in paths:
        p.write_bytes(b"x" * (100 if "async" in p.name else 10))
    assert main_trace(paths) == paths[1]
    assert main_trace(paths[:1]) is None


def test_a_trace_without_step_marks_has_no_phases_and_says_why(tmp_path: Path) -> None:
    import gzip

    trace = tmp_path / "rank0.1.pt.trace.json.gz"
    ops = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 5}]
    trace.write_bytes(gzip.compress(json.dumps({"traceEvents": ops}).encode()))
    summary = summarize_trace(trace, 2, "0.12.0", "env", 8)
    assert set(summary) == KEYS | {"phases_note"}
    assert summary["phases"] is None and "per-step marks" in summary["phases_note"]
    assert summary["top_ops"] == [{"name": "aten::mm", "self_ms": 0.005, "share": 1.0}]
    assert summary["created"].endswith("+00:00")


def test_an_npu_trace_is_found_in_its_ascend_pt_folder(tmp_path: Path) -> None:
    """torch_npu writes `<worker>_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json` (a Chrome
    trace in array form), not a file at the folder's top."""
    events = [{"ph": "X", "name": "aten::mm", "ts": 1, "dur": 5, "pid": 1, "tid": 1}]
    worker = tmp_path / "worker_0_4242_20260101_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    worker.mkdir(parents=True)
    (worker / "trace_view.json").write_text(json.dumps(events))
    front = tmp_path / "x.async_llm_1_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    front.mkdir(parents=True)
    (front / "trace_view.json").write_text(json.dumps(events * 50))  # larger, but the server's
    found = wait_for_trace(tmp_path, 10, poll_s=0, sleep=lambda s: None)
    assert found == "worker_0_4242_20260101_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json"
    assert len(trace_files(tmp_path)) == 2
