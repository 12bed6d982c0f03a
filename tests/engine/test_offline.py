"""The offline (batch) runner against tests/fake_offline.py, run as real process groups."""

from __future__ import annotations

import shlex
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest
from support import processes_mentioning

from autotune.bench import RequestSpec, summarize
from autotune.engine import (
    EngineConfig,
    EngineError,
    LaunchSettings,
    PeakMemory,
    build_offline_command,
    run_offline,
    to_yaml_text,
)
from autotune.engine._offline_main import read_engine_options
from autotune.vocab.status import TrialStatus

pytestmark = pytest.mark.usefixtures("no_leftovers")

FAKE_OFFLINE = Path(__file__).resolve().parents[1] / "fake_offline.py"
CONFIG = EngineConfig(model="tiny", args={"max_num_seqs": 4, "enforce_eager": True})
PROMPTS = [RequestSpec(prompt=[1, 2, 3, 4], max_tokens=8), RequestSpec("some text", 16)] * 3


def settings(tmp_path: Path, env: dict[str, str] | None = None, **kwargs: Any) -> LaunchSettings:
    values: dict[str, Any] = {
        "offline_command": "{python} " + shlex.quote(str(FAKE_OFFLINE)),
        "cache_dir": tmp_path / "cache",
        "startup_timeout_s": 20.0,
        "stop_timeout_s": 5.0,
        "poll_interval_s": 0.05,
        "extra_env": env or {},
    }
    values.update(kwargs)
    return LaunchSettings(**values)


def test_success_is_parsed_into_records(tmp_path: Path) -> None:
    trial = tmp_path / "trial"
    started = time.monotonic()
    result = run_offline(CONFIG, settings(tmp_path), trial, PROMPTS, deadline_s=300)
    assert time.monotonic() - started < 300  # done, not a hang (one would raise at 300 s)
    assert [r.index for r in result.records] == list(range(6))
    assert [r.output_tokens for r in result.records] == [8, 16] * 3
    assert [r.prompt_tokens for r in result.records] == [4, 2] * 3
    assert 0.1 <= result.startup_s < 5 and 0.2 <= result.generate_s < 5
    assert result.wall_s >= result.startup_s + result.generate_s
    first = result.records[0]
    assert len({r.send_time for r in result.records}) == 1  # one batch, sent at once
    assert first.first_token_time == pytest.approx(first.send_time + 0.01)
    assert first.token_times == () and all(r.ok for r in result.records)
    assert first.send_time < first.end_time < result.records[-1].end_time
    assert result.output_throughput == pytest.approx(72 / result.generate_s)
    summary = summarize(result.records)
    assert summary.completed == 6 and summary.output_throughput > 0
    assert summary.ttft_ms.p50 is not None and summary.tpot_ms.p50 is not None
    assert result.peak_memory_bytes is not None and result.peak_memory_bytes > 5 << 20
    # The inputs and the log are in the trial folder; the pid file is gone with the engine.
    assert (trial / "engine.yaml").read_text() == to_yaml_text(CONFIG)
    assert (trial / "prompts.jsonl").read_text().splitlines()[:2] == [
        '{"prompt": [1, 2, 3, 4], "max_tokens": 8}',
        '{"prompt": "some text", "max_tokens": 16}',
    ]
    log = (trial / "engine.log").read_text()
    assert str(FAKE_OFFLINE) in log.splitlines()[0] and "engine ready" in log
    assert (trial / "result.json").exists() and not (trial / "engine.pid").exists()


def test_an_earlier_attempts_log_is_set_aside(tmp_path: Path) -> None:
    """A retried trial's folder: the old log's ready line and OOM must not be read as new."""
    trial = tmp_path / "t"
    trial.mkdir()
    old = (
        "autotune-offline: engine ready in 1 s\n"
        "Worker proc VllmWorker-0 died unexpectedly (exit code: -9)\n"
    )
    (trial / "engine.log").write_text(old)
    slow = settings(tmp_path, {"FAKE_OFFLINE_STARTUP_S": "100"}, startup_timeout_s=1.0)
    with pytest.raises(EngineError) as info:
        run_offline(CONFIG, slow, trial, PROMPTS, deadline_s=100)
    assert info.value.failure.kind is TrialStatus.STARTUP_TIMEOUT
    assert (trial / "engine.before-1.log").read_text() == old
    assert "died unexpectedly" not in (trial / "engine.log").read_text()


def test_without_vllm_times_requests_end_with_the_batch(tmp_path: Path) -> None:
    env = {"FAKE_OFFLINE_NO_TIMES": "1"}
    result = run_offline(CONFIG, settings(tmp_path, env), tmp_path / "t", PROMPTS, None)
    ends = {r.end_time for r in result.records}
    assert len(ends) == 1 and all(r.first_token_time is None for r in result.records)
    assert ends.pop() - result.records[0].send_time == pytest.approx(result.generate_s)


def test_peak_memory_is_the_trees_resident_memory(tmp_path: Path) -> None:
    env = {"FAKE_OFFLINE_RSS_MB": "200", "FAKE_OFFLINE_GENERATE_S": "0.6"}
    result = run_offline(CONFIG, settings(tmp_path, env), tmp_path / "t", PROMPTS, None)
    assert result.peak_memory_bytes is not None and result.peak_memory_bytes > 200 << 20


def test_deadline_is_a_hang_and_nothing_is_left(tmp_path: Path) -> None:
    env = {"FAKE_OFFLINE_HANG": "1", "FAKE_OFFLINE_CHILD": "1"}
    started = time.monotonic()
    with pytest.raises(EngineError) as info:
        run_offline(CONFIG, settings(tmp_path, env), tmp_path / "t", PROMPTS, deadline_s=1.0)
    assert 1.0 <= time.monotonic() - started < 60  # the deadline, not the child's hang
    failure = info.value.failure
    assert failure.kind is TrialStatus.HANG
    assert failure.reason == "offline batch not done 1 s after start-up (deadline)"
    assert "engine ready" in failure.log_tail
    assert processes_mentioning(str(tmp_path)) == []


def test_cancel_raises_keyboard_interrupt_after_teardown(tmp_path: Path) -> None:
    cancel = threading.Event()
    hang = settings(tmp_path, {"FAKE_OFFLINE_HANG": "1", "FAKE_OFFLINE_CHILD": "1"}, cancel=cancel)
    timer = threading.Timer(1.5, cancel.set)
    timer.start()
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_offline(CONFIG, hang, tmp_path / "t", PROMPTS, deadline_s=60)
    finally:
        timer.cancel()
    assert time.monotonic() - started < 30  # the cancel, not the 60 s deadline
    assert processes_mentioning(str(tmp_path)) == []
    assert not (tmp_path / "t" / "engine.pid").exists()


def test_a_child_that_lingers_after_its_result_is_ended(tmp_path: Path) -> None:
    env = {"FAKE_OFFLINE_LINGER_S": "100"}
    started = time.monotonic()
    result = run_offline(CONFIG, settings(tmp_path, env, stop_timeout_s=1.0), tmp_path / "t",
                         PROMPTS, deadline_s=30)  # fmt: skip
    assert time.monotonic() - started < 50  # ended after its stop timeout, not its 100 s
    assert len(result.records) == len(PROMPTS)


def test_exit_without_result_is_a_crash(tmp_path: Path) -> None:
    env = {"FAKE_OFFLINE_NO_RESULT": "1"}
    with pytest.raises(EngineError) as info:
        run_offline(CONFIG, settings(tmp_path, env), tmp_path / "t", PROMPTS, 30)
    assert info.value.failure.kind is TrialStatus.CRASH
    assert info.value.failure.reason.startswith("offline run exited without writing result.json")


def test_server_only_options_are_refused_before_launch(tmp_path: Path) -> None:
    config = CONFIG.model_copy(update={"args": {"port": 8000, "api_server_count": 2}})
    with pytest.raises(EngineError) as info:
        run_offline(config, settings(tmp_path), tmp_path / "t", PROMPTS, 30)
    assert info.value.failure.kind is TrialStatus.INVALID_CONFIG
    assert "api_server_count, port" in info.value.failure.reason
    assert not (tmp_path / "t" / "engine.log").exists()


def test_build_offline_command_appends_or_fills_placeholders() -> None:
    paths = Path("/t/e.yaml"), Path("/t/p.jsonl"), Path("/t/r.json")
    argv = build_offline_command(LaunchSettings(), *paths)
    assert argv == [sys.executable, "-m", "autotune.engine._offline_main", "--config",
                    "/t/e.yaml", "--prompts", "/t/p.jsonl", "--out", "/t/r.json"]  # fmt: skip
    custom = LaunchSettings(offline_command="prlimit --as=1 {python} x.py {config} -o={out}")
    assert build_offline_command(custom, *paths) == [
        "prlimit", "--as=1", sys.executable, "x.py", "/t/e.yaml", "-o=/t/r.json",
    ]  # fmt: skip


def test_the_child_reads_the_engine_yaml_as_llm_keywords(tmp_path: Path) -> None:
    config = EngineConfig(
        model="/m/tiny",
        served_model_name="tiny",
        args={"max_num_seqs": 4, "compilation_config": {"mode": 0}, "enable_prefix_caching": False},
    )
    path = tmp_path / "engine.yaml"
    path.write_text(to_yaml_text(config, serve=False))  # as the offline runner writes it
    assert read_engine_options(path) == {
        "model": "/m/tiny",
        "served_model_name": "tiny",
        "compilation_config": {"mode": 0},
        "enable_prefix_caching": False,
        "max_num_seqs": 4,
        "disable_log_stats": False,  # vLLM keeps per-request times only with its stats
    }


class FakeSpawned:
    def __init__(self, pids: list[int]) -> None:
        self.process = SimpleNamespace(pid=999_999)
        self.pids = pids

    def tree(self) -> list[psutil.Process]:
        return [psutil.Process(pid) for pid in self.pids]


def test_peak_memory_on_cuda_sums_the_trees_pids() -> None:
    import os

    me = os.getpid()
    outputs = iter(
        [
            f"GPU-a, {me}, 1000\nGPU-b, {me}, 500\nGPU-a, 1, 7000\n",
            f"GPU-a, {me}, 3000\n",
            f"GPU-a, {me}, 10\n",
        ]
    )
    now = [0.0]
    memory = PeakMemory(
        FakeSpawned([me]), "cuda", run=lambda argv: next(outputs), clock=lambda: now[0]
    )  # type: ignore[arg-type]
    for t in (0.0, 1.0, 2.0, 4.0):  # the tool is asked at 0, 2 and 4 s
        now[0] = t
        memory.sample()
    assert memory.peak == 3000 << 20


def test_peak_memory_without_the_tool_is_unknown() -> None:
    import os

    def missing(argv: list[str]) -> str:
        raise FileNotFoundError(argv[0])

    memory = PeakMemory(FakeSpawned([os.getpid()]), "ascend", run=missing)  # type: ignore[arg-type]
    memory.sample()
    memory.sample()
    assert memory.peak is None
